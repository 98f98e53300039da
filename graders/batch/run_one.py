"""Grade one submission of a batch and publish its result folder.

    python -m graders.batch.run_one SPEC.json

SPEC.json (written by the batch driver, see supervise.job_spec) names the input, the student id,
the output folder and the grading configuration. This process grades in-process with
`graders.grading.grade` (which starts its own sandbox worker for the student's code), writes
results.json and the reports into a temporary folder and renames it into place.

Exit status: 0 when the result folder was published (whatever the student's score: a failure,
a timeout or a rejection is a result); EXIT_INFRA (75) for a loss of infrastructure that a retry
may cure (out of memory in this process, the driver gone); anything else is a grader bug, which
the driver records as an error result without retrying.

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
PARENT_ENV = "GRADE_BATCH_PARENT"
PATH_OPTIONS = ("imdb", "feature_cache")


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
    from graders.assignment import select
    from graders.grading import grade
    from graders.sandbox import Limits

    if spec.get("assignment"):
        select(spec["assignment"])
    started = time.time()
    results = grade(spec["source"], seed=spec.get("seed"), only_parts=spec.get("parts"),
                    limits=Limits.from_json(spec["limits"]), options=grading_options(spec.get("options")),
                    extra_secrets=spec.get("extra_secrets", ()), unsafe=bool(spec.get("unsafe")))
    results["batch"] = {"student_id": spec["student_id"], "name": spec.get("name", ""), "outcome": None, "attempt": spec.get("attempt", 1),
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
                    wall_s=results["batch"]["wall_s"], attempt=spec.get("attempt", 1))
    return outcome


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    die_with_parent()
    spec = json.loads(Path(argv[0]).read_text())
    try:
        run_spec(spec)
    except MemoryError:
        print("run_one: out of memory in the grading process", file=sys.stderr)
        return EXIT_INFRA
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
