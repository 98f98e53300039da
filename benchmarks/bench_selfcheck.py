"""The student's full public self-check (`grade check` in a homework folder) against the bare
start of `python -c "import torch"`, measured in one run on this machine (goal: at most 2.5x;
one part on its own, `--parts attention`: at most 1.5 s on top of the bare import).

    .venv/bin/python benchmarks/bench_selfcheck.py [--repeat 3] [--homework reference|template|PATH] [--parts P ...]

Both are timed as a student meets them: a fresh process, from its start to its exit. The
bare import is measured before and after each self-check, so that a machine whose load changes
during the run moves both figures alike. `reference` (the default) is a perfect homework, the
slowest case: every check runs all its examples; `template` is a fresh copy of the template,
where every check stops at its first NotImplementedError.

Prints the ratio, the time per part, the worker start, and the machine's load, for
docs/selfcheck.md; where a selected part preloads modules (the rubric's `preload`), the bare import
of those too, timed beside the others: a floor that no self-check of that part goes under.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from graders.assignment import load
from graders.scoring import preload_of


def timed(command, **kwargs):
    started = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, **kwargs)
    return time.perf_counter() - started, run


def homework_folder(assignment, kind, scratch):
    folder = Path(scratch) / "homework"
    if kind == "reference":
        shutil.copytree(assignment.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    elif kind == "template":
        shutil.copytree(assignment.template_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copytree(kind, folder, ignore=shutil.ignore_patterns("__pycache__", ".grade"))
    return folder


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--assignment", default="bert", help="the pack whose reference is graded (default: bert)")
    parser.add_argument("--homework", default="reference", help="reference, template or a folder")
    parser.add_argument("--parts", nargs="*", default=[], help="check only these parts (default: all)")
    args = parser.parse_args()
    assignment = load(args.assignment)
    selected = [part for part in assignment.rubric.parts if not args.parts or part.id in args.parts]
    preload = preload_of(selected)
    imports, preloads, checks, statuses = [], [], [], []
    results = None
    with tempfile.TemporaryDirectory(prefix="bench-selfcheck-") as scratch:
        folder = homework_folder(assignment, args.homework, scratch)
        imports.append(timed([sys.executable, "-c", "import torch"], check=True)[0])
        for _ in range(args.repeat):
            seconds, run = timed([sys.executable, "-P", "-m", "graders.cli", "check", *args.parts], cwd=folder)
            checks.append(seconds)
            statuses.append(run.returncode)
            imports.append(timed([sys.executable, "-c", "import torch"], check=True)[0])
            if preload:
                preloads.append(timed([sys.executable, "-c", "; ".join(f"import {name}" for name in preload)],
                                      check=True)[0])
            results = json.loads((folder / ".grade" / "results.json").read_text())
    bare, full = statistics.median(imports), statistics.median(checks)
    counted = [c for p in results["parts"] for c in p["checks"]]
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end")
    print(f"bare `python -c 'import torch'`:   {bare:.2f} s (median of {len(imports)}: "
          + ", ".join(f"{s:.1f}" for s in imports) + ")")
    what = f"self-check of {' '.join(args.parts)}" if args.parts else "full self-check"
    print(f"{what} of {args.homework}: {full:.2f} s (median of {len(checks)}: "
          + ", ".join(f"{s:.1f}" for s in checks) + f"; exit status {statuses})")
    print(f"ratio:                              {full / bare:.1f}x, {full - bare:.2f} s on top of the import "
          "(goals: at most 2.5x for the whole; at most 1.5 s on top for one part)")
    if preload:
        floor = statistics.median(preloads)
        print(f"bare import of what a part preloads ({', '.join(preload)}): {floor:.2f} s, {floor / bare:.1f}x "
              "the bare torch import (median of " + ", ".join(f"{s:.1f}" for s in preloads) + "): that part's "
              "worker imports it before its first check, so no self-check of the part is faster")
    timings = results["timings"]
    print(f"{len(counted)} public checks; worker start {timings['worker_start_s']:.2f} s; "
          f"grading {timings['total_s']:.2f} s inside the process")
    print("| part | seconds |\n| --- | --- |")
    for part, seconds in timings["parts"].items():
        print(f"| {part} | {seconds:.2f} |")
    slowest = sorted(timings["checks"].items(), key=lambda item: -item[1])[:5]
    print("slowest checks: " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in slowest))


if __name__ == "__main__":
    main()
