"""The layering docs/DESIGN.md states, checked on the code (as test_no_mpi.py checks the tools
that need no MPI): every module of the package is in one layer of DESIGN.md's table; what a
module imports when it is imported comes from its own layer or a lower one; the imports that
go upward (inside a function, run when called, or for type hints only) are exactly the ones
DESIGN.md lists; and the modules that import ``mpi4py.MPI`` when imported are exactly the
ones it names.  The tables are read from DESIGN.md, so the document cannot drift from the
code unnoticed."""

from __future__ import annotations

import ast
import re
import subprocess
from functools import cache
from pathlib import Path

import hpccoll

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "hpccoll"
DESIGN = ROOT / "docs" / "DESIGN.md"
MPI_LINE = "Modules that import `mpi4py.MPI` when imported:"


def section() -> str:
    """DESIGN.md's "Layers" section."""
    text = DESIGN.read_text()
    start = text.index("\n## Layers\n")
    return text[start:text.index("\n## ", start + 1)]


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def rows(first: str) -> list[list[str]]:
    """The cells of the section's table rows whose first cell matches ``first``."""
    out = []
    for line in section().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(first, cells[0]):
            out.append(cells)
    return out


def layers() -> dict[str, int]:
    """Module or folder (``runtime/``) -> its layer, from the layer table."""
    table = {}
    for cells in rows(r"\d+"):
        for name in names(cells[1]):
            assert name not in table, f"{name} is in two layers"
            table[name] = int(cells[0])
    return table


def upward() -> set[tuple[str, str, str]]:
    """(importer, imported, how) of the imports DESIGN.md allows upward: ``call`` (inside a
    function) or ``type hint`` (under TYPE_CHECKING)."""
    return {(names(cells[0])[0], names(cells[1])[0], cells[2].split(":")[0])
            for cells in rows(r"`[^`]+`") if len(cells) == 3}


def module_name(path: Path) -> str:
    """``runtime/scheduled``; a package's ``__init__`` as ``__init__`` or ``tools/__init__``."""
    return path.relative_to(PACKAGE).with_suffix("").as_posix()


def resolve(importer: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The package's modules an import statement loads (a name of the package's own table,
    ``from hpccoll import allgather``, counts as the module defining it)."""
    if isinstance(node, ast.Import):
        found = [alias.name for alias in node.names]
    else:
        base = importer.relative_to(ROOT).with_suffix("").parts[:-1]
        base = base[:len(base) - node.level + 1] if node.level else ()
        module = ".".join([*base, *([node.module] if node.module else [])])
        found = []
        for alias in node.names:
            whole = f"{module}.{alias.name}"
            if module == "hpccoll" and alias.name in hpccoll._public():
                found.append(f"hpccoll.{hpccoll._public()[alias.name]}")
            elif is_module(whole):
                found.append(whole)
            else:
                found.append(module)
    return [m for m in found if m in ("mpi4py.MPI", "hpccoll") or m.startswith("hpccoll.")] + \
        ["mpi4py.MPI" for m in found if m == "mpi4py" and isinstance(node, ast.ImportFrom)
         and any(a.name == "MPI" for a in node.names)]


def is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def as_name(dotted: str) -> str:
    path = ROOT.joinpath(*dotted.split("."))
    return module_name(path / "__init__.py" if path.is_dir() else path.with_suffix(".py"))


@cache
def imports(path: Path) -> list[tuple[str, str]]:
    """(imported module, how: ``import``, ``call`` or ``type hint``) of every import in
    ``path``."""
    out = []

    def visit(node: ast.AST, how: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for inner in child.body:
                    visit_node(inner, "type hint")
                for inner in child.orelse:
                    visit_node(inner, how)
            else:
                visit_node(child, how)

    def visit_node(child: ast.AST, how: str) -> None:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            out.extend((target, how) for target in resolve(path, child))
        else:
            visit(child, "call" if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                      ast.Lambda)) else how)

    visit(ast.parse(path.read_text()), "import")
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def layer_of(name: str, table: dict[str, int]) -> int:
    """The layer of module ``name``: its own row, or its innermost folder's."""
    parts = name.split("/")
    for key in [name] + ["/".join(parts[:i]) + "/" for i in range(len(parts) - 1, 0, -1)]:
        if key in table:
            return table[key]
    raise AssertionError(f"{name} is in no layer of DESIGN.md's table")


def test_every_module_is_in_one_layer():
    table = layers()
    assert len(set(table.values())) >= 8
    for path in MODULES:
        layer_of(module_name(path), table)
    listed = {name for name in table if not name.endswith("/")}
    assert listed <= {module_name(p) for p in MODULES}, "DESIGN.md names modules that are not"


def test_nothing_imports_upward_when_imported():
    table, wrong = layers(), []
    for path in MODULES:
        name = module_name(path)
        for target, how in imports(path):
            if how == "import" and target.startswith("hpccoll") and \
                    layer_of(as_name(target), table) > layer_of(name, table):
                wrong.append(f"{name} (layer {layer_of(name, table)}) imports {as_name(target)} "
                             f"(layer {layer_of(as_name(target), table)})")
    assert not wrong, "\n".join(wrong)


def test_the_upward_imports_are_the_ones_design_lists():
    """Inside a function, an import of a higher layer; for type hints, one of a module not
    imported when the importer is (the others add no edge)."""
    table, found = layers(), set()
    for path in MODULES:
        name = module_name(path)
        found_here = imports(path)
        loaded = {target for target, how in found_here if how == "import"}
        for target, how in found_here:
            if not target.startswith("hpccoll") or how == "import":
                continue
            other = as_name(target)
            if how == "type hint" and target not in loaded or \
                    how == "call" and layer_of(other, table) > layer_of(name, table):
                found.add((name, other, how))
    assert found == upward()


def test_the_modules_that_import_mpi_are_the_ones_design_names():
    lines = [line for line in section().splitlines() if line.startswith(MPI_LINE)]
    assert len(lines) == 1, f"DESIGN.md's Layers section has no line {MPI_LINE!r}"
    importing = {module_name(path) for path in MODULES
                 if ("mpi4py.MPI", "import") in imports(path)}
    assert importing == set(names(lines[0][len(MPI_LINE):]))
    assert {"collectives", "settings", "schedule", "topology"}.isdisjoint(importing)


def test_the_module_list_names_every_module():
    """DESIGN.md's "Modules" table names every committed module of each folder it lists."""
    text = DESIGN.read_text()
    start = text.index("\n## Modules\n")
    table = text[start:text.index("\n## ", start + 1)]
    rows = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `hpccoll/"):
            rows[names(cells[0])[0]] = set(names(cells[1]))
    assert set(rows) >= {"hpccoll/", "hpccoll/algorithms/", "hpccoll/runtime/",
                         "hpccoll/patterns/", "hpccoll/sim/", "hpccoll/tools/"}
    for folder, named in rows.items():
        modules = {Path(p).stem for p in committed(folder)} - \
            ({"__init__"} if folder != "hpccoll/" else set())
        assert modules <= named, f"{folder}: {sorted(modules - named)} missing in DESIGN.md"


def committed(folder: str) -> list[str]:
    """The modules directly in ``folder`` that git tracks (a module still being written is
    not the document's yet)."""
    listed = subprocess.run(["git", "ls-files", "--", f"{folder}*.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    return [p for p in listed if "/" not in p[len(folder):]]
