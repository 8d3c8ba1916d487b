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


# -- issue 51's targets: a point owns its runs, one way to run one --------------------------

def _trees(paths) -> dict[str, ast.AST]:
    return {str(p.relative_to(PACKAGE)): ast.parse(p.read_text()) for p in paths}


RECORD_NAMES = {"record", "first", "placed"}  # what the package calls a record dict
# The session's pipeline: everything but the families and the results file's own readers and
# writer (which make records of their own from a file: build.py, nccl_tests.py, upgrade.py).
PIPELINE = _trees(p for p in PACKAGE.rglob("*.py") if "families" not in p.parts
                  and p.name not in ("build.py", "nccl_tests.py", "upgrade.py"))


def _writes_into(node: ast.AST, names: set[str]) -> bool:
    """A subscript store `x[...] = ` or a mutating call `x.update(...)` on one of `names`."""
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                   and t.value.id in names for t in targets)
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("update", "clear", "pop", "setdefault")
            and isinstance(node.func.value, ast.Name) and node.func.value.id in names)


def test_records_are_written_by_two_files_only():
    """records.py makes a run's record, points.py the point's (record_of): no other file of
    the session's pipeline writes into a record (7 files before issue 51)."""
    writers = {path for path, tree in PIPELINE.items()
               if any(_writes_into(n, RECORD_NAMES) for n in ast.walk(tree))}
    assert writers == {"harness/controller/records.py", "harness/controller/points.py"}


def test_nothing_of_the_harness_goes_into_a_familys_figures():
    """The rank and the session write no key into `figures` (headline_statistic and
    stopped_at_sample_cap on the rank, a rate's interval moved aside at the seal, before
    schema 3); the family's figures are what it made."""
    writers = {path for path, tree in PIPELINE.items()
               if path.startswith(("harness/", "results/document/session_intervals"))
               and any(_writes_into(n, {"figures"}) for n in ast.walk(tree))}
    assert writers == set()


def test_no_record_is_rewritten_in_place_and_no_key_list_is_kept_by_hand():
    """A point's runs replace `kept.clear(); kept.update(chosen)` and the seal's
    `record.clear(); record.update(sealed)`; revisits.OF_THE_TEST is gone."""
    clears = [path for path, tree in PIPELINE.items() for n in ast.walk(tree)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
              and n.func.attr == "clear" and isinstance(n.func.value, ast.Name)
              and n.func.value.id in RECORD_NAMES | {"kept"}]
    assert clears == []
    assert "OF_THE_TEST" not in (PACKAGE / "harness/controller/revisits.py").read_text()


def test_one_run_protocol_and_two_implementations():
    """run_item: one Protocol (at most 50 lines), implemented by local worlds and the
    launcher; nothing calls run_item inside a run_item (A/B rounds and revisits are
    schedules); the sessions the modes hand around are typed, not Any."""
    trees = _trees(PACKAGE.rglob("*.py"))
    defined = {}
    for path, tree in trees.items():
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            for fn in cls.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "run_item":
                    protocol = any(getattr(b, "id", "") == "Protocol" for b in cls.bases)
                    defined[f"{path}:{cls.name}"] = (protocol, cls.end_lineno - cls.lineno + 1,
                                                     [a.arg for a in fn.args.kwonlyargs])
                    assert not [c for c in ast.walk(fn) if isinstance(c, ast.Attribute)
                                and c.attr == "run_item"], f"{path}: run_item inside run_item"
    assert set(defined) == {"harness/controller/runs.py:Runner",
                            "harness/local/session.py:LocalSession",
                            "harness/launcher/session.py:LauncherSession"}
    protocol, lines, signature = defined["harness/controller/runs.py:Runner"]
    assert protocol and lines <= 50
    assert {tuple(s) for _, _, s in defined.values()} == {tuple(signature)}  # one signature
    seams = ("plugin.py", "gating.py", "harness/launcher/plugin.py", "harness/xdist/mode.py",
             "harness/controller/revisits.py")
    untyped = [f"{path}:{n.lineno}" for path in seams for n in ast.walk(trees[path])
               if isinstance(n, (ast.arg, ast.AnnAssign)) and getattr(n, "annotation", None)
               is not None and ast.unparse(n.annotation) == "Any"
               and (getattr(n, "arg", None) or ast.unparse(getattr(n, "target", n)))
               in ("session", "runner", "distbench", "self.session")]
    assert untyped == []


def test_points_enter_the_session_one_way():
    """Points.add, the store's one mutating method: no list of records extended, assigned or
    swapped from outside (4 ways before issue 51)."""
    mutating = {"add", "append", "extend", "insert", "update", "clear", "remove"}
    calls = {n.func.attr for tree in PIPELINE.values() for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in mutating and (
                 (isinstance(n.func.value, ast.Attribute)
                  and n.func.value.attr in ("points", "records"))
                 or (isinstance(n.func.value, ast.Name) and n.func.value.id == "keep"))}
    assigned = [n for tree in PIPELINE.values() for n in ast.walk(tree)
                if isinstance(n, ast.Assign) and any(
                    isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute)
                    and t.value.attr == "records" for t in n.targets)]
    assert calls == {"add"} and assigned == []


def test_the_controller_and_ab_mode_stay_small():
    """harness/controller/ and harness/ab/: at most 1,532 lines, what they had before the
    point store (issue 51): the store is paid for by what left them (the live lines' words
    for results/rendering/live.py, Run's unread properties)."""
    lines = sum(len(p.read_text().splitlines()) for folder in ("controller", "ab")
                for p in (PACKAGE / "harness" / folder).glob("*.py"))
    assert lines <= 1532


def test_a_points_facts_are_given_when_it_is_made():
    """The sizes a test stands for, what it printed live and its noise's stratum are given to
    the Point where records.py makes it: no file sets them afterwards (outputs.after_test set
    requested_nbytes on every point after its test, a stop the walk of a local test no longer
    makes: docs/architecture.md)."""
    facts = {"requested_nbytes", "live_reports", "stratum"}
    set_after = [f"{path}:{n.lineno}" for path, tree in PIPELINE.items() for n in ast.walk(tree)
                 if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                 for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                 if isinstance(t, ast.Attribute) and t.attr in facts]
    assert set_after == []
