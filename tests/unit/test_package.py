"""What the package says about itself: its version (one, in hpccoll/__init__.py, which
setup.cfg reads), its licence file, a namespace of public names only, and the collectives'
public functions, made from their specs, as they were written by hand; so are
``hpccoll.Comm``'s methods and the C functions the compiled native executor posts."""

from __future__ import annotations

import ast
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
from hpccoll.collectives import SPECS, nonblocking
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
    init_collective, and passes the collective's name as a constant -- the blocking and
    non-blocking ones after their C entry (the global ``_entry_<collective>``,
    ``_start_<collective>``), called with its arguments."""
    called = ("run_collective", "start_collective", "init_collective")
    entries = (f"_entry_{collective}", f"_start_{collective}", None)
    for name, target, entry in zip(SPECS[collective].functions, called, entries):
        code = getattr(hpccoll, name).__code__
        entry = () if entry is None else (entry,)
        assert code.co_names == (*entry, target) and collective in code.co_consts
        source = inspect.getsource(getattr(hpccoll, name))     # shown, as in tracebacks
        assert source.startswith(f"def {name}(comm, ") and f"{target}({collective!r}, comm, " \
            in source and code.co_filename == f"<hpccoll.api: {name}>"
        assert [i.opname for i in dis.get_instructions(code)].count("CALL") == 1 + len(entry)


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


def test_comm_has_the_methods_the_specs_name_with_mpi4py_signatures():
    """hpccoll.Comm overrides the mpi4py methods each spec names (``comm_methods``) in their
    three forms, each with mpi4py's own parameters and defaults (the buffers, the method's
    own, then op and root as the spec's flags say), and no other collective."""
    from mpi4py import MPI

    from hpccoll.comm import Comm, _Collectives
    made = [name for spec in SPECS.values() for method in spec.comm_methods
            for name in (method, nonblocking(method), method + "_init")]
    others = {"Free", "Clone", "Dup", "Dup_with_info", "Idup", "Idup_with_info"}
    assert {name for name in vars(_Collectives) if name[0].isupper()} - others == set(made)
    assert len(made) == len(set(made)) == 27
    for name in made:
        ours, theirs = (inspect.signature(getattr(cls, name)).parameters.values()
                        for cls in (Comm, MPI.Intracomm))
        assert [(p.name, p.default) for p in ours] == [(p.name, p.default) for p in theirs]
        assert getattr(Comm, name) is not getattr(MPI.Intracomm, name), name


def test_native_posts_the_c_function_of_each_spec_s_mpi_method():
    from hpccoll.collectives import spec
    from hpccoll.runtime import libmpi, native
    from hpccoll.schedule import Call
    want = {"allreduce": "MPI_Iallreduce", "allgather": "MPI_Iallgather",
            "alltoall": "MPI_Ialltoall", "alltoallv": "MPI_Ialltoallv",
            "reduce_scatter": "MPI_Ireduce_scatter", "bcast": "MPI_Ibcast",
            "reduce": "MPI_Ireduce"}
    assert set(want) == set(SPECS)
    for name, function in want.items():
        call = spec(name).uniform_call(3, 1, 2)
        assert libmpi.FUNCTIONS[native.posted(spec(name).native_method(call))] == function
    uneven = Call("allgather", 3, 1, (1, 2, 3))
    assert libmpi.FUNCTIONS[native.posted(spec("allgather").native_method(uneven))] == \
        "MPI_Iallgatherv"
    assert native.posted("Scan") is None        # no branch of the compiled function


@pytest.mark.parametrize("module", ["comm.py", "runtime/native.py"])
def test_the_per_collective_tables_are_made_from_the_specs(module):
    """comm.py and runtime/native.py hold no table of collectives: no string in their code
    is a collective's name, its mpi4py method or its C function."""
    names = {name for spec in SPECS.values() for method in (*spec.comm_methods, spec.mpi_name)
             for name in (spec.name, method, nonblocking(method), "MPI_" + nonblocking(method))}
    tree = ast.parse((ROOT / "hpccoll" / module).read_text())
    strings = {node.value for node in ast.walk(tree)
               if isinstance(node, ast.Constant) and isinstance(node.value, str)}
    assert not strings & names
