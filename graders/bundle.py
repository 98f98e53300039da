"""The student bundle: what a student downloads to do the homework and check it offline.

    <bundle name>/         one assignment's bundle (`[bundle] name` of its manifest)
      README.md          the two commands a student needs
      pyproject.toml     installs the `grade` command (the public part of the grader)
      graders/           the engine and this assignment's pack with its golden fixtures, nothing secret
      homework/          the student template (TODO stubs) and a conftest.py for plain `pytest`

Nothing secret goes in: the reference solution and the hidden fixtures live outside the
`graders` package and are never copied; the grader's own code carries no answers (the numeric
answers and the written-answer rubric are read from the reference's questions file, in
instructor mode only). tests/test_bundle.py scans every bundle for
solution bodies, hidden fixtures and rubric secrets.

The zip is reproducible: sorted entries, fixed timestamps and permissions.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import graders
from graders.atomic import write_atomically
from graders.assignment import PACKS_DIR
from graders.build import _solution_blocks, template_files
from graders.handin import STUDENT_CONFTEST

HOMEWORK = "homework"
PACKAGE_DIR = Path(graders.__file__).resolve().parent

# Never shipped, wherever they appear inside the package.
# The grader's tools for the course staff that students need nothing of: how hand-ins are
# compared with each other stays with the staff (graders/similarity/).
STAFF_ONLY = frozenset({"similarity"})
EXCLUDED_NAMES = frozenset({"__pycache__", ".pytest_cache", ".DS_Store"})
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".orig", ".rej", ".swp")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)


def bundle_path(assignment):
    """Where `grade build` writes the assignment's bundle: dist/<bundle name>.zip in the current folder."""
    return Path("dist") / f"{assignment.bundle_name}.zip"


# Every bundle installs the `graders` package and the `grade` command: two homeworks in one
# environment would share those files, and uninstalling one would remove them from the other. The
# bundle's build backend (setuptools', behind a check) refuses to install beside another bundle,
# which it knows by this keyword in its metadata.
BUNDLE_KEYWORD = "transformer-grader-student-bundle"
BACKEND_FOLDER = "build_backend"
BACKEND_MODULE = "bundle_backend"
BUNDLE_BACKEND = '''"""Builds this homework's checks with setuptools, and refuses to install them where another
homework's bundle is installed: both hold the `graders` package and the `grade` command, so
uninstalling one would break the other. Each homework goes in a virtual environment of its own."""

import email
import re
import sysconfig
from pathlib import Path

from setuptools.build_meta import *  # noqa: F403 - every hook pip may call
from setuptools.build_meta import build_editable as _build_editable
from setuptools.build_meta import build_wheel as _build_wheel
from setuptools.build_meta import prepare_metadata_for_build_wheel as _prepare_metadata_for_build_wheel

KEYWORD = "{keyword}"
THIS = "{name}"


def _canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _refuse_beside_another_bundle():
    site = Path(sysconfig.get_paths()["purelib"])  # the environment pip installs into
    for metadata in sorted(site.glob("*.dist-info/METADATA")):
        fields = email.message_from_string(metadata.read_text(errors="replace"))
        other = fields.get("Name") or ""
        if KEYWORD in (fields.get("Keywords") or "") and _canonical(other) != _canonical(THIS):
            raise SystemExit(
                f"{{THIS}} cannot be installed beside {{other}}, another homework's checks: both install the "
                "`graders` package and the `grade` command, and uninstalling one would break the other. Give "
                "this homework a virtual environment of its own (python3 -m venv .venv in this folder, as its "
                f"README says), or run `pip uninstall {{other}}` first.")


def prepare_metadata_for_build_wheel(*args, **kwargs):
    _refuse_beside_another_bundle()
    return _prepare_metadata_for_build_wheel(*args, **kwargs)


def build_wheel(*args, **kwargs):
    _refuse_beside_another_bundle()
    return _build_wheel(*args, **kwargs)


def build_editable(*args, **kwargs):
    _refuse_beside_another_bundle()
    return _build_editable(*args, **kwargs)
'''


def distribution_name(assignment):
    return f"{assignment.bundle_name}-grader"


def student_pyproject(assignment):
    """pyproject.toml of the bundle: what a self-check of this assignment needs and nothing else
    (the engine's own and the pack's declared dependencies), at the lock's versions
    (graders/dependencies.py): hypothesis at the one the golden answers were drawn with
    (another version draws other inputs, whose answers are not recorded)."""
    from graders.dependencies import self_check_requirements

    deps = "".join(f"    {json.dumps(d)},\n" for d in self_check_requirements(assignment))  # a JSON string is a TOML one
    return f'''[build-system]
requires = ["setuptools>=68"]
build-backend = "{BACKEND_MODULE}"
backend-path = ["{BACKEND_FOLDER}"]

[project]
name = "{distribution_name(assignment)}"
version = "{graders.__version__}"
description = "The public checks of {assignment.title}: `grade check` and `pytest`, offline."
keywords = ["{BUNDLE_KEYWORD}"]
requires-python = ">=3.11"
dependencies = [
{deps}]

[project.scripts]
grade = "graders.cli:run"

[tool.setuptools.packages.find]
include = ["graders*"]

[tool.setuptools.package-data]
graders = ["*.toml", "*.json", "*.lock", "reports/templates/*", "schemas/*", "packs/*/*.toml", "packs/*/golden/*"]
'''


STUDENT_README = """# {title}: your homework folder and its checks

`homework/` holds the files you complete: {files}. Every function that raises
`NotImplementedError` is yours to write; its TODO says what to do.

## 1. Install (once)

Python 3.11 or newer, on Linux, macOS or Windows, or in a Jupyter or Colab notebook (below).
No GPU is needed. In this folder (the one holding this README), on Linux and macOS:

```bash
python3 -m venv .venv
source .venv/bin/activate
pip install torch --index-url https://download.pytorch.org/whl/cpu
pip install .
```

On Windows, in PowerShell: `py -m venv .venv`, then `.venv\\Scripts\\Activate.ps1`, then the
same two `pip install` lines. (Should `grade check` not start there, the Linux commands work
inside WSL, the Windows Subsystem for Linux.)

The first `pip install` installs the CPU build of PyTorch (much smaller than the default one
on Linux); skip it if PyTorch 2.1 or newer is already installed. The second
installs the `grade` command and everything the checks need (PyTorch, transformers, hypothesis,
pytest, ...), nothing else.

In a notebook (Colab: upload and unzip the bundle first), one cell:

```
!pip install -q ./{top}
%cd {top}/homework
!grade check
```

## 2. Check your work (as often as you like, offline)

```bash
cd homework
grade check            # every public check; or: grade check {example_parts}
pytest                 # the same checks, one test per check
```

A failing check says what was expected, what your code returned, the smallest input that shows
it, and the likely mistake. The exit status is 0 once every public check passes (written
answers are graded by hand and do not count). `grade check` also writes `.grade/report.html`
(open it in a browser) and `.grade/results.json`.

"Public checks passed" is not your grade: hidden checks run after the deadline, and your
written answers are read by a person. Hand in the files of `homework/` (or a zip of them).
{rehearsals}
Parts: {parts}.
"""


def _shipped(root):
    """The files under `root` a bundle may carry: no caches, editor leftovers or links."""
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if (path.is_file() and not path.is_symlink() and not any(part in EXCLUDED_NAMES for part in relative.parts)
                and not path.name.endswith(EXCLUDED_SUFFIXES) and not path.name.startswith(".")):
            yield relative, path


def _rehearsals_said(assignment):
    """The README's line on the parts graded on the course's machine that `grade check PART`
    rehearses here (hidden checks with a smoke mode), or nothing."""
    from graders.checks.framework import HIDDEN

    registry = assignment.registry()
    parts = [part.id for part in assignment.rubric.parts if registry.get(part.id)
             and all(c.visibility == HIDDEN and c.provisional for c in registry[part.id])]
    if not parts:
        return ""
    return (f"\n{', '.join(f'`{p}`' for p in parts)} is graded on the course's data and machine: "
            f"`grade check {parts[0]}` rehearses your code for it here, in smoke mode, and shows its figures (never a score).\n")


def bundle_files(assignment):
    """{path inside the zip: bytes} of the whole bundle of the assignment: the engine with this
    one pack (under graders/packs/, where the bundled grader finds it as its only one), the
    template and the student's conftest.py."""
    top = assignment.bundle_name
    modules = ", ".join(f"`{name}`" for name in assignment.expected_files)
    readme = STUDENT_README.format(title=assignment.title, files=modules, top=top,
                                   example_parts=" ".join(p.id for p in assignment.rubric.parts[:2]),
                                   parts=", ".join(p.id for p in assignment.rubric.parts),
                                   rehearsals=_rehearsals_said(assignment))
    files = {f"{top}/README.md": readme.encode(), f"{top}/pyproject.toml": student_pyproject(assignment).encode(),
             f"{top}/{BACKEND_FOLDER}/{BACKEND_MODULE}.py":
                 BUNDLE_BACKEND.format(keyword=BUNDLE_KEYWORD, name=distribution_name(assignment)).encode()}
    for relative, path in _shipped(PACKAGE_DIR):
        if relative.parts[0] == PACKS_DIR.name and len(relative.parts) > 2:
            continue  # the packs: only this assignment's, below
        if relative.parts[0] in STAFF_ONLY:
            continue
        files[f"{top}/graders/{relative.as_posix()}"] = path.read_bytes()
    for relative, path in _shipped(assignment.folder):
        if assignment.mutants_path and (path == assignment.mutants_path or assignment.mutants_path in path.parents):
            continue  # edits of the solution: they would give it away
        files[f"{top}/graders/{PACKS_DIR.name}/{assignment.name}/{relative.as_posix()}"] = path.read_bytes()
    for name, text in template_files(assignment).items():
        files[f"{top}/{HOMEWORK}/{name}"] = text.encode()
    files[f"{top}/{HOMEWORK}/conftest.py"] = STUDENT_CONFTEST.encode()
    return dict(sorted(files.items()))


def write_zip(files, target):
    """Write {name: bytes} as a reproducible zip at target, atomically."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return write_atomically(target, buffer.getvalue())


class LeakError(RuntimeError):
    """The bundle would carry something secret."""


def build_bundle(assignment, target=None):
    """Write the student bundle zip of the assignment (at dist/<bundle name>.zip unless `target`);
    returns its path. Build the golden fixtures first. Refuses (LeakError) to write a bundle in
    which `scan` finds anything secret."""
    from graders.recording import read_manifest

    if read_manifest(assignment.golden_dir) is None:
        raise RuntimeError(f"no golden fixtures in {assignment.golden_dir}: run `grade build --golden` first")
    files = bundle_files(assignment)
    leaks = scan(files, assignment=assignment)
    if leaks:
        raise LeakError("the student bundle would leak:\n  " + "\n  ".join(str(leak) for leak in leaks))
    return write_zip(files, target or bundle_path(assignment))


# ---------------------------------------------------------------------------- the leak scan
#
# A solution is found by its code, not by its text: every solution block of the reference is
# parsed, and its statements are compared, as normalised ASTs (no positions; every variable,
# argument and module alias renamed in order of first use), with every run of consecutive
# statements of every Python file of the bundle. Renaming variables, reformatting or moving a
# solution into another function does not hide it. Blocks of fewer than MIN_SNIPPET_NODES
# nodes (`return x`) are too common to tell anything and are not searched.

MIN_SNIPPET_NODES = 12
_BODY_FIELDS = ("body", "orelse", "finalbody", "handlers")


@dataclass(frozen=True)
class Leak:
    path: str  # inside the bundle
    what: str

    def __str__(self):
        return f"{self.path}: {self.what}"


@dataclass(frozen=True)
class Snippet:
    label: str  # "model.py: Block.forward"
    statements: tuple  # the block's top statements, as ast nodes
    shapes: tuple  # _shape() of each statement
    normalised: str
    nodes: int


class _Canonical(ast.NodeTransformer):
    """Renames identifiers to v0, v1, ... in order of first use (positions are dropped by dump)."""

    def __init__(self):
        self.names = {}

    def _name(self, name):
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):
        return ast.copy_location(ast.Name(id=self._name(node.id), ctx=ast.Load()), node)

    def visit_arg(self, node):
        return ast.arg(arg=self._name(node.arg))

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.name = self._name(node.name)
        node.returns = None
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_alias(self, node):
        return ast.alias(name=node.name, asname=self._name(node.asname or node.name))


def _normalise(statements):
    import copy

    canonical = _Canonical()
    return "\n".join(ast.dump(canonical.visit(copy.deepcopy(s)), annotate_fields=False, include_attributes=False)
                     for s in statements)


_BLANKED = {"id", "arg", "name", "asname", "ctx", "type_comment", "returns"}


def _signatures(tree):
    """{id(node): a hash of the node's structure with every identifier blanked}, in one pass.
    Equal signatures are worth a full comparison; different ones never match."""
    signatures = {}

    def visit(node):
        items = [type(node).__name__]
        for field, value in ast.iter_fields(node):
            if field in _BLANKED:
                continue
            if isinstance(value, ast.AST):
                items.append(visit(value))
            elif isinstance(value, list):
                items.append(tuple(visit(v) if isinstance(v, ast.AST) else repr(v) for v in value))
            else:
                items.append(repr(value))
        signature = hash(tuple(items))
        signatures[id(node)] = signature
        return signature

    visit(tree)
    return signatures


def _shape(statement):
    return _signatures(statement)[id(statement)]


def _statement_lists(tree):
    """Every list of consecutive statements in the tree (module, function, loop, branch bodies)."""
    for node in ast.walk(tree):
        for name in _BODY_FIELDS:
            value = getattr(node, name, None)
            if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
                yield value


def solution_snippets(reference_dir):
    """Every solution block of the reference's Python modules, as a Snippet."""
    snippets = []
    for path in sorted(Path(reference_dir).glob("*.py")):
        source = path.read_text()
        tree = ast.parse(source)
        qualnames = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for child in node.body:
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        qualnames[id(child)] = f"{node.name}.{child.name}"
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        bodies = list(_statement_lists(tree))
        for begin, end in _solution_blocks(source.splitlines(), path.name):
            first, last = begin + 1, end + 1  # the marker lines, 1-based
            chosen = None
            for body in bodies:
                inside = [s for s in body if s.lineno > first and s.end_lineno < last]
                if inside and (chosen is None or len(inside) > len(chosen) or inside[0].lineno < chosen[0].lineno):
                    chosen = inside
            if not chosen:
                continue
            owner = min((f for f in functions if f.lineno <= chosen[0].lineno <= f.end_lineno),
                        key=lambda f: f.end_lineno - f.lineno, default=None)
            label = f"{path.name}: {qualnames.get(id(owner), owner.name) if owner else '<module>'}"
            nodes = sum(1 for s in chosen for _ in ast.walk(s))
            snippets.append(Snippet(label, tuple(chosen), tuple(_shape(s) for s in chosen), _normalise(chosen), nodes))
    return snippets


def find_solutions(source, snippets, path="<bundle>"):
    """Leaks: every run of statements in `source` that is a solution block of the reference."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        return [Leak(path, f"cannot be parsed, so cannot be scanned ({error.msg})")]
    leaks = []
    searched = [s for s in snippets if s.nodes >= MIN_SNIPPET_NODES]
    signatures = _signatures(tree)
    for body in _statement_lists(tree):
        shapes = [signatures[id(s)] for s in body]
        for snippet in searched:
            size = len(snippet.shapes)
            for start in range(len(body) - size + 1):
                if tuple(shapes[start : start + size]) != snippet.shapes:
                    continue
                if _normalise(body[start : start + size]) == snippet.normalised:
                    leaks.append(Leak(path, f"line {body[start].lineno}: the solution of {snippet.label}"))
    return leaks


def secret_strings(assignment):
    """Text that must never ship: the numeric answers of the reference's questions file (5 digits
    or more, in every usual spelling) and the start of every written model answer."""
    if assignment.answers_file is None:
        return []
    answers = tomllib.loads((assignment.reference_dir / assignment.answers_file).read_text())
    secrets = set()
    for value in answers.get("numeric", {}).values():
        number = int(str(value).replace(",", "").replace("_", ""))
        if number >= 10_000:
            secrets |= {str(number), f"{number:,}", f"{number:_}", f"{number:,}".replace(",", " ")}
    for value in answers.get("written", {}).values():
        text = " ".join(str(value).split())
        if len(text) >= 40:
            secrets.add(text[:60])
    return sorted(secrets)


def hidden_fixture_hashes(hidden_dirs):
    """{sha256: relative path} of every file in the secret folders (none that do not exist)."""
    hashes = {}
    for hidden_dir in map(Path, hidden_dirs):
        if hidden_dir.is_dir():
            hashes |= {hashlib.sha256(p.read_bytes()).hexdigest(): p.relative_to(hidden_dir).as_posix()
                       for p in sorted(hidden_dir.rglob("*")) if p.is_file()}
    return hashes


def scan(files, *, assignment, hidden_dirs=None):
    """Leaks in a bundle given as {path: bytes}: reference solution bodies, the assignment's
    secret files (hidden fixtures; `hidden_dirs` replaces its list), rubric secrets, and the
    reference or hidden folders themselves."""
    snippets = solution_snippets(assignment.reference_dir)
    secrets = secret_strings(assignment)
    hidden = hidden_fixture_hashes(assignment.secrets if hidden_dirs is None else hidden_dirs)
    leaks = []
    for path, data in files.items():
        parts = path.split("/")
        if "reference" in parts[:-1] or "hidden" in parts[:-1]:
            leaks.append(Leak(path, "lies in a reference/ or hidden/ folder"))
        digest = hashlib.sha256(data).hexdigest()
        if digest in hidden:
            leaks.append(Leak(path, f"is the hidden fixture {hidden[digest]}"))
        text = data.decode("utf-8", errors="replace")
        flat = " ".join(text.split())
        for secret in secrets:
            if secret in text or secret in flat:
                leaks.append(Leak(path, f"holds the rubric secret {secret[:30]!r}"))
        if path.endswith(".py"):
            leaks += find_solutions(text, snippets, path)
    return leaks


def read_bundle(path):
    """{path: bytes} of a bundle zip, or of a folder (an unpacked bundle)."""
    path = Path(path)
    if path.is_dir():
        return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}
