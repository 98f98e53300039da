"""`grade check`: public checks only, golden answers, reports in .grade/, and its exit status;
the golden fixtures are up to date and recorded deterministically; plain `pytest` in the
homework folder runs the same checks, grading the folder once."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from graders.build import REPO_ROOT
from tests.course import HOMEWORK, PACKS, REFERENCE_DIR, TEMPLATE_DIR
from graders.bundle import STUDENT_CONFTEST
from graders.recording import read_manifest, record_golden, stale_reasons
from graders.scoring import public_checks
from graders.selfcheck import SelfCheckError, cmd_check, not_passing, self_check

SEED004 = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"
QUICK_PARTS = ["attention", "mha"]


def _copy(source, target):
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", ".grade"))
    return target


def _results(folder):
    return json.loads((folder / ".grade" / "results.json").read_text())


# ---------------------------------------------------------------------------- golden fixtures


@pytest.mark.parametrize("pack", PACKS, ids=lambda pack: pack.name)
def test_golden_fixtures_are_up_to_date(pack):
    reasons = stale_reasons(pack)
    assert not reasons, (f"{pack.golden_dir} is out of date: run `grade build --golden` and commit it\n  "
                         + "\n  ".join(reasons))


@pytest.mark.slow
@pytest.mark.parametrize("pack", PACKS, ids=lambda pack: pack.name)
def test_golden_fixtures_regenerate_identically(tmp_path, pack):
    """Recording again gives the committed fixtures: the same calls on the same inputs (every
    key, bit for bit) and the same answers, to the last bits that CPUs with other vector units
    compute differently, far inside the checks' own tolerances. Nothing outside the
    fingerprinted files changed what the public checks draw. (25 s for the three packs on 2 idle
    cores, 100 s on busy ones; the hash comparison above is the quick guard.)"""
    record_golden(pack, tmp_path / "golden")
    fresh = json.loads((tmp_path / "golden" / "golden.json").read_text())
    committed = json.loads((pack.golden_dir / "golden.json").read_text())
    assert fresh == committed, f"{pack.golden_dir} is stale: run `grade build --golden` and commit it"
    fresh_tensors = load_file(str(tmp_path / "golden" / "golden.safetensors"))
    committed_tensors = load_file(str(pack.golden_dir / "golden.safetensors"))
    assert fresh_tensors.keys() == committed_tensors.keys()
    for name, tensor in fresh_tensors.items():
        torch.testing.assert_close(tensor, committed_tensors[name], rtol=1e-5, atol=1e-6,
                                   msg=lambda message, name=name: f"golden answer {name}: {message}")


DRAWS = """
import sys
sys.path.insert(0, sys.argv[1])
if sys.argv[2] == "noise":
    import graders.reports, local_noise  # local modules full of literals hypothesis would mine
import graders.selfcheck
from graders.checks.framework import Context, check_seed
from graders.packs.bert.checks.strategies import attention_inputs
seen = []
ctx = Context(None, None, check_seed(0, "attention.matches_reference"))
@ctx.given(attention_inputs())
def prop(ex):
    seen.append((tuple(ex.q.shape), round(float(ex.q.flatten()[0]), 6)))
print(seen)
"""


@pytest.mark.slow
def test_draws_do_not_depend_on_what_the_process_imported(tmp_path):
    """hypothesis mixes literals of loaded local modules into its draws; the self-check turns
    that off, or a self-check (which imports other modules than `grade build` did) would draw
    inputs that have no golden answer."""
    (tmp_path / "local_noise.py").write_text("\n".join(f"C{i} = {i * 7919 % 65536}" for i in range(300)) + "\n")
    runs = [subprocess.run([sys.executable, "-P", "-c", DRAWS, str(tmp_path), mode], capture_output=True, text=True,
                           cwd=REPO_ROOT, timeout=300) for mode in ("quiet", "noise")]
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    assert runs[0].stdout == runs[1].stdout


@pytest.mark.slow
def test_a_self_check_finds_every_golden_answer(reference_check):
    """Every oracle call of a passing homework's self-check is answered from the golden fixtures
    (a miss would be skipped by hypothesis: less coverage, and minutes of drawing): counted during
    the `grade check` of the perfect homework below."""
    folder, status, calls = reference_check
    assert status == 0 and not not_passing(_results(folder))
    assert calls["hits"] > 0 and calls["misses"] == 0, calls


@pytest.mark.slow
def test_a_part_that_preloads_gets_a_worker_of_its_own_and_the_same_results(tmp_path, monkeypatch):
    """The sentiment part (`preload` in the rubric: its checks build a BERT, seconds of imports)
    is graded in a worker of its own, started with transformers imported, beside the other
    parts; what it gets is what it gets graded on its own in one worker."""
    import graders.grading

    made = []

    class Recorded(graders.grading.Worker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self.preload)

    monkeypatch.setattr(graders.grading, "Worker", Recorded)
    folder = _copy(SEED004, tmp_path / "homework")  # passes and failures in both parts
    beside = self_check(folder, ["attention", "sentiment"])
    assert sorted(made) == [(), ("transformers.models.bert.modeling_bert",)]
    made.clear()
    alone = self_check(folder, ["sentiment"])
    assert made == [("transformers.models.bert.modeling_bert",)]

    def outcome(results):
        (part,) = [part for part in results["parts"] if part["id"] == "sentiment"]
        return part["score"], [(c["id"], c["status"], c["score"], c["message"]) for c in part["checks"]]

    assert outcome(beside) == outcome(alone)
    assert ("sentiment.attention_mask", "failed") in [check[:2] for check in outcome(alone)[1]]  # the student's mistake


def test_golden_fixtures_hold_no_hidden_check():
    manifest = read_manifest(HOMEWORK.golden_dir)
    hidden = {c.id for _, c in public_checks(HOMEWORK)} ^ set(manifest["fingerprint"]["public_checks"])
    assert not hidden
    from tests.course import REGISTRY

    hidden_ids = {c.id for checks in REGISTRY.values() for c in checks if c.visibility == "hidden"}
    assert not hidden_ids & set(manifest["fingerprint"]["public_checks"])


# ---------------------------------------------------------------------------- grade check


@pytest.fixture(scope="module")
def reference_check(tmp_path_factory):
    """`grade check` on a perfect homework folder (the reference's modules), quick parts only:
    (folder, exit status, {"hits": n, "misses": n} of the calls to the golden oracle)."""
    import graders.oracles

    calls = {"hits": 0, "misses": 0}
    real = graders.oracles.GoldenOracle.call

    def counting(self, name, *args, **kwargs):
        try:
            result = real(self, name, *args, **kwargs)
        except graders.oracles.OracleUnavailable:
            calls["misses"] += 1
            raise
        calls["hits"] += 1
        return result

    folder = _copy(REFERENCE_DIR, tmp_path_factory.mktemp("perfect") / "homework")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graders.oracles.GoldenOracle, "call", counting)
        status = cmd_check([*QUICK_PARTS, "answers", "--path", str(folder)])
    return folder, status, calls


def test_all_public_checks_pass_exit_zero(reference_check):
    folder, status, _ = reference_check
    results = _results(folder)
    assert status == 0, not_passing(results)
    assert results["mode"] == "self-check"
    statuses = {c["status"] for part in results["parts"] for c in part["checks"]}
    assert statuses <= {"passed", "pending_manual"}
    assert "pending_manual" in statuses  # written answers wait for a person and do not fail the check


def test_only_public_checks_run(reference_check):
    folder, _, _ = reference_check
    results = _results(folder)
    checks = [c for part in results["parts"] for c in part["checks"]]
    assert checks and all(c["visibility"] == "public" for c in checks)
    assert {c["id"] for c in checks} == {c.id for _, c in public_checks(HOMEWORK, [*QUICK_PARTS, "answers"])}


def test_reports_go_to_dot_grade(reference_check):
    folder, _, _ = reference_check
    html = (folder / ".grade" / "report.html").read_text()
    assert "public checks passed" in html
    assert "hidden checks run after the deadline" in html


def test_answers_are_not_shown_in_self_check(reference_check):
    folder, _, _ = reference_check
    for part in _results(folder)["parts"]:
        for check in part["checks"]:
            assert "rubric" not in (check.get("details") or {})


def test_a_failing_check_exits_one_with_its_diagnosis(tmp_path, capsys):
    folder = _copy(SEED004, tmp_path / "hw")
    assert cmd_check(["mha", "--path", str(folder), "--out", str(tmp_path / "out")]) == 1
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    checks = {c["id"]: c for c in results["parts"][0]["checks"]}
    assert checks["mha.padding"]["status"] == "failed"
    assert checks["mha.padding"]["diagnosis"]["id"] == "mask_on_query_axis"
    assert checks["mha.eval_deterministic"]["diagnosis"]["id"] == "dropout_in_eval"
    assert (tmp_path / "out" / "report.html").is_file()
    assert not (folder / ".grade").exists()
    assert "public checks passed" in capsys.readouterr().out


def test_template_exits_one(tmp_path):
    folder = _copy(TEMPLATE_DIR, tmp_path / "hw")
    assert cmd_check(["attention", "--path", str(folder)]) == 1
    results = _results(folder)
    assert all(c["status"] == "error" and "not implemented" in c["message"]
               for part in results["parts"] for c in part["checks"])


def test_bad_usage_exits_two(tmp_path, capsys):
    # An empty folder belongs to no homework by its files: the student's kit names its own.
    assert cmd_check(["no_such_part", "--path", str(tmp_path)], "bert") == 2
    assert "unknown part no_such_part" in capsys.readouterr().err
    assert cmd_check(["attention", "--path", str(tmp_path)], "bert") == 2  # no module files
    assert "attention.py" in capsys.readouterr().err


def test_without_golden_fixtures_it_says_what_to_do(tmp_path):
    folder = _copy(SEED004, tmp_path / "hw")
    with pytest.raises(SelfCheckError, match="grade build --golden"):
        self_check(folder, ["attention"], golden_dir=tmp_path / "nothing")


def test_other_files_in_the_folder_are_not_read(tmp_path):
    """A virtual environment, a checkpoint or old reports in the folder do not get the
    submission rejected as too big: only the top-level module files are graded."""
    folder = _copy(SEED004, tmp_path / "hw")
    (folder / ".venv" / "lib").mkdir(parents=True)
    for i in range(300):
        (folder / ".venv" / "lib" / f"f{i}.py").write_text("x = 1\n")
    (folder / "best-model.pt").write_bytes(b"\0" * (60 << 20))
    results = self_check(folder, ["mha"])
    assert results["status"] == "graded"
    assert "other files in the folder are not read" in results["submission"]["notes"][0]


# ---------------------------------------------------------------------------- pytest


def _homework(folder):
    (folder / "conftest.py").write_text(STUDENT_CONFTEST)
    return folder


@pytest.mark.slow
def test_pytest_runs_one_test_per_public_check_from_one_grade(tmp_path, monkeypatch):
    """In-process pytest on a homework folder: one test per public check of attention.py, each
    failing with its check's message and diagnosis, and the folder graded exactly once."""
    import graders.selfcheck

    folder = _homework(_copy(SEED004, tmp_path / "hw_once"))
    calls = []
    real = graders.selfcheck.self_check

    def counting(path, parts=None, **kwargs):
        calls.append((Path(path), parts))
        return real(path, parts, **kwargs)

    monkeypatch.setattr(graders.selfcheck, "self_check", counting)
    reports = {}

    class Collect:
        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.outcome != "passed":
                reports[report.nodeid.split("::")[-1]] = report

    monkeypatch.chdir(folder)
    status = pytest.main(["-q", "-p", "no:cacheprovider", "attention.py"], plugins=[Collect()])
    expected = {c.id for _, c in public_checks(HOMEWORK, QUICK_PARTS)}
    assert set(reports) == expected
    assert calls == [(folder, QUICK_PARTS)]
    assert status == pytest.ExitCode.TESTS_FAILED
    padding = reports["mha.padding"]
    assert padding.failed
    text = padding.longreprtext
    assert "likely mistake: The padding mask is applied to queries, not keys" in text
    assert "smallest input: MultiHeadAttention(embed_dim=" in text
    assert "likely mistake: A (B, T) padding mask is used as if it were (T, T)" in reports[
        "attention.matches_reference"].longreprtext
    assert reports["attention.four_d_mask"].passed
    results = _results(folder)
    assert {p["id"] for p in results["parts"]} == set(QUICK_PARTS)


@pytest.mark.slow
def test_pytest_in_a_subprocess_like_a_student(tmp_path):
    """`pytest -k` in a fresh process: exit status 1 while a check fails, 0 once the selected
    checks pass; written answers are skipped, not failed."""
    folder = _homework(_copy(SEED004, tmp_path / "hw_sub"))
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
                          "matches_reference or four_d_mask or residual"],
                         cwd=folder, capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "FAILED attention.py::mha.matches_reference" in run.stdout
    assert "1 skipped" in run.stdout  # answers.toml::answers.residual_connection, a written answer
    assert "public checks passed" in run.stdout
    ok = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k",
                         "attention.dropout or four_d_mask"],
                        cwd=folder, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "2 passed" in ok.stdout
