"""Grade one submission of a batch and publish its result folder.

    python -m graders.batch.run_one SPEC.json

SPEC.json (written by the batch driver, see supervise.job_spec) names the input, the student id,
the output folder and the grading configuration. This process grades in-process with
`graders.grading.grade` (which starts its own sandbox worker for the student's code), writes
results.json and the reports into a temporary folder and renames it into place.

Exit status: 0 when the result folder was published (whatever the student's score: a failure,
a timeout or a rejection is a result); EXIT_INFRA (75) for a loss of infrastructure that a retry
may cure (out of memory in this process, the driver gone); EXIT_NODE (76) when this machine
cannot grade at all (it cannot isolate student code, a dependency is missing, CUDA fails): the
host and the whole reason are written to DIR/.batch/infra/<student_id>.json, and the submission
is graded again elsewhere (Slurm: another node, a bounded number of rounds); anything else is a
grader bug, which the driver records as an error result without retrying.

The process dies with the driver: PR_SET_PDEATHSIG sends it SIGKILL when its parent exits, and
its sandbox worker dies with it in turn (the worker sets the same signal, bwrap --die-with-parent).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

EXIT_INFRA = 75  # EX_TEMPFAIL
EXIT_NODE = 76  # this machine cannot grade anything (EX_PROTOCOL's number; the reason in .batch/infra/)
INFRA_DIR = "infra"
PARENT_ENV = "GRADE_BATCH_PARENT"
PATH_OPTIONS = ("imdb", "feature_cache")
PROCESS_STARTED = time.monotonic()  # before the grader's imports: what the job costs beside its grade


def die_with_parent() -> None:
    """SIGKILL this process when the driver that started it dies (Linux)."""
    expected = os.environ.get(PARENT_ENV)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    # The driver may have died before prctl: then this process was re-parented already.
    if expected and os.getppid() != int(expected):
        os._exit(EXIT_INFRA)


def grading_options(options: dict | None) -> dict | None:
    if options is None:
        return None
    return {k: (Path(v) if k in PATH_OPTIONS and v is not None else v) for k, v in options.items()}


def grade_spec(spec: dict) -> dict:
    """The results dict of the submission in `spec`, with the batch's own section added."""
    from graders.assignment import load
    from graders.grading import INSTRUCTOR, grade, rejected_result
    from graders.sandbox import Limits

    assignment = load(spec["assignment"])  # the pack's folder: the job grades it whatever its environment
    started = time.time()
    if spec.get("rejected"):  # decided from its name (graders/batch/discover.py): nothing of it runs
        results = rejected_result(spec["source"], spec["rejected"], assignment, INSTRUCTOR, time.perf_counter(),
                                  spec.get("parts"), grading_options(spec.get("options")))
    else:
        results = grade(spec["source"], assignment=assignment, seed=spec.get("seed"), only_parts=spec.get("parts"),
                        limits=Limits.from_json(spec["limits"]), options=grading_options(spec.get("options")),
                        extra_secrets=spec.get("extra_secrets", ()), unsafe=bool(spec.get("unsafe")),
                        isolation=spec.get("isolation") or "full")
    results["batch"] = {"student_id": spec["student_id"], "name": spec.get("name", ""), "late": bool(spec.get("late")),
                        "outcome": None, "attempt": spec.get("attempt", 1),
                        "input_sha256": spec["input_sha256"], "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "wall_s": round(time.time() - started, 3), "host": os.uname().nodename}
    # "error": grade() could not run the student's code at all (no worker started); the next
    # `grade batch --redo-errors` grades it again.
    results["batch"]["outcome"] = {"rejected": "rejected", "error": "error"}.get(results.get("status"), "graded")
    if results.get("status") == "error":
        results["batch"]["reason"] = results.get("reason")
    return results


def marker_of(spec: dict) -> dict:
    return {"key": spec["key"], "student_id": spec["student_id"], "input_sha256": spec["input_sha256"],
            "source": str(spec["source"]), "grader": spec.get("grader"), "final": True,
            "attempt": spec.get("attempt", 1)}


def run_spec(spec: dict) -> str:
    """Grade and publish; returns the outcome. Used by this module's main and by Slurm tasks."""
    from graders.batch import store
    from graders.batch.merge import apply_stored_manual

    out = Path(spec["out"])
    store.log_event(out, "start", spec["student_id"], attempt=spec.get("attempt", 1), key=spec["key"])
    results = grade_spec(spec)
    apply_stored_manual(out, spec["student_id"], results)
    store.publish(out, spec["student_id"], results, marker_of(spec))
    outcome = store.outcome_of(results)
    store.log_event(out, "done", spec["student_id"], outcome=outcome, score=results.get("score"),
                    wall_s=results["batch"]["wall_s"], process_s=round(time.monotonic() - PROCESS_STARTED, 3),
                    attempt=spec.get("attempt", 1))
    return outcome


def node_failure(error: BaseException) -> str | None:
    """What about this machine, not the submission, stopped the grade, or None: it cannot isolate
    student code, a dependency of the grader is missing, CUDA or its libraries fail."""
    from graders.sandbox.isolation import IsolationUnavailable

    if isinstance(error, IsolationUnavailable):
        return "it cannot isolate student code: " + " ".join(str(error).split())
    if isinstance(error, ImportError):
        return f"a dependency of the grader is missing: {type(error).__name__}: {error}"
    text = f"{type(error).__name__}: {error}"
    if any(word in text for word in ("CUDA", "cuDNN", "cuBLAS", "NCCL")):
        return "its GPU failed: " + " ".join(text.split())[:1000]
    return None


def write_node_failure(spec: dict, reason: str) -> None:
    folder = Path(spec["out"]) / ".batch" / INFRA_DIR
    folder.mkdir(parents=True, exist_ok=True)
    note = {"host": os.uname().nodename, "reason": reason, "attempt": spec.get("attempt", 1), "t": time.time()}
    temporary = folder / f".{spec['student_id']}.{os.getpid()}.tmp"
    temporary.write_text(json.dumps(note))
    os.replace(temporary, folder / f"{spec['student_id']}.json")


def read_node_failure(out: Path, student_id: str) -> dict | None:
    try:
        return json.loads((Path(out) / ".batch" / INFRA_DIR / f"{student_id}.json").read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()
    spec = json.loads(Path(argv[0]).read_text())
    try:
        if not spec.get("unsafe"):  # before torch is imported: a node that cannot isolate says so at once
            from graders.sandbox.isolation import require_isolation

            require_isolation(spec.get("isolation") or "full")
        run_spec(spec)
    except MemoryError:
        print("run_one: out of memory in the grading process", file=sys.stderr)
        return EXIT_INFRA
    except Exception as error:
        traceback.print_exc()
        reason = node_failure(error)
        if reason is not None:
            print(f"run_one: this machine ({os.uname().nodename}) cannot grade: {reason}", file=sys.stderr)
            write_node_failure(spec, reason)
            return EXIT_NODE
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
