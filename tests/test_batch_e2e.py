"""Batch grading end to end, with real grading of a small course.

A course of 21 submissions (good, buggy, hostile, malformed; folders, zips, notebooks) is built
from reference/ and the fixtures, graded once with `--jobs 2` (parts attention and answers, so
that a grade takes seconds), and compared with single-submission grade() results. A part of the
same course is then killed (SIGKILL to the batch's process group) at several points and resumed.
Every later test grades as few real submissions as its property needs (each grade is seconds),
and compares with the rows of the one graded course.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from graders.batch import store
from graders.batch.cli import cmd_batch, cmd_merge
from graders.batch.discover import id_from_entry
from tests.course import REFERENCE_DIR

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REFERENCE_DIR
HOSTILE = REPO / "fixtures" / "bert" / "submissions" / "hostile"
NOTEBOOK = REPO / "fixtures" / "bert" / "notebooks" / "seed004_style.ipynb"
PARTS = ["attention", "answers"]
BATCH_ARGS = ["--parts", *PARTS, "--timeout", "5", "--no-progress"]

BUGS = {  # one realistic mistake each, made in a copy of the reference
    "noscale": ("/ math.sqrt(d_k)", ""),
    "querymask": ("mask[:, None, None, :]", "mask[:, None, :, None]"),
}
# More of them would only grade more of the same here: that the attention checks catch each such
# mistake (softmax over the queries, no dropout, ...) is tests/test_mutation.py's, mutant by mutant.
HOSTILE_KINDS = ["exit_at_import", "os_exit_in_call", "infinite_loop", "flood_stdout", "fake_results",
                 "read_reference", "write_outside", "kill_parent", "patch_grader", "tensor_subclass"]


def copy_reference(dest: Path) -> Path:
    shutil.copytree(REFERENCE, dest, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    return dest


def zip_folder(folder: Path, archive: Path, *, top: str | None = None) -> None:
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                name = path.relative_to(folder).as_posix()
                zf.write(path, f"{top}/{name}" if top else name)


def build_course(root: Path) -> Path:
    subs = root / "course"
    subs.mkdir()
    work = root / "work"
    work.mkdir()
    copy_reference(subs / "good00")  # the same code as a zip and as a zip with a top folder, below
    zip_folder(copy_reference(work / "z0"), subs / "zipped00.zip")
    zip_folder(copy_reference(work / "t0"), subs / "nested00.zip", top="hw3")
    shutil.copy(NOTEBOOK, subs / "notebook00.ipynb")
    for name, (old, new) in BUGS.items():
        folder = copy_reference(subs / f"bug_{name}")
        source = (folder / "attention.py").read_text()
        assert old in source, name
        (folder / "attention.py").write_text(source.replace(old, new))
    for kind in HOSTILE_KINDS:
        folder = copy_reference(subs / f"hostile_{kind}")
        shutil.copy(HOSTILE / kind / "attention.py", folder / "attention.py")
    (subs / "notazip.zip").write_bytes(b"this is not a zip file at all\n")
    with zipfile.ZipFile(subs / "zipslip.zip", "w") as zf:
        zf.writestr("../../evil.py", "print('escaped')\n")
        zf.writestr("attention.py", "x = 1\n")
    with zipfile.ZipFile(subs / "emptyzip.zip", "w"):
        pass
    (subs / "tarball.tar.gz").write_bytes(b"\x1f\x8b\x08\x00not really")
    (subs / "emptyfolder").mkdir()
    shutil.rmtree(work)
    return subs


def read_gradebook(out: Path) -> dict[str, dict]:
    rows = csv.DictReader((out / "gradebook.csv").read_text().splitlines())
    return {row["student_id"]: row for row in rows}


SINGLE = r"""
import json, sys
from graders.assignment import load
from graders.grading import grade
from graders.sandbox import Limits
paths, parts, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
scores = {}
for sid, path in paths:
    r = grade(path, only_parts=parts, limits=Limits(call_timeout_s=5), assignment=load("bert"))
    scores[sid] = [r["status"], r["score"], [(p["id"], p["score"]) for p in r["parts"]]]
json.dump(scores, open(out, "w"))
"""


def single_grades(entries: list[tuple[str, Path]], tmp: Path, processes: int = 2) -> dict:
    """grade() of each submission on its own: `processes` Python processes, each grading its share."""
    running = []
    for index in range(processes):
        share = [(sid, str(path)) for sid, path in entries[index::processes]]
        out = tmp / f"single-{index}.json"
        running.append((subprocess.Popen([sys.executable, "-c", SINGLE, json.dumps(share), json.dumps(PARTS), str(out)],
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), out))
    scores = {}
    for process, out in running:
        _, err = process.communicate(timeout=1500)
        assert process.returncode == 0, err.decode()[-3000:]
        scores.update(json.loads(out.read_text()))
    return scores


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    # BATCH_TEST_COURSE=/some/dir keeps the graded course between test sessions (for working on
    # these tests; the tests copy what they change).
    kept = os.environ.get("BATCH_TEST_COURSE")
    root = Path(kept) if kept else tmp_path_factory.mktemp("batch")
    subs, out = root / "course", root / "out"
    if not (kept and (out / "gradebook.csv").is_file()):
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        subs = build_course(root)
        assert cmd_batch([str(subs), "--out", str(out), "--jobs", "2", *BATCH_ARGS], "bert") == 0
    return {"root": root, "subs": subs, "out": out}


def test_a_course_of_21_is_graded_like_single_submissions(course):
    subs, out = course["subs"], course["out"]
    entries = sorted(p for p in subs.iterdir())
    assert len(entries) == 21
    book = read_gradebook(out)
    assert len(book) == len(entries)
    singles = single_grades([(id_from_entry(e.name)[0], e) for e in entries], course["root"])
    for sid, (status, score, parts) in singles.items():
        row = book[sid]
        assert float(row["total"]) == pytest.approx(score, abs=0.005), (sid, row, parts)
        assert row["status"] == ("rejected" if status == "rejected" else "graded"), (sid, row)
        for part_id, part_score in parts:
            assert float(row[part_id]) == pytest.approx(part_score, abs=0.005), (sid, part_id)
    # what the course looks like: good ones get full automatic marks, buggy and hostile lose points
    full = float(book["good00"]["total"])
    assert full > 0 and all(float(book[name]["total"]) == full for name in ("zipped00", "nested00"))
    assert all(float(book[f"bug_{name}"]["attention"]) < 8 for name in BUGS)
    for name in ["notazip", "zipslip", "emptyzip", "tarball.tar.gz", "emptyfolder"]:
        assert book[name]["status"] == "rejected" or float(book[name]["total"]) == 0, book[name]
    for row in book.values():
        folder = out / row["report"].rsplit("/", 1)[0]
        assert {"results.json", "report.html", "gradescope.json", "done.json"} <= {p.name for p in folder.iterdir()}
    summary = (out / "summary.html").read_text()
    assert "Batch summary" in summary and "attention.matches_reference" in summary
    # every submission was graded exactly once
    done = [e["student_id"] for e in store.read_ledger(out) if e["event"] == "done"]
    assert sorted(done) == sorted(book)


def test_grade_similarity_reads_the_graded_batch_through_its_store(course, tmp_path):
    """The similarity report of a really graded batch: the same code handed in as a folder, a zip
    and a zip with a top folder is one hand-in three times; what was rejected is not compared."""
    from graders.cli import main

    assert main(["similarity", str(course["out"]), "--out", str(tmp_path / "similarity")]) == 0
    data = json.loads((tmp_path / "similarity" / "similarity.json").read_text())
    scores = {frozenset((p["a"], p["b"])): p["score"] for p in data["pairs"]}
    copies = ("good00", "zipped00", "nested00")
    assert all(scores[frozenset((a, b))] == 1.0 for a in copies for b in copies if a < b)
    kinds = {h["id"]: h["handed_in_as"] for h in data["hand_ins"]}
    assert (kinds["good00"], kinds["zipped00"], kinds["notebook00"]) == ("folder", "zip", "notebook")
    not_compared = {n["id"]: n["reason"] for n in data["not_compared"]}
    for name in ["notazip", "zipslip", "emptyzip", "tarball.tar.gz", "emptyfolder"]:
        assert not_compared.get(name) == "not graded (rejected): no code was graded", name


def test_a_second_run_regrades_nothing_and_a_changed_file_is_regraded(course, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(course["out"], out)
    subs = tmp_path / "course"
    shutil.copytree(course["subs"], subs)
    before = len(store.read_ledger(out))
    assert cmd_batch([str(subs), "--out", str(out), "--jobs", "2", *BATCH_ARGS], "bert") == 0
    new = store.read_ledger(out)[before:]
    assert [e["event"] for e in new] == ["run"]
    assert (out / "gradebook.csv").read_text() == (course["out"] / "gradebook.csv").read_text()
    # a student hands in again: only that submission is graded again
    shutil.rmtree(subs / "bug_noscale")
    copy_reference(subs / "bug_noscale")
    before = len(store.read_ledger(out))
    assert cmd_batch([str(subs), "--out", str(out), "--jobs", "2", *BATCH_ARGS], "bert") == 0
    graded = [e["student_id"] for e in store.read_ledger(out)[before:] if e["event"] == "done"]
    assert graded == ["bug_noscale"]
    assert read_gradebook(out)["bug_noscale"]["total"] == read_gradebook(out)["good00"]["total"]


def test_manual_scores_are_merged_into_a_real_batch(course, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(course["out"], out)
    results = json.loads((out / "submissions" / "good00" / "results.json").read_text())
    pending = [c for p in results["parts"] for c in p["checks"] if c["status"] == "pending_manual"]
    assert pending, "the answers part has written answers"
    manual = tmp_path / "manual.csv"
    manual.write_text("student_id,check_id,score,comment\n"
                      + "".join(f"good00,{c['id']},{c['max_score']},fine\n" for c in pending)
                      + "ghost,answers.layer_norm,1,\n")
    assert cmd_merge([str(manual), "--out", str(out)]) == 1  # ghost is unknown
    row = read_gradebook(out)["good00"]
    gained = sum(c["max_score"] for c in pending)
    assert float(row["total"]) == pytest.approx(results["score"] + gained, abs=0.005)
    assert row["pending_manual"] == "0"
    before = (out / "gradebook.csv").read_text()
    assert cmd_merge([str(manual), "--out", str(out)]) == 1
    assert (out / "gradebook.csv").read_text() == before


# ------------------------------------------------------------------------------- kill, resume


def process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, start time) of every live process. A zombie is left out: it holds
    nothing, and one whose parent is this test's process (a subreaper once an earlier test in it
    leased a sandbox uid) stays until that process ends."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] not in ("Z", "X"):
                table[int(entry)] = (int(fields[1]), fields[19])
    return table


def descendants(pid: int) -> dict[int, str]:
    table = process_table()
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, start) in table.items():
            if ppid == parent and child not in found:
                found[child] = start
                frontier.append(child)
    return found


def alive(processes: dict[int, str]) -> list[int]:
    table = process_table()
    return [pid for pid, start in processes.items() if pid in table and table[pid][1] == start]


def done_count(out: Path) -> int:
    return sum(1 for e in store.read_ledger(out) if e["event"] == "done")


def start_batch(subs: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "graders.batch.cli", str(subs), "--assignment", "bert", "--out", str(out),
                             "--jobs", "2", *BATCH_ARGS], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def kill_after(subs: Path, out: Path, finished: int) -> list[int]:
    """Start the batch, SIGKILL its process group once `finished` results are published in
    total; return the processes of the batch that were still alive 10 s later."""
    process = start_batch(subs, out)
    deadline = time.monotonic() + 900
    while done_count(out) < finished:
        assert process.poll() is None, process.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    tree = descendants(process.pid)
    assert tree, "the batch runs its jobs as child processes"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    end = time.monotonic() + 10
    while alive(tree) and time.monotonic() < end:
        time.sleep(0.2)
    return alive(tree)


def test_killed_batches_resume_without_regrading_or_losing_anything(course, tmp_path):
    # five real grades (a good folder, two zips of it, a bug, a student who kills its parent) and
    # two rejections: enough for a kill after the first result and one halfway
    picked = ["bug_querymask", "good00", "hostile_kill_parent", "nested00.zip", "notazip.zip", "zipped00.zip",
              "zipslip.zip"]
    subs = tmp_path / "course"
    subs.mkdir()
    for name in picked:
        source = course["subs"] / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, subs / name)
    out = tmp_path / "out"
    assert kill_after(subs, out, 1) == []
    assert kill_after(subs, out, len(picked) // 2) == []
    finished = start_batch(subs, out)
    output, _ = finished.communicate(timeout=900)
    assert finished.returncode == 0, output.decode()[-3000:]

    book, reference = read_gradebook(out), read_gradebook(course["out"])
    assert set(book) == {id_from_entry(name)[0] for name in picked}
    for sid, row in book.items():
        assert row == reference[sid], sid
    done = [e["student_id"] for e in store.read_ledger(out) if e["event"] == "done"]
    assert sorted(done) == sorted(book), "every submission finished exactly once"
    assert not [p for p in (out / "submissions").iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------------- Slurm, without Slurm


@pytest.mark.parametrize("cluster, picked", [("local", ["good00", "notazip.zip"]),
                                             ("debug", ["bug_noscale", "notazip.zip"])], ids=["local", "debug"])
def test_the_slurm_path_runs_real_jobs_with_submitits_executors(course, tmp_path, cluster, picked):
    """One real grade and one rejection, two at a time, on each of submitit's executors."""
    subs = tmp_path / "course"
    subs.mkdir()
    for name in picked:
        source = course["subs"] / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, subs / name)
    out = tmp_path / "out"
    assert cmd_batch([str(subs), "--out", str(out), *BATCH_ARGS, "--backend", "slurm",
                      "--slurm-cluster", cluster, "--slurm-parallelism", "2"], "bert") == 0
    book, reference = read_gradebook(out), read_gradebook(course["out"])
    assert set(book) == {id_from_entry(name)[0] for name in picked}
    for sid, row in book.items():
        assert row == reference[sid], sid
    # a second submission of the same folder has nothing left to do
    before = len(store.read_ledger(out))
    assert cmd_batch([str(subs), "--out", str(out), *BATCH_ARGS, "--backend", "slurm", "--slurm-cluster", cluster], "bert") == 0
    assert [e["event"] for e in store.read_ledger(out)[before:]] == ["run"]
