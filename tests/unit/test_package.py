"""What the package says about itself: its version (one, in hpccoll/__init__.py, which
setup.cfg reads), its licence file, a namespace of public names only, and the collectives'
public functions, made from their specs, as they were written by hand."""

from __future__ import annotations

import configparser
import dis
import inspect
import pydoc
import re
import typing
from importlib import metadata
from pathlib import Path

import pytest

import hpccoll
from hpccoll.collectives import SPECS
from hpccoll.requests import PersistentRequest, Request

ROOT = Path(__file__).resolve().parents[2]


def test_one_version():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert setup["metadata"]["version"] == "attr: hpccoll.__version__"
    assert metadata.version("hpccoll") == hpccoll.__version__


def test_the_declared_licence_is_shipped():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    assert setup["metadata"]["license"] == "BSD-3-Clause"
    assert setup["metadata"]["license_files"] == "LICENSE"
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License\n\nCopyright (c) 2026, the hpccoll developers")
    assert "3. Neither the name of the copyright holder" in text


def test_dir_shows_public_names_only():
    names = dir(hpccoll)
    assert not {"Any", "annotations", "importlib"} & set(names)
    assert [name for name in names if name.startswith("_")] == ["__version__"]
    assert set(hpccoll.__all__) <= set(names)


# The collectives' public functions, as they were written out by hand before api.py made them
# from the specs: parameters (keyword-only after the buffers), defaults, type hints.
SIGNATURES = {
    "allgather": "(comm, sendbuf, recvbuf, *, recvcounts=None, algorithm='auto', options=None)",
    "alltoall": "(comm, sendbuf, recvbuf, *, algorithm='auto', options=None)",
    "alltoallv": "(comm, sendbuf, recvbuf, *, algorithm='auto', options=None)",
    "reduce_scatter": "(comm, sendbuf, recvbuf, *, recvcounts=None, op=SUM, algorithm='auto', "
                      "options=None)",
    "allreduce": "(comm, sendbuf, recvbuf, *, op=SUM, algorithm='auto', options=None)",
    "bcast": "(comm, buf, *, root=0, algorithm='auto', options=None)",
    "reduce": "(comm, sendbuf, recvbuf, *, op=SUM, root=0, algorithm='auto', options=None)",
}
HINTS = {"comm": "MPI.Intracomm", "sendbuf": "Any", "recvbuf": "Any", "buf": "Any",
         "recvcounts": "Any", "op": "Any", "root": "int", "algorithm": "str",
         "options": "Mapping[str, Any] | None"}


def plain(function) -> str:
    """``function``'s signature without type hints, MPI.SUM shown as SUM."""
    from mpi4py import MPI
    signature = inspect.signature(function)
    parameters = [p.replace(annotation=p.empty,
                            default=Sum() if p.default is MPI.SUM else p.default)
                  for p in signature.parameters.values()]
    return str(signature.replace(parameters=parameters, return_annotation=signature.empty))


class Sum:
    def __repr__(self) -> str:
        return "SUM"


def test_every_spec_has_its_three_functions_exported():
    made = [name for spec in SPECS.values() for name in spec.functions]
    assert made == [form.format(c) for c in SIGNATURES for form in ("{}", "i{}", "{}_init")]
    assert set(made) | {"allgather_stream"} == \
        {name for name in hpccoll.__all__ if inspect.isfunction(getattr(hpccoll, name)) and
         getattr(hpccoll, name).__module__ in ("hpccoll.api", "hpccoll.streaming")}
    assert len(hpccoll.__all__) == len(set(hpccoll.__all__))
    for name in hpccoll.__all__:
        assert getattr(hpccoll, name) is not None


@pytest.mark.parametrize("collective", SIGNATURES)
def test_functions_keep_their_signatures_hints_and_docstrings(collective):
    blocking, nonblocking, persistent = (getattr(hpccoll, name)
                                         for name in SPECS[collective].functions)
    for function, returns in ((blocking, None), (nonblocking, Request),
                              (persistent, PersistentRequest)):
        assert plain(function) == SIGNATURES[collective]
        assert function.__annotations__ == {
            **{name: HINTS[name] for name in inspect.signature(function).parameters},
            "return": returns.__name__ if returns else "None"}
        hints = typing.get_type_hints(function)        # resolvable, as IDEs resolve them
        assert hints["return"] is (returns or type(None)) and hints["algorithm"] is str
        assert function.__module__ == "hpccoll.api" and function.__name__ == \
            function.__qualname__ == function.__code__.co_name
    assert blocking.__doc__ == SPECS[collective].doc and len(blocking.__doc__) > 40
    assert nonblocking.__doc__ == f"Non-blocking :func:`{collective}`."
    assert persistent.__doc__ == \
        f"Persistent :func:`{collective}`: plan once, ``start()``/``wait()`` many times."
    shown = pydoc.render_doc(blocking, renderer=pydoc.plaintext)
    assert f"{collective}(comm: 'MPI.Intracomm'," in shown
    assert SPECS[collective].doc.split()[2] in shown


@pytest.mark.parametrize("collective", SIGNATURES)
def test_functions_call_the_api_directly(collective):
    """No layer between a function and the call it makes (each frame costs ~0.1 us on the
    repeat path): its code loads one global, run_collective / start_collective /
    init_collective, and passes the collective's name as a constant."""
    called = ("run_collective", "start_collective", "init_collective")
    for name, target in zip(SPECS[collective].functions, called):
        code = getattr(hpccoll, name).__code__
        assert code.co_names == (target,) and collective in code.co_consts
        source = inspect.getsource(getattr(hpccoll, name))     # shown, as in tracebacks
        assert source.startswith(f"def {name}(comm, ") and f"{target}({collective!r}, comm, " \
            in source and code.co_filename == f"<hpccoll.api: {name}>"
        assert [i.opname for i in dis.get_instructions(code)].count("CALL") == 1


def test_bad_arguments_are_refused_by_python_as_before():
    with pytest.raises(TypeError, match="recvcounts"):
        hpccoll.allreduce(None, None, None, recvcounts=[1])
    with pytest.raises(TypeError, match="positional"):
        hpccoll.ibcast(None, None, 0)
    with pytest.raises(TypeError, match="sendbuf"):
        hpccoll.bcast_init(None, None, sendbuf=None)


def test_topology_is_the_module_and_get_topology_the_function():
    """One name, one thing: ``hpccoll.topology`` is the module (Topology, from_spec, ...),
    ``hpccoll.get_topology(comm)`` / ``set_topology(comm, ...)`` the communicator's."""
    import hpccoll.topology
    from hpccoll import context
    assert inspect.ismodule(hpccoll.topology) and hpccoll.Topology is hpccoll.topology.Topology
    assert hpccoll.get_topology is context.get_topology and "get_topology" in hpccoll.__all__
    assert "topology" not in hpccoll.__all__ and not hasattr(context, "topology")


def test_api_py_names_no_collective():
    """The functions are made from the specs: api.py names no collective (an attribute such
    as ``prepared.reduce``, the reduction, is not one)."""
    source = (ROOT / "hpccoll" / "api.py").read_text()
    for spec in SPECS.values():
        for name in spec.functions:
            assert not re.search(rf"(?<![.\w]){name}\b", source), name
