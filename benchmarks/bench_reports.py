"""How long the reports of a full-size result take to render.

The result is synthetic (tests/report_samples.py: 8 parts, 80 checks, a third failing with
diagnoses, tracebacks and output, six 32x32 attention maps, two 20-epoch training curves,
masking proportions). The goal: well under a second of a grade's time.

    .venv/bin/python benchmarks/bench_reports.py [--repeat 20]

A grade renders once per process, so the first render (which compiles the template) is shown
apart from the median of the warm ones.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import report_samples  # noqa: E402
from graders.reports import render_html, to_gradescope  # noqa: E402


def seconds(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20, help="timed runs after the first (default 20)")
    args = parser.parse_args()

    results = report_samples.full_size()
    checks = sum(len(part["checks"]) for part in results["parts"])
    first = seconds(render_html, results)
    html_runs = [seconds(render_html, results) for _ in range(args.repeat)]
    gradescope_runs = [seconds(to_gradescope, results) for _ in range(args.repeat)]
    size_mb = len(render_html(results).encode()) / 1e6

    print(f"full-size result: {len(results['parts'])} parts, {checks} checks; report {size_mb:.2f} MB")
    print(f"render_html first call (template compiled): {first:.3f} s")
    print(f"render_html median of {args.repeat}: {statistics.median(html_runs):.3f} s")
    print(f"to_gradescope median of {args.repeat}: {statistics.median(gradescope_runs):.4f} s")


if __name__ == "__main__":
    main()
