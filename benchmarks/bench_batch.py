"""Throughput of `grade batch` with 1 and 2 jobs, and the batch layer's overhead per submission.

    .venv/bin/python benchmarks/bench_batch.py [--count 8] [--parts attention] [--json out.json]

All figures come from one run on this machine, as ratios so that they carry over:

- speedup: wall time of the batch with --jobs 1 over the batch with --jobs 2 (same submissions);
- overhead: the batch's wall time per submission with --jobs 1 over a plain `grade SUBMISSION`
  command per submission (one process per submission either way; the batch adds discovery,
  hashing, the job's spec file, the done-marker, the atomic rename, the ledger and the
  gradebook/summary rebuild), and over `grade()` called in a warm process (what no command can
  reach: it skips the Python and torch start of the grading process).

The load average is printed before and after: on a shared machine other work takes cores away
and the speedup shrinks accordingly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def make_submissions(root: Path, count: int) -> Path:
    subs = root / "subs"
    subs.mkdir()
    for i in range(count):
        shutil.copytree(REPO / "reference" / "bert", subs / f"student{i:03d}",
                        ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    return subs


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=8, help="submissions per batch")
    parser.add_argument("--singles", type=int, default=3, help="`grade` commands timed for the baseline")
    parser.add_argument("--parts", nargs="+", default=["attention"])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    python = sys.executable
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        root = Path(tmp)
        subs = make_submissions(root, args.count)
        parts = ["--parts", *args.parts]
        # warm the file cache (imports), not measured
        timed([python, "-m", "graders.cli", str(subs / "student000"), "--out", str(root / "warm"), *parts])

        singles = [timed([python, "-m", "graders.cli", str(subs / f"student{i:03d}"), "--out", str(root / f"single{i}"),
                          *parts]) for i in range(args.singles)]
        single_s = sum(singles) / len(singles)

        in_process = subprocess.run([python, "-c", (
            "import json, sys, time\n"
            "from graders.grading import grade\n"
            "grade(sys.argv[1], only_parts=json.loads(sys.argv[2]))\n"
            "times = []\n"
            "for path in sys.argv[3:]:\n"
            "    t = time.perf_counter(); grade(path, only_parts=json.loads(sys.argv[2])); times.append(time.perf_counter() - t)\n"
            "print(sum(times) / len(times))\n"), str(subs / "student000"), json.dumps(args.parts),
            *[str(subs / f"student{i:03d}") for i in range(min(args.singles, args.count))]],
            check=True, capture_output=True, text=True, cwd=REPO)
        warm_s = float(in_process.stdout.strip().splitlines()[-1])

        walls = {}
        for jobs in (1, 2):
            out = root / f"batch{jobs}"
            walls[jobs] = timed([python, "-m", "graders.batch.cli", str(subs), "--assignment", "bert", "--out", str(out), "--jobs", str(jobs),
                                 "--no-progress", *parts])
    load_after = os.getloadavg()
    figures = {
        "cpus": os.cpu_count(), "submissions": args.count, "parts": args.parts,
        "load_before": [round(x, 2) for x in load_before], "load_after": [round(x, 2) for x in load_after],
        "grade_command_s": round(single_s, 2), "grade_in_process_s": round(warm_s, 2),
        "batch_jobs1_s": round(walls[1], 2), "batch_jobs2_s": round(walls[2], 2),
        "batch_jobs1_per_submission_s": round(walls[1] / args.count, 2),
        "batch_jobs2_per_submission_s": round(walls[2] / args.count, 2),
        "speedup_2_jobs": round(walls[1] / walls[2], 2),
        "overhead_vs_grade_command": round(walls[1] / args.count / single_s, 3),
        "overhead_vs_grade_in_process": round(walls[1] / args.count / warm_s, 3),
    }
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
