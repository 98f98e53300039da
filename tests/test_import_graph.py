"""No import circle among the grader's files (graders/, the packs included).

The graph is read from the source, never by importing: every `import` and `from ... import`
of each file, wherever it stands, at module level or inside a function (a function-level import
only defers the circle to the first call, and a reader still has to hold both modules in mind),
relative ones resolved against the file's package, `from package import name` counted as an
import of the submodule `name` where there is one. Left out, as no circle of modules: imports
under `if TYPE_CHECKING:` (read by the type checker alone) and under `if __name__ ==
"__main__":` (the file run as a script is the module `__main__`, which nothing imports).
Each edge goes to the module named, not to the packages above it.

A circle is a strongly connected component of two modules or more, or a module importing
itself; the positive control plants one in a scratch package."""

import ast
from pathlib import Path

GRADERS = Path(__file__).resolve().parent.parent / "graders"


def _excluded(node):
    """An `if TYPE_CHECKING:` or `if __name__ == "__main__":` block."""
    if not isinstance(node, ast.If):
        return False
    test = ast.unparse(node.test)
    return test in ("TYPE_CHECKING", "typing.TYPE_CHECKING") or test.replace("'", '"') == '__name__ == "__main__"'


def _imports(tree):
    pending = [tree]
    while pending:
        node = pending.pop()
        if _excluded(node):
            pending.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        pending.extend(ast.iter_child_nodes(node))


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the modules of the same tree it imports}, for every .py file under `root` (a package)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = (path, parts[-1] == "__init__")
    graph = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        edges = set()
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                module = node.module if node.level == 0 else ".".join(filter(None, [base, node.module]))
                targets = [f"{module}.{alias.name}" if f"{module}.{alias.name}" in modules else module
                           for alias in node.names]
            edges |= {target for target in targets if target in modules and target != name}
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of two modules or more (Tarjan's algorithm, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_among_the_graders_files():
    graph = import_graph(GRADERS)
    assert len(graph) > 50 and "graders.assignment" in graph["graders.grading"]  # the graph was read
    assert circles(graph) == []


def test_a_planted_circle_is_found_and_type_only_and_script_imports_are_not(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("def later():\n    from .. import c\n")  # deferred: still counted
    (package / "c.py").write_text("import pkg.a\n")
    (package / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n")
    (package / "e.py").write_text("from . import d\nif __name__ == '__main__':\n    from pkg import d as again\n")
    graph = import_graph(package)
    assert graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.d"] == set() and graph["pkg.e"] == {"pkg.d"}
    assert circles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"]]
