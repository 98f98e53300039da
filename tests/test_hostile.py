"""Hostile submissions: the grader survives every attack, no attack scores above the same code
without it, the solution never leaks into any output, no process outlives the grade, no file is
left behind or changed (the solution, the grader's oracle, the outputs after the grade)."""

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from graders.build import REPO_ROOT
from tests.course import REFERENCE_DIR
import graders
from graders.grading import grade, write_results
from graders.reports import render_html, to_gradescope, write_reports
from graders.sandbox import Limits, isolation

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

HOSTILE = REPO_ROOT / "fixtures" / "bert" / "submissions" / "hostile"
HONEST = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"
PARTS = ["attention", "mha"]
LIMITS = Limits(call_timeout_s=4.0, submission_budget_s=120.0)
# Lines of the reference that no student code contains: seeing one in an output means a leak.
SOLUTION_MARKERS = [
    "the same keys are hidden from every query",
    "heads side by side again",
    "blocks [q | k | v]",
]


def _submission(tmp_path, attack_dir):
    folder = tmp_path / "submission"
    shutil.copytree(HONEST, folder)
    shutil.copy(attack_dir / "attention.py", folder / "attention.py")
    return folder


def _score(results):
    return sum(part["score"] for part in results["parts"])


REFERENCE_BEFORE = {p.name: p.read_bytes() for p in REFERENCE_DIR.glob("*.py")}
GRADER_DIR = Path(graders.__file__).parent


def _grader_digest():
    """The grader's own code, which the grading process imports (its oracle among it)."""
    digest = hashlib.sha256()
    for path in sorted(GRADER_DIR.rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()



def _processes():
    """{pid: (parent pid, command line)} of every process on the machine."""
    table = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        table[int(pid)] = (parent, cmdline)
    return table


def _leftovers():
    """Processes this test started that are still alive: our descendants, and the attack's
    tell-tale `sleep 1000` wherever it was re-parented to."""
    table = _processes()
    ours, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, (parent, _) in table.items() if parent in frontier} - ours
        ours |= frontier
    return [table[pid][1] for pid in ours if table[pid][1]] + [c for _, c in table.values() if c.startswith("sleep 1000")]


@pytest.fixture(scope="module")
def honest_score():
    return _score(grade(HONEST, only_parts=PARTS, limits=LIMITS))


def _attention_checks(results):
    (part,) = [part for part in results["parts"] if part["id"] == "attention"]
    return part["checks"]


# The attacks that break the code must show up as errors, with a clear message (asserted on the
# attack's own grade below: its attention part is graded as it would be alone).
SEEN_FAILING = {
    "infinite_loop": lambda checks: any("timed out" in (c["message"] or "") for c in checks),
    "exit_at_import": lambda checks: all(c["status"] == "error" for c in checks),
}


@pytest.mark.parametrize("attack", sorted(p.name for p in HOSTILE.iterdir()))
def test_attack_gains_nothing_and_leaves_nothing(attack, honest_score, tmp_path):
    folder = _submission(tmp_path, HOSTILE / attack)
    grader_before = _grader_digest()
    out = tmp_path / "out"
    results = grade(folder, only_parts=PARTS, limits=LIMITS, extra_secrets=[out])
    write_results(results, out)
    write_reports(results, out)
    written = {path.name: path.read_bytes() for path in out.iterdir()}
    assert results["status"] == "graded"
    assert _score(results) <= honest_score, f"{attack} raised the score"
    if attack in SEEN_FAILING:
        checks = _attention_checks(results)
        assert SEEN_FAILING[attack](checks), [(c["id"], c["status"], c["message"]) for c in checks]
    rendered = json.dumps(results) + render_html(results) + json.dumps(to_gradescope(results))
    for marker in SOLUTION_MARKERS:
        assert marker not in rendered, f"{attack}: the reference solution leaked into the output"
    assert not _leftovers(), f"{attack}: processes outlived the grade: {_leftovers()}"
    assert not Path("/tmp/hostile-was-here").exists()
    assert not (REPO_ROOT / "hostile-was-here").exists()
    assert {p.name: p.read_bytes() for p in REFERENCE_DIR.glob("*.py")} == REFERENCE_BEFORE
    assert _grader_digest() == grader_before, f"{attack} changed the grader's code"
    assert not list(isolation.workdirs_parent().glob(f"w-{os.getpid()}-*")), f"{attack} left a worker folder"
    if attack == "rewrite_results_later":
        time.sleep(4)  # the attack's process would wake after 3 s
    assert {path.name: path.read_bytes() for path in out.iterdir()} == written, f"{attack} rewrote an output"


def test_the_attacks_that_break_the_code_are_seen_failing_on_their_own_grades():
    assert set(SEEN_FAILING) <= {p.name for p in HOSTILE.iterdir()}


def test_a_worker_cannot_read_the_mutants_which_are_edits_of_the_solution(tmp_path):
    """The pack's mutants lie inside the grader package, which a worker imports from: they are a
    secret path of every grade all the same."""
    from graders.grading import secret_paths
    from graders.sandbox import Worker
    from tests.course import HOMEWORK

    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "probe.py").write_text("def read(path):\n    try:\n        return open(path).read()\n"
                                     "    except OSError as error:\n        return type(error).__name__\n")
    mutants = sorted(HOMEWORK.mutants_path.glob("*.py"))
    assert mutants and all(path.stat().st_size > 0 for path in mutants)
    with Worker(folder, limits=LIMITS, secret_paths=secret_paths(HOMEWORK)) as worker:
        read = {path.name: worker.call("probe", "read", str(path)) for path in mutants}
        reference = worker.call("probe", "read", str(HOMEWORK.reference_dir / "attention.py"))
    assert set(read.values()) | {reference} <= {"PermissionError", "FileNotFoundError"}, read


def _grant_others_read(folder):
    """The modes a fresh clone gives a folder and its files (a grade takes "others" away from secrets)."""
    folder.chmod(folder.stat().st_mode | 0o005)
    for path in folder.rglob("*"):
        path.chmod(path.stat().st_mode | (0o005 if path.is_dir() else 0o004))


def _show_every_pack(monkeypatch):
    """The allow-list without its filter of the engine's packs: every pack shown."""
    from graders.sandbox import exposure, isolation

    def every_pack(readable_paths=(), task_modules=()):
        seen = exposure.exposure(readable_paths, task_modules)
        return exposure.Exposure(seen.shown, tuple(folder for folder in seen.hidden if not folder.endswith("/packs")))

    monkeypatch.setattr(isolation, "exposure", every_pack)


@pytest.mark.parametrize("bubblewrap", [True, False], ids=["full", "no-namespaces"])
def test_a_worker_cannot_read_the_mutants_of_the_other_packs(bubblewrap, tmp_path, monkeypatch):
    """Every installed pack's mutants hold lines of its solution: a bert worker must not read the
    causal_lm or gpt ones either. Under bubblewrap no other pack is there at all (the allow-list,
    graders/sandbox/exposure.py). Positive control: with the graded pack's mutants alone secret,
    as a fresh clone has the others' modes, and every pack shown, the same worker reads them."""
    from graders.assignment import load
    from graders.grading import secret_paths
    from graders.sandbox import Worker

    bert = load("bert")
    others = [load(name).mutants_path for name in ("causal_lm", "gpt")]
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "probe.py").write_text("def read(path):\n    try:\n        return open(path).read()\n"
                                     "    except OSError as error:\n        return type(error).__name__\n")
    files = [path for mutants in others for path in sorted(mutants.glob("*.py"))]
    assert files and all(path.stat().st_size > 0 for path in files)

    def reads(secrets):
        with Worker(folder, limits=LIMITS, secret_paths=secrets, use_bwrap=bubblewrap,
                    require_isolation=bubblewrap) as worker:
            return {path.name: worker.call("probe", "read", str(path)) for path in files}

    for mutants in others:
        _grant_others_read(mutants)
    if bubblewrap:
        alone = reads([bert.reference_dir, bert.mutants_path])
        assert set(alone.values()) == {"FileNotFoundError"}, alone  # the allow-list alone holds
        _show_every_pack(monkeypatch)
    leaked = reads([bert.reference_dir, bert.mutants_path])
    assert all(text not in ("PermissionError", "FileNotFoundError") for text in leaked.values()), leaked
    monkeypatch.undo()
    read = reads(secret_paths(bert))
    assert set(read.values()) <= {"PermissionError", "FileNotFoundError"}, read
