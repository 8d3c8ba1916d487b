"""Issue 28's "measure before and after" figures that can be counted from the source alone.

    python benchmarks/bench_house.py [PATH] [--against REF]

PATH: a checkout (default: this repository), counted as it is on disk. --against REF: the same
figures of REF (a commit of PATH's git repository, extracted with `git archive` into a
temporary folder that is removed afterwards), printed beside PATH's.

Every figure is of the .py files of pytest_distbench/ without suites/ (the built-in test files,
user code written with the public API), unless its name says otherwise:

- lines: every line of those files (as `wc -l`), and of harness/ and harness/launcher/ alone.
- addoption( outside the table: calls of `.addoption(` whose option name is a string literal,
  each written by hand. The settings table adds its rows in one loop whose `.addoption(`
  takes the name from the row (`group.addoption(s.option, ...)`): a call whose first argument
  is not a literal is that mechanism, and not counted. The same rule for `.addini(`.
- getoption/getini of distbench_*: call sites of `.getoption(` or `.getini(` whose name is a
  literal starting with "distbench_" (the bare --distbench switch is not a setting), or is
  built from that prefix ("distbench_" + name, f"distbench_{name}"). Calls whose name is some
  other expression (a loop over a tuple of names) are shown apart as "computed name": they
  may read distbench settings or pytest's own options.
- _pytest imports: `import _pytest...` and `from _pytest... import` statements, wherever they
  are (a function's body too).
- import circles: strongly connected sets of modules of the package (suites/ included here:
  they may close a circle too) in the graph of their imports, those under
  `if TYPE_CHECKING:` counted, `from pkg import mod` reaching pkg.mod, a package's
  __init__ importing its own modules not an edge (as tests/test_architecture.py).
- functions over 60 lines: def to its last line, decorators not counted, methods and nested
  functions each on their own; listed with their module and name.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import io
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "pytest_distbench"
LONG_FUNCTION = 60
REPOSITORY = Path(__file__).resolve().parent.parent


@dataclass
class House:
    lines: int = 0
    harness_lines: int = 0
    launcher_lines: int = 0
    addoption_by_hand: int = 0
    addini_by_hand: int = 0
    distbench_reads: int = 0
    computed_reads: int = 0
    pytest_private_imports: int = 0
    circles: list[list[str]] = field(default_factory=list)
    long_functions: list[tuple[str, int]] = field(default_factory=list)

    def rows(self) -> list[tuple[str, int]]:
        return [
            (f"lines of {PACKAGE}/ (without suites/)", self.lines),
            ("lines of harness/", self.harness_lines),
            ("lines of harness/launcher/", self.launcher_lines),
            ("addoption( outside the table", self.addoption_by_hand),
            ("addini( outside the table", self.addini_by_hand),
            ("getoption/getini of distbench_*", self.distbench_reads),
            ("getoption/getini, computed name", self.computed_reads),
            ("_pytest imports", self.pytest_private_imports),
            ("import circles (type-only counted)", len(self.circles)),
            (f"functions over {LONG_FUNCTION} lines", len(self.long_functions)),
        ]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _prefixed(node: ast.expr, prefix: str) -> bool:
    """Whether a computed name starts with the literal `prefix` ("distbench_" + name)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return (_literal(node.left) or "").startswith(prefix)
    if isinstance(node, ast.JoinedStr) and node.values:
        return (_literal(node.values[0]) or "").startswith(prefix)
    return False


def _method_calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute) and node.func.attr == name]


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module of the package that `module` names in an import, type-only ones too."""
    package = module if is_package else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            target = importlib.util.resolve_name("." * node.level + (node.module or ""),
                                                 package)
            found |= {target} | {f"{target}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == PACKAGE}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one module, or of one importing itself
    (Tarjan's algorithm, iterative: a deep package must not hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.append(member)
                        if member == node:
                            break
                    if len(members) > 1 or node in graph[node]:
                        found.append(sorted(members))
    return sorted(found)


def count(root: Path) -> House:
    """The figures of the checkout at `root`."""
    package = root / PACKAGE
    if not package.is_dir():
        raise SystemExit(f"bench_house: {root} has no {PACKAGE}/ folder")
    house = House()
    trees: dict[str, tuple[ast.AST, bool]] = {}
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, str(path))
        module = module_name(path, root)
        trees[module] = (tree, path.name == "__init__.py")
        inside = path.relative_to(package).parts
        if inside[0] == "suites":
            continue
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        house.lines += lines
        house.harness_lines += lines if inside[0] == "harness" else 0
        house.launcher_lines += lines if inside[:2] == ("harness", "launcher") else 0
        for method in ("addoption", "addini"):
            by_hand = sum(1 for call in _method_calls(tree, method)
                          if call.args and _literal(call.args[0]) is not None)
            if method == "addoption":
                house.addoption_by_hand += by_hand
            else:
                house.addini_by_hand += by_hand
        for call in _method_calls(tree, "getoption") + _method_calls(tree, "getini"):
            if not call.args:
                continue
            name = _literal(call.args[0])
            if name is not None:
                house.distbench_reads += name.startswith("distbench_")
            elif _prefixed(call.args[0], "distbench_"):
                house.distbench_reads += 1
            else:
                house.computed_reads += 1
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                house.pytest_private_imports += sum(
                    1 for alias in node.names if alias.name.split(".")[0] == "_pytest")
            elif isinstance(node, ast.ImportFrom) and not node.level:
                house.pytest_private_imports += (node.module or "").split(".")[0] == "_pytest"
        house.long_functions += _long_functions(tree, module)
    graph = {}
    for module, (tree, is_package) in trees.items():
        targets = {t for t in _imports(tree, module, is_package) if t in trees}
        graph[module] = {t for t in targets if not module.startswith(t + ".")}
    house.circles = circles(graph)
    return house


def _long_functions(tree: ast.AST, module: str) -> list[tuple[str, int]]:
    found = []

    def visit(node: ast.AST, qualname: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = qualname
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{qualname}.{child.name}" if qualname else child.name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if length > LONG_FUNCTION:
                    found.append((f"{module}:{name}", length))
            visit(child, name)

    visit(tree, "")
    return found


def counted_at(repository: Path, ref: str) -> House:
    """The figures of `ref`, extracted into a temporary folder (removed afterwards)."""
    with tempfile.TemporaryDirectory(prefix="bench_house_") as folder:
        archive = subprocess.run(["git", "-C", str(repository), "archive", ref, PACKAGE],
                                 capture_output=True, check=False)
        if archive.returncode != 0:
            raise SystemExit(f"bench_house: --against {ref}: "
                             f"{archive.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            # The data filter (no links out, no devices) where this Python has it.
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tar.extractall(folder, **extra)
        return count(Path(folder))


def report(houses: dict[str, House]) -> str:
    labels = list(houses)
    width = max(len(name) for name, _ in next(iter(houses.values())).rows())
    columns = [max(len(label), 8) for label in labels]
    lines = ["  ".join([" " * width] + [f"{label:>{w}}" for label, w in zip(labels, columns,
                                                                               strict=True)])]
    rows = {label: house.rows() for label, house in houses.items()}
    for i, (name, _) in enumerate(rows[labels[0]]):
        cells = [f"{rows[label][i][1]:>{w}}" for label, w in zip(labels, columns, strict=True)]
        lines.append("  ".join([name.ljust(width)] + cells))
    for label, house in houses.items():
        lines.append("")
        lines.append(f"{label}: import circles")
        lines += [f"  {len(c)} modules: {', '.join(c)}" for c in house.circles] or ["  none"]
        lines.append(f"{label}: functions over {LONG_FUNCTION} lines")
        lines += [f"  {length:4d}  {name}" for name, length in
                  sorted(house.long_functions, key=lambda f: (-f[1], f[0]))] or ["  none"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=REPOSITORY,
                        help="the checkout to count (default: this repository)")
    parser.add_argument("--against", metavar="REF",
                        help="also count this commit of PATH's repository, side by side")
    args = parser.parse_args(argv)
    houses = {}
    if args.against:
        houses[args.against] = counted_at(args.path, args.against)
    houses[str(args.path) if args.path != REPOSITORY else "this tree"] = count(args.path)
    try:
        print(report(houses))
    except BrokenPipeError:  # piped into head: not worth a traceback
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
