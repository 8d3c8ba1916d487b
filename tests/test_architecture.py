"""The layout's rules (docs/architecture.md), checked on the package's own imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_distbench"
TOP = {"plugin", "collection", "gating", "outputs", "cli"}  # may import anything below
# Torch-free, below harness/ and the families: what the CLI reads a results file with, and
# how it finds the families (registry.py imports each family's registration module, which is
# torch-free too).
FLOOR = {"results", "units", "registry"}


def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, type_only: bool = False) -> list[tuple[str, str]]:
    """(imported module, imported name) of every import of the package in `path`; with
    `type_only`, those under `if TYPE_CHECKING:` too (no import at run time, but a circle of
    them is still a circle: neither module can be understood, or moved, without the other)."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = []
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", "") == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only and not type_only:
            continue  # annotations only: no import at run time
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == PACKAGE.name:
                found += [(target, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, "") for a in node.names if a.name.split(".")[0] == PACKAGE.name]
    return found


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _resolved(target: str, name: str) -> str:
    """The module an import reaches: `from pkg import mod` reaches pkg.mod."""
    return f"{target}.{name}" if f"{target}.{name}" in MODULES else target


def _room(module: str) -> str:
    parts = module.split(".")[1:]
    return parts[0] if parts else ""


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_private_name_crosses_a_module(module):
    for target, name in _imports(MODULES[module]):
        if _resolved(target, name) != target:
            continue  # a module, not a name
        assert not (name.startswith("_") and target != module), (
            f"{module} imports the private {target}.{name}")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_lower_rooms_never_import_upper_ones(module):
    room = _room(module)
    for target, name in _imports(MODULES[module]):
        reached = _resolved(target, name)
        other = _room(reached)
        if room in TOP or other == room:
            continue
        assert other not in TOP, f"{module} imports {reached}, a room above it"
        if room in FLOOR:
            assert other in FLOOR, f"{module} imports {reached}: results/, registry.py and " \
                "units.py stay below everything else (torch-free, read by the CLI)"
        if room == "harness":
            mode = module.split(".")[2] if len(module.split(".")) > 3 else ""
            target_mode = reached.split(".")[2] if reached.startswith(
                f"{PACKAGE.name}.harness.") and len(reached.split(".")) > 3 else ""
            if target_mode in ("local", "launcher", "ab") and target_mode != mode:
                assert (mode, target_mode) == ("ab", "local"), (
                    f"{module} imports {reached}: launch modes are sibling rooms")


def test_no_import_circle():
    graph = {m: {_resolved(t, n) for t, n in _imports(p, type_only=True)} & set(MODULES)
             for m, p in MODULES.items()}
    for m in graph:  # a package's __init__ importing its own modules is not a circle
        graph[m] = {t for t in graph[m] if not m.startswith(t + ".") or t == m}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import circle: " + " -> ".join(circle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def _complexity(function: ast.AST) -> int:
    """McCabe's: one, plus one per branch point (if, loop, except, boolean operand,
    comprehension condition, conditional expression)."""
    points = 1
    for node in ast.walk(function):
        if isinstance(node, (ast.If, ast.For, ast.While, ast.ExceptHandler, ast.IfExp,
                             ast.AsyncFor, ast.Assert)):
            points += 1
        elif isinstance(node, ast.BoolOp):
            points += len(node.values) - 1
        elif isinstance(node, ast.comprehension):
            points += 1 + len(node.ifs)
    return points


def test_one_field_table_drives_the_record_check():
    """validate_record walks fields.RECORD_FIELDS: short, and nothing in the schema's modules
    branches past 12 (issue 38's sealed record)."""
    document = PACKAGE / "results" / "document"
    functions = {f"{path.stem}.{node.name}": node for path in (document / "schema.py",
                                                              document / "fields.py")
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.FunctionDef)}
    check = functions["schema.validate_record"]
    assert check.end_lineno - check.lineno + 1 <= 40
    assert {name: c for name, f in functions.items() if (c := _complexity(f)) > 12} == {}


def test_the_record_type_is_defined_once():
    defined = [module for module, path in MODULES.items()
               for node in ast.walk(ast.parse(path.read_text()))
               if (isinstance(node, ast.ClassDef) and node.name == "Record")
               or (isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                   isinstance(t, ast.Name) and t.id == "Record"
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])))]
    assert defined == ["pytest_distbench.results.document.record"]


def test_pytest_is_used_through_its_public_api():
    """No import of pytest's private `_pytest` package: its layout changes between releases
    (issue 51 item 6)."""
    private = [module for module, path in MODULES.items()
               for node in ast.walk(ast.parse(path.read_text()))
               for name in ([a.name for a in node.names] if isinstance(node, ast.Import)
                            else [node.module or ""] if isinstance(node, ast.ImportFrom)
                            else [])
               if name.split(".")[0] == "_pytest"]
    assert private == []
