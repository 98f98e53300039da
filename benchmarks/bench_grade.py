"""A full grade of the reference (every part except GPU training) against the bare start of
`python -c "import torch, transformers"`, measured in one run on this machine.

    .venv/bin/python benchmarks/bench_grade.py [--repeat 3]

Prints the ratio, the time per part, the worker start, and the peak memory (resident set) of the
grading process and of the worker (its children), as a table for docs/engine.md.
"""

import argparse
import resource
import statistics
import subprocess
import sys
import time

from graders.assignment import load
from graders.grading import grade


def bare_import_s():
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, transformers"], check=True)
    return time.perf_counter() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--assignment", default="bert", help="the pack whose reference is graded (default: bert)")
    args = parser.parse_args()
    assignment = load(args.assignment)
    imports, grades, runs = [], [], []
    for _ in range(args.repeat):
        imports.append(bare_import_s())
        started = time.perf_counter()
        results = grade(assignment.reference_dir, only_parts=None, assignment=assignment)
        grades.append(time.perf_counter() - started)
        runs.append(results)
    bare, full = statistics.median(imports), statistics.median(grades)
    print(f"bare `import torch, transformers`: {bare:.2f} s (median of {args.repeat})")
    print(f"full grade of the reference:       {full:.2f} s (median of {args.repeat})")
    print(f"ratio:                             {full / bare:.1f}x")
    timings = runs[-1]["timings"]
    print(f"worker start: {timings['worker_start_s']:.2f} s")
    print("| part | seconds |\n| --- | --- |")
    for part, seconds in timings["parts"].items():
        print(f"| {part} | {seconds:.2f} |")
    grader_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak RSS: grader {grader_mb:.0f} MB, largest child (worker) {worker_mb:.0f} MB")
    print(f"score {runs[-1]['score']} / {runs[-1]['max_score']}")


if __name__ == "__main__":
    main()
