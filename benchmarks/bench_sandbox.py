"""Round trip of a call through the sandboxed worker versus the same call in process.

    python benchmarks/bench_sandbox.py [--calls 500]

The call is `scaled_dot_product(q, k, v, 0.0)` on (4, 4, 32, 16) tensors: three tensors go to
the worker, two come back. The in-process call runs the same source file with the same thread
count as the worker (1). Calls alternate between the two sides, so that a machine whose load
changes during the run slows both alike; the wall-clock columns are medians over all calls.

Each round trip wakes the worker and then the grader, so on a loaded machine its wall time is
mostly waiting to be scheduled. The CPU columns (user + system time of both processes per
call, over a block of calls) show the cost that the sandbox itself adds.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from graders.sandbox import Limits, Worker

WARM_UP_S = 4.0
STUDENT_ATTENTION = '''
import math
import torch

def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask.bool(), float("-inf"))
    attention = torch.nn.functional.dropout(torch.softmax(scores, dim=-1), attn_drop_rate)
    return attention @ v, attention


def cpu_seconds():
    import resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
'''


def median_us(times: list[float]) -> float:
    return statistics.median(times) * 1e6


def measure(worker: Worker, in_process, q: torch.Tensor, calls: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"in process": [], "worker": [], "worker ping": []}
    steps = {
        "in process": lambda: in_process(q, q, q, 0.0),
        "worker": lambda: worker.call("attention", "scaled_dot_product", q, q, q, 0.0),
        "worker ping": worker.ping,
    }
    for step in steps.values():  # warm up: first calls import and allocate
        for _ in range(10):
            step()
    for _ in range(calls):
        for name, step in steps.items():
            started = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - started)
    return times


def cpu_per_call_us(worker: Worker, in_process, q: torch.Tensor, calls: int) -> tuple[float, float]:
    """CPU time per call: in process, and grader plus worker through the sandbox."""
    started = time.process_time()
    for _ in range(calls):
        in_process(q, q, q, 0.0)
    in_process_cpu = time.process_time() - started
    worker_started = worker.call("attention", "cpu_seconds")
    started = time.process_time()
    for _ in range(calls):
        worker.call("attention", "scaled_dot_product", q, q, q, 0.0)
    grader_cpu = time.process_time() - started
    worker_cpu = worker.call("attention", "cpu_seconds") - worker_started
    return in_process_cpu / calls * 1e6, (grader_cpu + worker_cpu) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    q = torch.randn(4, 4, 32, 16)
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "attention.py"
        source.write_text(STUDENT_ATTENTION)
        spec = importlib.util.spec_from_file_location("bench_attention", source)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        rows = []
        for use_bwrap in (True, False):  # full isolation, then the unsafe layers alone
            # The start counts the checks made before the worker starts (uid lease, secrets).
            started = time.perf_counter()
            worker = Worker(folder, limits=Limits(), use_bwrap=use_bwrap, require_isolation=use_bwrap)
            with worker:
                start_s = time.perf_counter() - started
                # The worker warms torch.optim up in a background thread for about 2 s of CPU
                # after its start; measured during it, every call would look that much dearer.
                time.sleep(WARM_UP_S)
                times = measure(worker, module.scaled_dot_product, q, args.calls)
                cpu = cpu_per_call_us(worker, module.scaled_dot_product, q, args.calls)
            layers = "bwrap" if worker.layers.bwrap else "no bwrap"
            layers += f", uid {worker.layers.sandbox_uid}" if worker.layers.sandbox_uid is not None else ", own uid"
            rows.append((layers, start_s, {name: median_us(t) for name, t in times.items()}, cpu))

    print(f"{args.calls} calls each, torch {torch.__version__}, python {sys.version.split()[0]}, "
          f"1 thread, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print(f"{'':<20} {'':>7} {'wall clock, median us':^38}  {'CPU per call, us':^23}")
    print(f"{'worker layers':<20} {'start s':>7} {'in-process':>10} {'worker':>8} {'ping':>7} {'ratio':>7}  "
          f"{'in-process':>10} {'worker':>7} {'ratio':>5}")
    for layers, start_s, medians, (cpu_in_process, cpu_worker) in rows:
        print(f"{layers:<20} {start_s:>7.2f} {medians['in process']:>10.0f} {medians['worker']:>8.0f} "
              f"{medians['worker ping']:>7.0f} {medians['worker'] / medians['in process']:>7.2f}  "
              f"{cpu_in_process:>10.0f} {cpu_worker:>7.0f} {cpu_worker / cpu_in_process:>5.2f}")


if __name__ == "__main__":
    main()
