"""The student bundle: what it holds, that it runs `grade check` and `pytest` offline with
nothing but itself, and that nothing secret is inside (no reference function body, no hidden
fixture, no rubric answer) — with the scan shown to catch a solution planted in a copy."""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from graders.build import REPO_ROOT, template_files
from tests.course import CAUSAL_LM, GPT, HOMEWORK as PACK, REFERENCE_DIR, TOP
from graders.bundle import (HOMEWORK, LeakError, bundle_files, build_bundle, find_solutions, read_bundle,
                            scan, secret_strings, solution_snippets, write_zip)

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

MODULES = ("attention.py", "encoder.py", "bert.py", "sentiment.py")


@pytest.fixture(scope="module")
def files():
    return bundle_files(PACK)


@pytest.fixture(scope="module")
def scanned(files):
    """What the leak scan finds in the bundle's files: scanned once for the tests of each kind of leak."""
    return scan(files, assignment=PACK)


@pytest.fixture(scope="module")
def bundle_zip(files, tmp_path_factory):
    # Written without the scan that build_bundle runs, so that a leak fails the leak tests
    # below and not every test of the bundle.
    return write_zip(files, tmp_path_factory.mktemp("dist") / "student_bundle.zip")


def _kinds(leaks, word):
    return [leak for leak in leaks if word in leak.what]


# ---------------------------------------------------------------------------- contents


def test_layout(files):
    names = set(files)
    assert f"{TOP}/README.md" in names and f"{TOP}/pyproject.toml" in names
    for name in [*MODULES, "answers.toml", "__init__.py", "conftest.py"]:
        assert f"{TOP}/{HOMEWORK}/{name}" in names, name
    for name in ["golden.json", "golden.safetensors", "manifest.json"]:
        assert f"{TOP}/graders/packs/{PACK.name}/golden/{name}" in names, name
    assert f"{TOP}/graders/selfcheck.py" in names and f"{TOP}/graders/pytest_plugin.py" in names
    assert all(name.startswith(f"{TOP}/") for name in names)
    assert not [n for n in names if "/reference/" in n or "/fixtures/" in n or "/tests/" in n or "__pycache__" in n]


def test_homework_is_the_template(files):
    for name, text in template_files(PACK).items():
        assert files[f"{TOP}/{HOMEWORK}/{name}"].decode() == text


def test_readme_gives_the_two_commands(files):
    readme = files[f"{TOP}/README.md"].decode()
    assert "pip install ." in readme and "grade check" in readme and "pytest" in readme
    assert "hidden checks" in readme
    assert "on Linux, macOS or Windows, or in a Jupyter or Colab notebook" in readme  # where it runs
    assert r".venv\Scripts\Activate.ps1" in readme and "!grade check" in readme


def test_pyproject_pins_the_lock_and_ships_the_golden_data(files):
    import tomllib

    from graders.lock import read_lock
    from graders.recording import read_manifest

    pyproject = tomllib.loads(files[f"{TOP}/pyproject.toml"].decode())
    pinned = dict(requirement.split(";")[0].split("==") for requirement in pyproject["project"]["dependencies"]
                  if "==" in requirement)
    lock = read_lock()
    assert pinned["hypothesis"] == lock["hypothesis"] == read_manifest(PACK.golden_dir)["fingerprint"]["versions"]["hypothesis"]
    assert pinned == {name: lock[name] for name in pinned}  # every pin is the lock's
    assert {"transformers", "numpy", "safetensors", "pytest", "tokenizers", "huggingface-hub"} <= set(pinned)
    assert not {"mypy", "ruff", "selenium", "pyarrow", "submitit", "sympy"} & set(pinned)  # neither tools nor torch's own
    assert "torch>=2.1,<3" in pyproject["project"]["dependencies"]  # each platform installs its own build
    assert "packs/*/golden/*" in pyproject["tool"]["setuptools"]["package-data"]["graders"]
    assert pyproject["tool"]["setuptools"]["packages"]["find"]["include"] == ["graders*"]


def test_the_zip_is_reproducible(files, bundle_zip, tmp_path):
    again = write_zip(bundle_files(PACK), tmp_path / "again.zip")
    assert again.read_bytes() == bundle_zip.read_bytes()
    assert read_bundle(bundle_zip) == files


# ---------------------------------------------------------------------------- the leak scan


def test_no_reference_solution_in_the_bundle(scanned):
    leaks = _kinds(scanned, "the solution of")
    assert not leaks, "\n".join(map(str, leaks))


def test_no_rubric_secret_in_the_bundle(files, scanned):
    secrets = secret_strings(PACK)
    assert len(secrets) == 3 and any(secret.startswith("It gives the gradient a path") for secret in secrets)
    for secret in secrets:
        carriers = [name for name, data in files.items() if secret.encode() in data]
        assert not carriers, f"{secret!r} is in {carriers}"
    leaks = _kinds(scanned, "rubric secret")
    assert not leaks, "\n".join(map(str, leaks))


def test_no_numeric_answer_in_the_causal_lm_bundle():
    files = bundle_files(CAUSAL_LM)
    for secret in ("10968200", "10,968,200", "10050201", "10,050,201"):
        assert secret in secret_strings(CAUSAL_LM)
        carriers = [name for name, data in files.items() if secret.encode() in data]
        assert not carriers, f"{secret!r} is in {carriers}"
    assert not scan(files, assignment=CAUSAL_LM)


def test_no_hidden_fixture_in_the_bundle(scanned):
    leaks = _kinds(scanned, "hidden") + _kinds(scanned, "reference/")
    assert not leaks, "\n".join(map(str, leaks))


def test_build_bundle_writes_a_clean_bundle(tmp_path):
    path = build_bundle(PACK, tmp_path / "student_bundle.zip")  # raises LeakError on any leak
    assert zipfile.ZipFile(path).testzip() is None


def test_every_solution_block_is_searched():
    snippets = solution_snippets(REFERENCE_DIR)
    labels = {s.label for s in snippets}
    for function in ["attention.py: scaled_dot_product", "attention.py: MultiHeadAttention.forward",
                     "bert.py: mask_inputs", "sentiment.py: BERTGRUSentiment.forward", "encoder.py: PositionalEncoding.forward"]:
        assert function in labels, function
    too_small = [s.label for s in snippets if s.nodes < 12]
    assert len(too_small) <= 3, too_small  # only one-liners such as `return len(self.ids) - 1`


def _plant(files, path, extra):
    planted = dict(files)
    planted[path] = files[path] + b"\n\n" + textwrap.dedent(extra).encode()
    return planted


def test_scan_finds_a_planted_reference_module(files):
    path = f"{TOP}/graders/checks/compare.py"
    planted = _plant(files, path, (REFERENCE_DIR / "attention.py").read_text())
    found = {leak.what.split("the solution of ")[-1] for leak in scan(planted, assignment=PACK) if leak.path == path}
    assert {"attention.py: scaled_dot_product", "attention.py: MultiHeadAttention.forward"} <= found


def test_scan_finds_a_solution_renamed_and_hidden_inside_another_function(files):
    """The reference body of scaled_dot_product with every variable renamed, reformatted and
    sitting in the middle of an unrelated helper is still found: the ASTs are compared."""
    import ast
    import copy

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.Name(id=f"renamed_{node.id}", ctx=node.ctx)

    snippet = next(s for s in solution_snippets(REFERENCE_DIR) if s.label == "attention.py: scaled_dot_product")
    renamed = [Rename().visit(copy.deepcopy(statement)) for statement in snippet.statements]
    body = ast.unparse(ast.Module(body=renamed, type_ignores=[]))
    assert "renamed_q" in body and "renamed_mask" in body
    helper = ("def _helper(renamed_q, renamed_k, renamed_v, renamed_attn_drop_rate, renamed_mask):\n"
              "    unrelated = 1\n" + textwrap.indent(body, "    ") + "\n    return None\n")
    path = f"{TOP}/graders/reports/svg.py"
    leaks = scan(_plant(files, path, helper), assignment=PACK)
    assert [leak for leak in leaks if leak.path == path and "attention.py: scaled_dot_product" in leak.what]
    assert find_solutions("def f(x):\n    return x + 1\n", solution_snippets(REFERENCE_DIR)) == []


def test_scan_finds_a_planted_rubric_secret_and_hidden_fixture(files, tmp_path):
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "heldout_labels.json").write_bytes(b'{"labels": [1, 0, 1, 1]}')
    planted = dict(files)
    planted[f"{TOP}/graders/data.json"] = b'{"labels": [1, 0, 1, 1]}'
    planted[f"{TOP}/graders/notes.md"] = b"model answer: It gives the gradient a path around every sub-layer, so deep stacks"
    leaks = scan(planted, assignment=PACK, hidden_dirs=[hidden])
    assert any("hidden fixture heldout_labels.json" in leak.what for leak in leaks)
    assert any(leak.path.endswith("notes.md") and "rubric secret" in leak.what for leak in leaks)
    with pytest.raises(LeakError):
        from graders import bundle

        original = bundle.bundle_files
        bundle.bundle_files = lambda assignment=None: planted
        try:
            build_bundle(PACK, tmp_path / "never.zip")
        finally:
            bundle.bundle_files = original
    assert not (tmp_path / "never.zip").exists()


# ---------------------------------------------------------------------------- offline use


@contextlib.contextmanager
def unpacked_bundle(bundle_zip, top):
    """The bundle unpacked, with a Python that sees torch & co. but neither the repository's
    `graders` (editable install) nor `reference`: a venv whose site-packages holds a .pth to
    the main site-packages (whose .pth files, the editable finder among them, are then not
    run) and to the bundle's root (as `pip install .` would). Outside /tmp, which the sandbox
    replaces by an empty tmpfs. Yields (the bundle's root folder, its python)."""
    base = Path(tempfile.mkdtemp(prefix="bundle-test-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None))
    os.chmod(base, 0o755)
    try:
        with zipfile.ZipFile(bundle_zip) as archive:
            archive.extractall(base)
        root = base / top
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True)
        site = Path(sysconfig.get_paths(vars={"base": str(base / "venv"), "platbase": str(base / "venv")})["purelib"])
        (site / "bundle.pth").write_text(f"{root}\n{sysconfig.get_paths()['purelib']}\n")
        python = base / "venv" / "bin" / "python"
        for path in base.rglob("*"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644 | (path.stat().st_mode & 0o111))
        yield root, python
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def unpacked(bundle_zip):
    with unpacked_bundle(bundle_zip, TOP) as bundle:
        yield bundle


def _run(python, args, cwd, timeout=900):
    return subprocess.run([str(python), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")})


def test_the_bundle_python_sees_only_the_bundle(unpacked):
    root, python = unpacked
    run = _run(python, ["-c", "import graders, importlib.util; print(graders.__file__); "
                              "print(importlib.util.find_spec('reference'))"], cwd=root)
    assert run.returncode == 0, run.stderr
    graders_file, reference = run.stdout.split()[:2]
    assert graders_file == str(root / "graders" / "__init__.py") and reference == "None"


def perfect_homework(template: Path, folder: Path, reference_dir: Path = REFERENCE_DIR) -> Path:
    """A copy of the bundle's homework folder `template` with the reference's modules and answers
    in it (written answers only count as graded by hand)."""
    shutil.copytree(template, folder)
    for path in reference_dir.glob("*.py"):
        if path.name != "__init__.py":
            shutil.copy(path, folder / path.name)
    if (reference_dir / "answers.toml").is_file():
        shutil.copy(reference_dir / "answers.toml", folder / "answers.toml")
    return folder


@pytest.mark.parametrize("pack", [CAUSAL_LM, GPT], ids=lambda pack: pack.name)
def test_each_homework_has_a_bundle_of_its_own(pack, tmp_path):
    """The other homeworks' bundles: their own pack alone, and a self-check from the bundle passes
    the reference's modules and fails the template's."""
    bundle = build_bundle(pack, tmp_path / f"{pack.bundle_name}.zip")
    packs = {PurePosixPath(name).parts[3] for name in zipfile.ZipFile(bundle).namelist()
             if PurePosixPath(name).parts[1:3] == ("graders", "packs") and len(PurePosixPath(name).parts) > 4}
    assert packs == {pack.name}
    with unpacked_bundle(bundle, pack.bundle_name) as (root, python):
        perfect = perfect_homework(root / HOMEWORK, root / "perfect", pack.reference_dir)
        run = _run(python, ["-P", "-m", "graders.selfcheck", "check"], cwd=perfect)
        results = json.loads((perfect / ".grade" / "results.json").read_text())
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
        assert {p["id"] for p in results["parts"]} == {p.id for p in pack.rubric.parts}
        template = _run(python, ["-P", "-m", "graders.selfcheck", "check"], cwd=root / HOMEWORK)
        assert template.returncode == 1, template.stdout[-3000:] + template.stderr[-3000:]


def test_a_bundle_whose_answers_no_longer_match_its_checks_refuses(tmp_path):
    """A bundle that ships a changed check with the answers of the old one (what `grade build
    --bundle` refuses to write) tells the student so in one line, from `grade check` and from
    pytest, instead of marking right code wrong. Positive control: the same bundle unchanged
    checks the template."""
    bundle = build_bundle(CAUSAL_LM, tmp_path / f"{CAUSAL_LM.bundle_name}.zip")
    with unpacked_bundle(bundle, CAUSAL_LM.bundle_name) as (root, python):
        homework = root / HOMEWORK
        fresh = _run(python, ["-P", "-m", "graders.selfcheck", "check"], cwd=homework)
        assert fresh.returncode == 1 and "no longer match" not in fresh.stderr, fresh.stdout[-3000:] + fresh.stderr[-3000:]
        with (root / "graders" / "packs" / CAUSAL_LM.name / "checks" / "causal_lm.py").open("a") as checks:
            checks.write("\n# a check changed after the answers were recorded\n")
        stale = _run(python, ["-P", "-m", "graders.selfcheck", "check"], cwd=homework)
        assert stale.returncode == 2, stale.stdout[-3000:] + stale.stderr[-3000:]
        assert stale.stderr.count("\n") == 1 and "pack/checks/causal_lm.py changed" in stale.stderr
        assert "ask the course staff for a bundle" in stale.stderr
        tests = _run(python, ["-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=homework)
        assert tests.returncode == 1, tests.stdout[-3000:]
        # Said once, by the one failing test; the short summary after it repeats that test's line,
        # truncated to the terminal's width except where a CI variable is set (pytest's rule).
        failures = tests.stdout.split("short test summary info")[0]
        assert failures.count("no longer match") == 1 and re.search(r"\b1 failed, \d+ skipped", tests.stdout), \
            tests.stdout[-3000:]


def _pip_install(python, project, cwd):
    return _run(python, ["-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(project)],
                cwd=cwd, timeout=600)


@pytest.mark.slow
def test_a_second_homework_refuses_to_install_beside_the_first(tmp_path):
    """Two bundles in one environment would share the `graders` package and the `grade` command,
    and uninstalling one would take them from the other: the second install refuses, saying
    why and what to do. Positive control: with setuptools' own backend the second installs
    silently, and uninstalling the first breaks it."""
    for pack in (CAUSAL_LM, GPT):
        with zipfile.ZipFile(write_zip(bundle_files(pack), tmp_path / f"{pack.bundle_name}.zip")) as archive:
            archive.extractall(tmp_path)
    first, second = tmp_path / CAUSAL_LM.bundle_name, tmp_path / GPT.bundle_name
    # An environment whose `graders` is only what gets installed there; torch, pip and setuptools
    # come from this one (a .pth to its site-packages, whose own .pth files are then not run).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    site = Path(sysconfig.get_paths(vars={"base": str(tmp_path / "venv"), "platbase": str(tmp_path / "venv")})["purelib"])
    (site / "linked.pth").write_text(f"{sysconfig.get_paths()['purelib']}\n")
    python = tmp_path / "venv" / "bin" / "python"
    installed = _pip_install(python, first, tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    refused = _pip_install(python, second, tmp_path)
    assert refused.returncode != 0
    assert (f"{GPT.bundle_name}-grader cannot be installed beside {CAUSAL_LM.bundle_name}-grader"
            in " ".join(refused.stderr.split())), refused.stderr[-3000:]
    assert "a virtual environment of its own" in " ".join(refused.stderr.split())
    working = _run(python, ["-c", "import graders.cli, graders.packs.causal_lm"], cwd=tmp_path)
    assert working.returncode == 0, working.stderr

    pyproject = second / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('build-backend = "bundle_backend"\nbackend-path = ["build_backend"]',
                                                       'build-backend = "setuptools.build_meta"'))
    beside = _pip_install(python, second, tmp_path)
    assert beside.returncode == 0, beside.stderr[-3000:]
    removed = _run(python, ["-m", "pip", "uninstall", "-y", "-q", f"{CAUSAL_LM.bundle_name}-grader"], cwd=tmp_path)
    assert removed.returncode == 0, removed.stderr
    broken = _run(python, ["-c", "import graders.cli"], cwd=tmp_path)
    assert broken.returncode != 0  # the second homework lost the files the first one had installed


# A perfect homework passing every public check from the bundle alone (none skipped for want of a
# golden answer, none needing the reference or the fixtures): tests/test_bundle_install.py, from
# the bundle as its README installs it (one self-check of every part is enough for both).


def test_a_buggy_homework_gets_its_diagnoses_from_the_bundle(unpacked):
    """The seed-004 student's code: the checks fail with the same diagnoses as in the repository
    (a diagnosis that needs the reference would crash here: the bundle has none)."""
    root, python = unpacked
    homework = root / "seed004"
    shutil.copytree(root / HOMEWORK, homework)
    for path in (REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student").glob("*.py"):
        shutil.copy(path, homework / path.name)
    run = _run(python, ["-P", "-m", "graders.selfcheck", "check", "attention", "mha"], cwd=homework)
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    results = json.loads((homework / ".grade" / "results.json").read_text())
    checks = {c["id"]: c for p in results["parts"] for c in p["checks"]}
    assert checks["mha.padding"]["diagnosis"]["id"] == "mask_on_query_axis"
    assert checks["mha.eval_deterministic"]["diagnosis"]["id"] == "dropout_in_eval"
    assert checks["attention.matches_reference"]["diagnosis"]["id"] == "mask_as_square"
    assert checks["attention.four_d_mask"]["status"] == "passed"


def test_the_template_fails_from_the_bundle_and_pytest_runs_the_checks(unpacked):
    root, python = unpacked
    homework = root / HOMEWORK
    run = _run(python, ["-P", "-m", "graders.selfcheck", "check", "attention"], cwd=homework)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "0/7 public checks passed" in run.stdout or "public checks passed" in run.stdout
    tests = _run(python, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "rows_sum_to_one or mask_embedding"],
                 cwd=homework)
    assert tests.returncode == 1, tests.stdout + tests.stderr
    assert "FAILED attention.py::attention.rows_sum_to_one" in tests.stdout
    assert "FAILED bert.py::bert.mask_embedding" in tests.stdout
    assert "not implemented" in tests.stdout


def test_the_bundle_installs_with_pip(bundle_zip, tmp_path):
    """pyproject.toml builds a wheel holding the grader, its golden fixtures and the `grade`
    script, and not the homework."""
    with zipfile.ZipFile(bundle_zip) as archive:
        archive.extractall(tmp_path)
    run = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "wheels"), str(tmp_path / TOP)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    wheel = next((tmp_path / "wheels").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert f"graders/packs/{PACK.name}/golden/golden.json" in names and f"graders/packs/{PACK.name}/golden/golden.safetensors" in names
    assert "graders/reports/templates/report.html.j2" in names and f"graders/packs/{PACK.name}/assignment.toml" in names
    assert not [n for n in names if n.startswith(("homework/", "reference/"))]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "grade = graders.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()


# ---------------------------------------------------------------------------- dependencies


def _third_party_imports(files):
    """{top-level module: [bundle files importing it]} of the bundled grader's Python files."""
    import ast

    found = {}
    for path, data in files.items():
        if not (path.startswith(f"{TOP}/graders/") and path.endswith(".py")):
            continue
        for node in ast.walk(ast.parse(data)):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in ("graders", "reference", "submission"):
                    found.setdefault(top, []).append(path)
    return found


def test_the_bundle_installs_what_the_grader_imports_and_nothing_else(files):
    from graders.dependencies import INSTRUCTOR_ONLY_MODULES, SELF_CHECK_REQUIREMENTS

    imported = _third_party_imports(files)
    declared = {module for _, module, _ in SELF_CHECK_REQUIREMENTS}
    undeclared = {module: where for module, where in imported.items()
                  if module not in declared and module not in INSTRUCTOR_ONLY_MODULES}
    assert not undeclared, undeclared
    assert not declared - set(imported) - {"pytest"}, declared - set(imported)  # pytest: the homework's conftest.py
    assert "pytest" in imported  # the plugin that conftest.py loads
    import tomllib

    from packaging.requirements import Requirement

    installed = {Requirement(line).name for line in
                 tomllib.loads(files[f"{TOP}/pyproject.toml"].decode())["project"]["dependencies"]}
    assert {distribution for distribution, _, _ in SELF_CHECK_REQUIREMENTS} <= installed
    assert not {"pyarrow", "submitit", "mypy", "ruff", "selenium", "pytest-benchmark"} & installed  # the instructor's


def test_the_lock_lies_in_the_ranges_of_pyproject_and_of_the_self_check():
    import tomllib

    from packaging.requirements import Requirement
    from packaging.version import Version

    from graders.dependencies import SELF_CHECK_REQUIREMENTS
    from graders.lock import read_lock

    lock = read_lock()
    grader = {r.name: r for r in map(Requirement, tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
                                     ["project"]["dependencies"])}
    for name, _, versions in SELF_CHECK_REQUIREMENTS:
        ours = Requirement(f"{name}{versions}")
        assert ours.specifier.contains(lock[name], prereleases=True), (name, lock[name], versions)
        lower = [Version(s.version) for s in grader[name].specifier if s.operator == ">="] if name in grader else []
        ours_lower = [Version(s.version) for s in ours.specifier if s.operator == ">="]
        assert not lower or (ours_lower and ours_lower[0] >= lower[0]), (name, lower, ours_lower)


def test_only_a_missing_grader_package_is_blamed_on_the_environment():
    from graders.dependencies import missing_dependency_message, missing_module

    assert missing_module(ModuleNotFoundError("No module named 'transformers'", name="transformers")) == "transformers"
    assert missing_module(ModuleNotFoundError("No module named 'torch.nope'", name="torch.nope")) is None
    assert missing_module(ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")) is None
    assert missing_module(ValueError("transformers")) is None
    # a name it lacks is the importing code's mistake (from transformers import Bertmodel)
    assert missing_module(ImportError("cannot import name 'Bertmodel'", name="transformers")) is None
    from graders.lock import read_lock

    message = missing_dependency_message("transformers")
    assert f"the grader's environment lacks transformers: run `pip install 'transformers=={read_lock()['transformers']}'`" in message
    assert "run `pip install 'torch>=2.1,<3'`" in missing_dependency_message("torch")  # the platform's own build
    assert missing_dependency_message("matplotlib") is None


def raised_in_module_code_of(package_folder, error):
    """`error` raised from module code in a file of `package_folder`, as a failed import raises it."""
    try:
        exec(compile("raise error", str(package_folder / "clashing_module.py"), "exec"), {"error": error})
    except type(error) as raised:
        return raised


def test_a_dependency_that_fails_to_import_is_blamed_on_the_environment():
    import transformers

    from graders.dependencies import broken_dependency, broken_dependency_message

    # transformers' lazy import, on a machine whose torchvision was built for another torch
    cause = raised_in_module_code_of(Path(transformers.__file__).parent,
                                     RuntimeError("operator torchvision::nms does not exist"))
    try:
        raise ModuleNotFoundError("Could not import module 'BertModel'") from cause
    except ModuleNotFoundError as error:
        lazy_import = error
    # the module whose code raised, inside the package (what a probe imports to see the same failure)
    assert broken_dependency(lazy_import) == ("transformers.clashing_module",
                                              "RuntimeError: operator torchvision::nms does not exist")
    message = broken_dependency_message("transformers", "RuntimeError: operator torchvision::nms does not exist")
    assert "cannot import transformers" in message and "not of your code" in message


def test_a_mistake_inside_a_dependencys_functions_stays_the_students():
    import torch

    from graders.dependencies import broken_dependency

    try:
        torch.cat([torch.zeros(2, 3), torch.zeros(3, 2)])
    except RuntimeError as error:
        assert broken_dependency(error) is None
    assert broken_dependency(raised_in_module_code_of(Path("/somewhere/student"), ValueError("x"))) is None
