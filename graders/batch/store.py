"""The batch output folder.

    DIR/submissions/<student_id>/   results.json, report.html, feedback.html, gradescope.json, done.json
    DIR/gradebook.csv, DIR/summary.html
    DIR/ledger.jsonl                one line per event (start, done, retry, timeout, ...), appended
    DIR/manual.json                 manual scores merged so far (re-applied after a regrade)
    DIR/review/                     the review desk's database of hand grades (`grade review`, graders/review/)
    DIR/.batch/                     run lock, job specs, per-job logs, submitit's folder

A result folder is complete or absent: it is written under a temporary name in
DIR/submissions/ and renamed into place. `done.json` is its done-marker; it records the key the
result was graded under: the input's sha256, the grader's version, the rubric's hash and the
grading configuration (parts, seed, fine-tuning options). A later run skips a submission whose
marker holds the same key and regrades it otherwise (a new file from the student, a new grader
version, a re-weighted rubric). The ledger is an audit trail only; resuming never reads it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path

import graders

# graders.grading and graders.reports (torch, jinja2) are imported where results are written: a
# Slurm array task imports this module only to supervise its `run_one` process, which grades.

SUBMISSIONS = "submissions"
MARKER = "done.json"
LEDGER = "ledger.jsonl"
REVIEW = "review"
STATE = ".batch"
TEMP_PREFIX = ".tmp-"
OLD_PREFIX = ".old-"

# Outcomes of a submission (the gradebook's status column).
GRADED, REJECTED, ERROR = "graded", "rejected", "error"


def grader_key(config: dict, rubric_sha256: str) -> dict:
    """What, besides the input, decides a grade: the grader, the rubric (its manifest's hash) and the configuration."""
    return {"grader": graders.__version__, "rubric_sha256": rubric_sha256,
            "config": json.loads(json.dumps(config, sort_keys=True, default=str))}


def result_key(input_sha256: str, grader: dict) -> str:
    blob = json.dumps({"input": input_sha256, **grader}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def submissions_dir(out: Path) -> Path:
    return Path(out) / SUBMISSIONS


def result_dir(out: Path, student_id: str) -> Path:
    return submissions_dir(out) / student_id


def read_results(out: Path, student_id: str) -> dict | None:
    """The results.json of `student_id`, or None where there is none (or it cannot be read)."""
    try:
        return json.loads((result_dir(out, student_id) / "results.json").read_text())
    except (OSError, ValueError):
        return None


def read_marker(out: Path, student_id: str) -> dict | None:
    try:
        return json.loads((result_dir(out, student_id) / MARKER).read_text())
    except (OSError, ValueError):
        return None


def is_done(out: Path, student_id: str, key: str, *, redo_errors: bool = False) -> bool:
    marker = read_marker(out, student_id)
    if marker is None or marker.get("key") != key or not marker.get("final", True):
        return False
    return not (redo_errors and marker.get("outcome") == ERROR)


def outcome_of(results: dict) -> str:
    batch = results.get("batch") or {}
    if batch.get("outcome") == ERROR:
        return ERROR
    return REJECTED if results.get("status") == "rejected" else GRADED


def publish(out: Path, student_id: str, results: dict, marker: dict) -> Path:
    """Write the result folder of `student_id` atomically: complete under a temporary name, then
    renamed into place. A folder already there (a stale result being replaced) is moved aside
    first and removed after; a crash between the two renames leaves no folder, which a rerun
    regrades."""
    parent = submissions_dir(out)
    parent.mkdir(parents=True, exist_ok=True)
    temporary = parent / f"{TEMP_PREFIX}{student_id}-{uuid.uuid4().hex[:8]}"
    temporary.mkdir()
    from graders.grading import write_results
    from graders.reports import write_reports

    try:
        write_results(results, temporary)
        write_reports(results, temporary)
        marker = {**marker, "outcome": outcome_of(results), "score": results.get("score"),
                  "max_score": results.get("max_score"), "finished_at": time.time()}
        _write_json(temporary / MARKER, marker)
        _fsync_dir(temporary)
        target = parent / student_id
        if target.exists():
            aside = parent / f"{OLD_PREFIX}{student_id}-{uuid.uuid4().hex[:8]}"
            os.rename(target, aside)
            os.rename(temporary, target)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(temporary, target)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return parent / student_id


def rewrite(folder: Path, results: dict) -> None:
    """Replace the results and reports of an existing result folder (manual grades): each file
    is replaced atomically, the marker keeps its key but follows the new score."""
    from graders.grading import write_results
    from graders.reports import write_reports

    write_results(results, folder)
    write_reports(results, folder)
    marker = json.loads((folder / MARKER).read_text())
    marker.update(outcome=outcome_of(results), score=results.get("score"), max_score=results.get("max_score"))
    _write_json(folder / MARKER, marker)


def clean_temporaries(out: Path, older_than_s: float = 0.0) -> int:
    """Remove half-written result folders left by a killed job."""
    removed = 0
    parent = submissions_dir(out)
    if not parent.is_dir():
        return 0
    now = time.time()
    for entry in parent.iterdir():
        if entry.name.startswith((TEMP_PREFIX, OLD_PREFIX)):
            try:
                if now - entry.stat().st_mtime >= older_than_s:
                    shutil.rmtree(entry, ignore_errors=True)
                    removed += 1
            except FileNotFoundError:
                pass
    return removed


def result_folders(out: Path) -> list[Path]:
    parent = submissions_dir(out)
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and not p.name.startswith(".")
                  and (p / "results.json").is_file())


def graded_assignment(out: Path) -> str | None:
    """The name of the assignment a batch's results are of (what reads a batch needs no --assignment)."""
    for path in sorted(submissions_dir(out).glob("*/results.json")):
        try:
            return json.loads(path.read_text())["assignment"]["name"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def log_event(out: Path, event: str, student_id: str | None = None, **fields) -> None:
    """Append one line to DIR/ledger.jsonl (one write of a short line: whole under O_APPEND)."""
    record = {"t": round(time.time(), 3), "event": event, "student_id": student_id, "pid": os.getpid(), **fields}
    line = (json.dumps(record, default=str) + "\n").encode()
    Path(out).mkdir(parents=True, exist_ok=True)
    fd = os.open(Path(out) / LEDGER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_ledger(out: Path) -> list[dict]:
    try:
        lines = (Path(out) / LEDGER).read_text().splitlines()
    except OSError:
        return []
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            pass  # a line cut by a crash
    return events


class RunLock:
    """One batch driver per output folder at a time (an flock, released by the kernel when the
    driver dies, however it dies)."""

    def __init__(self, out: Path):
        self.path = Path(out) / STATE / "lock"
        self._fd = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            raise RuntimeError(f"another batch is running on {self.path.parent.parent} (pid {holder or '?'})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc_info) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write_json(path: Path, data: dict) -> None:
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with open(temporary, "w") as handle:
        json.dump(data, handle, indent=2, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
