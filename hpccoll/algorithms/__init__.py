"""Algorithm families; importing this package registers every planner.

One module per family (docs/DESIGN.md): each module's planners are pure functions
``Call -> Program`` registered with :func:`hpccoll.registry.register`.
"""

from . import csc, direct, ring  # noqa: F401
from . import pairwise  # noqa: F401
from . import hypercube  # noqa: F401
from . import bruck  # noqa: F401
from . import mesh  # noqa: F401
from . import multiring  # noqa: F401
from . import rat  # noqa: F401
from . import tree  # noqa: F401
# registered last: where the cost model predicts a tie, auto keeps the older algorithm
from . import pat  # noqa: F401
from . import swing  # noqa: F401
from . import bine  # noqa: F401
