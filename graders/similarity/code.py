"""A hand-in's code as the similarity report compares it: token streams of what the student wrote.

Each module is parsed with `ast` (never imported or run) and cut into units: every top-level
function and class, a class into its methods and its other statements, and the module's other
statements together. A unit becomes a stream of tokens that says what the code does and nothing
of how it is spelled:

- names the hand-in binds (its functions, classes, parameters, variables, attributes it assigns)
  are all `V`; names it only uses keep their name (`len`, `.transpose`), and names it imports
  are resolved to what they import (`F.softmax`, `torch.nn.functional.softmax` and
  `from torch.nn.functional import softmax` are one token);
- strings are `S`, numbers keep their value; comments, docstrings, whitespace, parentheses and
  type annotations leave no token;
- dead code is left out: `pass`, bare constants, `print(...)`, what follows a `return` or a
  `raise`, `if False:` blocks, assignments to names the function never reads, top-level helpers
  nothing refers to;
- statements that do not depend on each other (neither reads nor writes what the other writes)
  are put in one canonical order, so swapping them changes nothing.

The template's code is taken out statement by statement: a statement of the template's unit of
the same name (a signature, `super().__init__()`, a provided helper, a whole file handed in
unchanged) leaves no token in the student's stream.
"""

from __future__ import annotations

import ast
import hashlib
import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

MODULE_LEVEL = "(module level)"
# A module larger than this, or nested too deeply for the parser or this walk, is not compared
# (the note says so): hostile input costs a bounded parse.
MAX_MODULE_BYTES = 1024 * 1024
# A block of more statements, or naming more things, than this keeps its order (the reordering
# compares every pair of its statements).
MAX_REORDERED_STATEMENTS = 200
MAX_REORDERED_NAMES = 2000
# Calls that only show something: debugging output, not the student's work.
_OUTPUT_CALLS = frozenset({"print"})


@dataclass(frozen=True)
class Stream:
    """The tokens of one function, method or group of statements, each with its source line."""
    module: str  # the hand-in's file, e.g. "model.py"
    unit: str  # the top-level function or class it belongs to, or MODULE_LEVEL
    name: str  # qualified: "Block.forward"
    tokens: tuple[int, ...]
    lines: tuple[int, ...]
    template_lines: frozenset[int] = frozenset()  # lines whose code the template gave


@dataclass
class HandInCode:
    """Every stream of a hand-in, its modules' texts and what could not be read."""
    modules: dict[str, str]  # file -> the text that was graded
    streams: list[Stream] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_TOKEN_IDS: dict[str, int] = {}


def token_id(text: str) -> int:
    """A stable 64-bit number for a token (Python's own str hash changes from run to run)."""
    found = _TOKEN_IDS.get(text)
    if found is None:
        found = _TOKEN_IDS[text] = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
    return found


@dataclass
class Course:
    """What every hand-in of an assignment is read against."""
    files: tuple[str, ...]  # the student's Python files, in the manifest's order
    graded_names: frozenset[str]  # what the grader calls: never dead code
    # Names the template and the reference bind: the student's to choose in every hand-in, so
    # that a template statement reads the same in the template and in a hand-in that fills it in.
    names: _HandInNames
    template: dict[str, Counter]  # {qualified stream name: the template's statements in it}

    @classmethod
    def of(cls, assignment) -> Course:
        files = tuple(file for file in assignment.modules if file.endswith(".py"))
        graded = frozenset(name for file in files for name in assignment.modules[file])
        given = _parse_files(assignment.template_dir, files)
        names = _HandInNames([*given.values(), *_parse_files(assignment.reference_dir, files).values()])
        template: dict[str, Counter] = {}
        for tree in given.values():
            for name, _, body in _unit_bodies(tree):
                found = template.setdefault(name, Counter())
                for statement in _Emitter(names, names.aliases(tree), prune=False).block(body):
                    found.update(statement.heads())
        return cls(files, graded, names, template)


def _parse_files(folder: Path, files: tuple[str, ...]) -> dict[str, ast.Module]:
    return {file: ast.parse((Path(folder) / file).read_text(encoding="utf-8"))
            for file in files if (Path(folder) / file).is_file()}


def read_hand_in(root: Path, course: Course) -> HandInCode:
    """The streams of the course's modules found in `root` (a folder `graders.ingest` wrote), the
    template's statements left out."""
    modules, trees, notes = {}, {}, []
    files = course.files
    for file in files:
        path = Path(root) / file
        if not path.is_file():
            continue
        if path.stat().st_size > MAX_MODULE_BYTES:
            notes.append(f"{file} is over {MAX_MODULE_BYTES // 1024} KiB: not compared")
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            trees[file] = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            notes.append(f"{file} cannot be parsed: not compared")
            continue
        modules[file] = text
    code = HandInCode(modules, notes=notes)
    names = _HandInNames(trees.values(), course.names)
    seen_units: set[str] = set()
    for file, tree in trees.items():
        try:
            streams = list(_module_streams(file, tree, modules[file].splitlines(), names, course.graded_names,
                                           course.template, seen_units))
        except RecursionError:
            code.notes.append(f"{file} is nested too deeply to compare: not compared")
            continue
        code.streams.extend(streams)
    return code


# --------------------------------------------------------------------------- names

class _HandInNames:
    """What a hand-in binds, over all its modules: the names that are the student's to choose; and
    each module's imports (one walk of each tree for both)."""

    def __init__(self, trees, also: _HandInNames | None = None):
        self.bound: set[str] = set(also.bound) if also else set()
        self.attributes: set[str] = set(also.attributes) if also else set()  # attributes it assigns, and its methods
        self.referenced: set[str] = set()
        self._aliases: dict[int, dict[str, str]] = {}
        for tree in trees:
            aliases = self._aliases[id(tree)] = {}
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.bound.add(node.name)
                    self.attributes.add(node.name)
                elif isinstance(node, ast.arg):
                    self.bound.add(node.arg)
                elif isinstance(node, ast.Name):
                    (self.bound if isinstance(node.ctx, ast.Store) else self.referenced).add(node.id)
                elif isinstance(node, ast.Attribute):
                    if isinstance(node.ctx, ast.Store):
                        self.attributes.add(node.attr)
                    else:
                        self.referenced.add(node.attr)
                elif isinstance(node, ast.ExceptHandler) and node.name:
                    self.bound.add(node.name)
                elif isinstance(node, (ast.Global, ast.Nonlocal)):
                    self.bound.update(node.names)
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    aliases.update(_imported(node))

    def aliases(self, tree: ast.Module) -> dict[str, str]:
        """{name bound by an import anywhere in the module: the dotted path it stands for}."""
        return self._aliases[id(tree)]


def _imported(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    if isinstance(node, ast.Import):
        return {alias.asname or alias.name.partition(".")[0]: alias.name if alias.asname else alias.name.partition(".")[0]
                for alias in node.names}
    if node.level == 0 and node.module:
        return {alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names}
    return {}


# --------------------------------------------------------------------------- units

def _is_main_guard(node: ast.stmt) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and isinstance(node.test.left, ast.Name)
            and node.test.left.id == "__name__")


def _unit_bodies(tree: ast.Module):
    """(qualified name, unit, statements) of each stream of a module, in the module's order."""
    loose = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or _is_main_guard(node):
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.name, [node]
        elif isinstance(node, ast.ClassDef):
            rest = []
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{item.name}", node.name, [item]
                else:
                    rest.append(item)
            header = ast.ClassDef(name=node.name, bases=node.bases, keywords=node.keywords, body=rest or [ast.Pass()],
                                  decorator_list=node.decorator_list, type_params=[])
            ast.copy_location(header, node)
            yield node.name, node.name, [header]
        else:
            loose.append(node)
    if loose:
        yield MODULE_LEVEL, MODULE_LEVEL, loose


def _module_streams(file: str, tree: ast.Module, source: list[str], names: _HandInNames, graded: frozenset[str],
                    template: dict[str, Counter], seen_units: set[str]):
    aliases = names.aliases(tree)
    units: dict[str, list] = {}
    for name, unit, body in _unit_bodies(tree):
        units.setdefault(unit, []).append((name, body))
    for unit, bodies in units.items():
        if unit != MODULE_LEVEL and unit not in graded and unit not in names.referenced:
            continue  # a helper nothing calls: dead code
        # A notebook's helper is written into every module that uses it: it counts once.
        signature = unit + "\0" + "\n".join(line for _, body in bodies for node in body
                                            for line in source[node.lineno - 1:node.end_lineno])
        if signature in seen_units:
            continue
        seen_units.add(signature)
        for name, body in bodies:
            emitter = _Emitter(names, aliases, prune=True)
            statements = emitter.block(body)
            given = Counter(template.get(name, ()))
            tokens: list[tuple[str, int]] = []
            template_lines: set[int] = set()
            for statement in statements:
                statement.flatten(tokens, given, template_lines)
            lines = _brace_lines(tokens)
            yield Stream(file, unit, name, tuple(token_id(t) for t, _ in tokens), tuple(lines),
                         frozenset(template_lines - set(lines)))


# --------------------------------------------------------------------------- statements

_NO_LINE = -1  # a block's braces: they stand on the lines of the student's code next to them


def _brace_lines(tokens: list[tuple[str, int]]) -> list[int]:
    """Each token's line, a brace taking the line of the student's token before it (or after it,
    at the start): a signature the template gave is never shown as shared because its body is."""
    lines = [line for _, line in tokens]
    known = next((line for line in lines if line != _NO_LINE), 0)
    for index, line in enumerate(lines):
        if line == _NO_LINE:
            lines[index] = known
        else:
            known = line
    return lines


@dataclass(eq=False)
class _Statement:
    """A statement's own tokens (a compound statement's header) and its blocks, already in order."""
    head: list[tuple[str, int]]
    blocks: list[list[_Statement]]
    reads: frozenset[str]
    writes: frozenset[str]
    barrier: bool  # it may leave the block (return, raise, break, continue, yield)
    _text: tuple[str, ...] | None = None

    def key(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.head)

    def heads(self):
        yield self.key()
        for block in self.blocks:
            for statement in block:
                yield from statement.heads()

    def text(self) -> tuple[str, ...]:
        if self._text is None:
            out: list[tuple[str, int]] = []
            self.flatten(out, Counter(), set())
            self._text = tuple(t for t, _ in out)
        return self._text

    def flatten(self, out: list[tuple[str, int]], given: Counter, template_lines: set[int]) -> None:
        key = self.key()
        if given[key] > 0:
            given[key] -= 1
            template_lines.update(line for _, line in self.head)
        else:
            out.extend(self.head)
        for block in self.blocks:
            start = len(out)
            out.append(("{", _NO_LINE))
            for statement in block:
                statement.flatten(out, given, template_lines)
            if all(token in ("{", "}") for token, _ in out[start:]):
                del out[start:]  # a block of the template's code only (or of nothing) leaves no braces
            else:
                out.append(("}", _NO_LINE))


def _clause(head: list[tuple[str, int]], block: list[_Statement]) -> _Statement:
    """An except or case clause as a statement of its own: its block's effects, and never moved."""
    return _Statement(head, [block], frozenset().union(*(s.reads for s in block)),
                      frozenset().union(*(s.writes for s in block)), True)


def _depends(earlier: _Statement, later: _Statement) -> bool:
    if earlier.barrier or later.barrier:
        return True
    return (_overlap(earlier.writes, later.reads | later.writes) or _overlap(earlier.reads, later.writes))


def _overlap(a: frozenset[str], b: frozenset[str]) -> bool:
    """Whether a name of `a` and one of `b` may be the same thing (`self` and `self.x` are)."""
    if a & b:
        return True
    roots = {x.partition(".")[0] for x in a} & {y.partition(".")[0] for y in b}
    return bool(roots) and any(x.startswith(y + ".") or y.startswith(x + ".")
                               for x in a if x.partition(".")[0] in roots for y in b if y.partition(".")[0] in roots)


def _canonical_order(statements: list[_Statement]) -> list[_Statement]:
    """The statements in the order that keeps every dependency and, among the statements free to
    go next, takes the smallest first: one order for every reordering that keeps the dependencies."""
    count = len(statements)
    if count < 2 or count > MAX_REORDERED_STATEMENTS or \
            sum(len(s.reads) + len(s.writes) for s in statements) > MAX_REORDERED_NAMES:
        return statements
    after: list[list[int]] = [[] for _ in statements]
    waiting = [0] * count
    for j in range(count):
        for i in range(j):
            if _depends(statements[i], statements[j]):
                after[i].append(j)
                waiting[j] += 1
    texts = [statement.text() for statement in statements]
    ready = [(texts[i], i) for i in range(count) if waiting[i] == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        _, i = heapq.heappop(ready)
        ordered.append(statements[i])
        for j in after[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, (texts[j], j))
    return ordered


def _constant_truth(node: ast.expr) -> bool | None:
    if isinstance(node, ast.Constant):
        return bool(node.value)
    return None


def _dotted(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _root(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


class _Emitter:
    """Turns statements into _Statements: tokens with lines, dead code out, blocks in canonical order."""

    def __init__(self, names: _HandInNames, aliases: dict[str, str], *, prune: bool):
        self.names = names
        self.aliases = aliases
        self.prune = prune
        self.unused: set[ast.stmt] | None = None  # in the function being read

    # ---- blocks

    def block(self, body: list[ast.stmt]) -> list[_Statement]:
        statements: list[_Statement] = []
        for node in self._live(body):
            statement = self.statement(node)
            if statement is not None:
                statements.append(statement)
        return _canonical_order(statements) if self.prune else statements

    def _live(self, body: list[ast.stmt]):
        """The statements of a block that can matter (all of them, for the template)."""
        for node in body:
            if not self.prune:
                yield node
                continue
            if isinstance(node, ast.If) and _constant_truth(node.test) is not None:
                yield from self._live(node.body if _constant_truth(node.test) else node.orelse)
                continue
            if isinstance(node, ast.While) and _constant_truth(node.test) is False:
                yield from self._live(node.orelse)
                continue
            if isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
                continue
            if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                    and node.value.func.id in _OUTPUT_CALLS):
                continue
            if self._unused_assignment(node):
                continue
            yield node
            if isinstance(node, (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                return

    def _unused_assignment(self, node: ast.stmt) -> bool:
        return self.unused is not None and node in self.unused

    # ---- statements

    def statement(self, node: ast.stmt) -> _Statement | None:
        head: list[tuple[str, int]] = []
        blocks: list[list[_Statement]] = []
        line = getattr(node, "lineno", 0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                head.append(("@", decorator.lineno))
                self.expression(decorator, head)
            head.append((type(node).__name__, line))
            self.arguments(node.args, head, line)
            outer = self.unused
            self.unused = _unused_assignments(node) if self.prune else None
            blocks.append(self.block(_without_docstring(node.body)))
            self.unused = outer
        elif isinstance(node, ast.ClassDef):
            for decorator in node.decorator_list:
                head.append(("@", decorator.lineno))
                self.expression(decorator, head)
            head.append(("ClassDef", line))
            for base in node.bases:
                self.expression(base, head)
            for keyword in node.keywords:
                self.keyword(keyword, head, library=True)
            blocks.append(self.block(_without_docstring(node.body)))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            return None
        else:
            head.append((type(node).__name__, line))
            for name, value in ast.iter_fields(node):
                if name in ("body", "orelse", "finalbody") and isinstance(value, list):
                    blocks.append(self.block(value))
                elif name == "handlers":
                    for handler in value:
                        handler_head: list[tuple[str, int]] = [("except", handler.lineno)]
                        if handler.type is not None:
                            self.expression(handler.type, handler_head)
                        blocks.append([_clause(handler_head, self.block(handler.body))])
                elif name == "cases":
                    for case in value:
                        case_head: list[tuple[str, int]] = [("case", case.pattern.lineno)]
                        self.generic(case.pattern, case_head)
                        blocks.append([_clause(case_head, self.block(case.body))])
                elif name in ("annotation", "type_comment", "simple"):
                    continue
                else:
                    self.field(value, head, line)
        reads, writes, leaves = _effects(node, self.aliases)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # a compound statement does what its blocks' statements (their live code) do
            inner = [statement for block in blocks for statement in block]
            reads = reads.union(*(s.reads for s in inner))
            writes = writes.union(*(s.writes for s in inner))
            leaves = leaves or any(s.barrier for s in inner)
        return _Statement(head, blocks, reads, writes, leaves)

    def field(self, value, out: list[tuple[str, int]], line: int) -> None:
        if isinstance(value, list):
            for item in value:
                self.field(item, out, line)
        elif isinstance(value, ast.expr):
            self.expression(value, out)
        elif isinstance(value, ast.AST) and not isinstance(value, ast.expr_context):
            self.generic(value, out, line)

    def arguments(self, args: ast.arguments, out: list[tuple[str, int]], line: int) -> None:
        for arg in (*args.posonlyargs, *args.args):
            out.append(("arg", arg.lineno))
        for default in args.defaults:
            self.expression(default, out)
        if args.vararg:
            out.append(("*arg", line))
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            out.append(("kwarg", arg.lineno))
            if default is not None:
                self.expression(default, out)
        if args.kwarg:
            out.append(("**arg", line))

    def keyword(self, keyword: ast.keyword, out: list[tuple[str, int]], *, library: bool) -> None:
        if keyword.arg is None:
            out.append(("**", keyword.value.lineno))
        elif library or keyword.arg not in self.names.bound:
            out.append((f"{keyword.arg}=", keyword.value.lineno))
        else:
            out.append(("V=", keyword.value.lineno))
        self.expression(keyword.value, out)

    # ---- expressions

    def expression(self, node: ast.expr, out: list[tuple[str, int]]) -> None:
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Name):
            out.append((self.name(node.id), line))
        elif isinstance(node, ast.Attribute):
            path = self.library_path(node)
            if path is not None:
                out.append((path, line))
            else:
                self.expression(node.value, out)
                out.append(("." + ("V" if node.attr in self.names.attributes else node.attr), line))
        elif isinstance(node, ast.Constant):
            value = node.value
            out.append(("S" if isinstance(value, (str, bytes)) else f"#{value!r}", line))
        elif isinstance(node, ast.JoinedStr):
            out.append(("S", line))
        elif isinstance(node, ast.Call):
            out.append(("Call", line))
            self.expression(node.func, out)
            for arg in node.args:
                self.expression(arg, out)
            library = self._is_library(node.func)
            for keyword in node.keywords:
                self.keyword(keyword, out, library=library)
        elif isinstance(node, ast.Lambda):
            out.append(("Lambda", line))
            self.arguments(node.args, out, line)
            self.expression(node.body, out)
        else:
            self.generic(node, out, line)

    def generic(self, node: ast.AST, out: list[tuple[str, int]], line: int = 0) -> None:
        line = getattr(node, "lineno", line)
        out.append((type(node).__name__, line))
        for name, value in ast.iter_fields(node):
            if name in ("ctx", "type_comment", "kind", "annotation"):
                continue
            if isinstance(value, str) and name in ("name", "arg", "rest"):
                out.append(("V", line))  # a name a pattern or a comprehension binds
            elif isinstance(value, (int, str)) and not isinstance(value, bool) and name not in ("is_async",):
                out.append((f"{name}={value!r}", line))
            else:
                self.field(value, out, line)

    def name(self, identifier: str) -> str:
        if identifier in self.aliases:
            return "@" + self.aliases[identifier]
        return "V" if identifier in self.names.bound else identifier

    def library_path(self, node: ast.Attribute) -> str | None:
        """`@torch.nn.functional.softmax` for an attribute chain that starts at an imported name."""
        dotted = _dotted(node)
        if dotted is None:
            return None
        root, _, rest = dotted.partition(".")
        if root not in self.aliases:
            return None
        return f"@{self.aliases[root]}.{rest}"

    def _is_library(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id in self.aliases or func.id not in self.names.bound
        if isinstance(func, ast.Attribute):
            return self.library_path(func) is not None or func.attr not in self.names.attributes
        return False


def _unused_assignments(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[ast.stmt]:
    """The assignments of a function to names nothing reads, counting as unread what only
    assignments found unused read (`a = 1; b = a`, b never read: both). A worklist: each
    assignment is looked at again only when a name it assigns loses its last reader."""
    def loads(node: ast.AST) -> Counter:
        return Counter(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store))

    targets: dict[ast.stmt, list[str]] = {}
    assigning: dict[str, list[ast.stmt]] = defaultdict(list)
    remaining: Counter = Counter()
    for node in ast.walk(function):
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Store):
                remaining[node.id] += 1
            continue
        if isinstance(node, ast.Assign):
            candidates = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            candidates = [node.target]
        else:
            continue
        names = []
        for target in candidates:
            for element in target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                element = element.value if isinstance(element, ast.Starred) else element
                names.append(element.id if isinstance(element, ast.Name) else None)
        if names and None not in names:
            targets[node] = [name for name in names if name is not None]
            for name in targets[node]:
                assigning[name].append(node)
    unused: set[ast.stmt] = set()
    pending = list(targets)
    while pending:
        node = pending.pop()
        if node in unused or any(remaining[name] for name in targets[node]):
            continue
        unused.add(node)
        for name, count in loads(node).items():
            remaining[name] -= count
            if remaining[name] <= 0:
                pending.extend(assigning.get(name, ()))
    return unused


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


_BLOCK_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})
_LEAVING = (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await, ast.Global, ast.Nonlocal)


def _effects(node: ast.stmt, aliases: dict[str, str]) -> tuple[frozenset[str], frozenset[str], bool]:
    """(what a statement reads, what it changes): dotted names, `self.x` apart from `self.y`. A
    call made for its effect (`optimizer.step()`) changes its object; a call whose value is used
    is taken to change nothing. The order found is a normal form for comparing code, not a proof
    that two orders compute the same: taking too few dependencies only lets more orders match.
    The third value: whether it may leave the block (a return, a raise, a yield; a definition's
    own body does not count). Only the statement's own part is read (a compound statement's
    header): its blocks' statements bring theirs (_Emitter.statement)."""
    reads: set[str] = set()
    writes: set[str] = set()
    leaves = isinstance(node, _LEAVING)
    pending: list[ast.AST] = [value for name, field in ast.iter_fields(node) if name not in _BLOCK_FIELDS
                              for value in (field if isinstance(field, list) else [field]) if isinstance(value, ast.AST)]
    pending += [handler.type for handler in getattr(node, "handlers", ()) if handler.type is not None]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        writes.add(node.name)
    while pending:
        child = pending.pop()
        if isinstance(child, _LEAVING):
            leaves = True
        if isinstance(child, (ast.Name, ast.Attribute)):
            dotted = _dotted(child)
            if dotted is not None:
                (writes if isinstance(child.ctx, (ast.Store, ast.Del)) else reads).add(dotted)
                continue  # `self.x` is read as a whole, not `self` besides
        elif isinstance(child, ast.Subscript) and isinstance(child.ctx, (ast.Store, ast.Del)):
            changed = _dotted(child.value) or _root(child.value)
            if changed is not None:
                writes.add(changed)
        pending.extend(ast.iter_child_nodes(child))
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute):
        changed = _dotted(node.value.func.value) or _root(node.value.func.value)
        if changed is not None and changed.partition(".")[0] not in aliases:
            writes.add(changed)  # `optimizer.step()` for its effect: the calls on one object keep their order
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        leaves = False
    return frozenset(reads), frozenset(writes), leaves
