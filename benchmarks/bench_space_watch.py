"""The write bound of container isolation (isolation.SpaceWatch): what the watch costs a grade,
and how far past its bound a worker gets before it is stopped.

    sudo .venv/bin/python benchmarks/bench_space_watch.py [--repeat 3]

Container isolation needs root and a Python every user may read: the script runs itself again
under the system's Python (/usr/bin/python3.11) in a virtual environment that sees this one's
packages, with bubblewrap switched off, as tests/test_container_isolation.py does.

Cost: a worker of an empty submission lives `--idle` seconds; the watch thread's own CPU time
(from /proc) per second of the worker's life, the counts it made (a count every 0.2 s, polls of
statvfs every 10 ms between), and the time of the count each reply pays (`check`), for a folder
of the submission alone and of 4,096 files (the bound's count of files), and of its statvfs polls alone.

Overshoot: the student's code writes past the bound (256 MiB, files of 64 MiB at most: the
defaults) as fast as it can, with plain writes of 1 MiB, and with posix_fallocate (which the
seccomp filter turns into glibc's block-by-block writes); what its folder held when the worker
was stopped, less the bound, is the overshoot. The same with the statvfs polls off (a count
every interval only, as before) shows what the polls buy, and preallocation with the filter off
what refusing fallocate buys.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import site
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3.11"
ATTACK = '''
import os


def write_fast(mib_per_file, files):
    chunk = b"x" * (1 << 20)
    for index in range(files):
        with open("written-%d" % index, "wb") as written:
            for _ in range(mib_per_file):
                written.write(chunk)


def preallocate(mib_per_file, files):
    for index in range(files):
        fd = os.open("reserved-%d" % index, os.O_RDWR | os.O_CREAT, 0o600)
        os.posix_fallocate(fd, 0, mib_per_file << 20)
        os.close(fd)


def many_files(count):
    os.makedirs("many", exist_ok=True)
    for index in range(count):
        open(os.path.join("many", str(index)), "w").close()
'''


def container_python(scratch: Path) -> Path:
    """A virtual environment of the system's Python that sees this checkout and this
    environment's packages (every user may read it: the worker's uid runs it)."""
    venv = scratch / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    folders = [str(REPO), *(folder for folder in site.getsitepackages() if os.path.isdir(folder))]
    Path(purelib, "_bench_environment.pth").write_text("".join(f"{folder}\n" for folder in folders))
    return venv / "bin" / "python"


def thread_cpu_s(native_id: int) -> float:
    fields = Path(f"/proc/self/task/{native_id}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def inside(args) -> None:
    from graders.sandbox import Limits, Worker, isolation, walk
    from graders.sandbox.errors import WorkerCrashed

    counts = []
    space_used = isolation.space_used

    def counted(*arguments, **options):
        started = time.perf_counter()
        try:
            return space_used(*arguments, **options)
        finally:
            counts.append(time.perf_counter() - started)

    isolation.space_used = counted
    left = []
    discard = walk.discard

    def measured_discard(path):
        if Path(path).name.startswith("w-") and os.path.isdir(path):
            left.append(space_used(Path(path), -2, -2, max_files=1 << 40, pids=[])[0] / (1 << 20))
        return discard(path)

    walk.discard = measured_discard
    submission = Path(tempfile.mkdtemp(prefix="bench-space-watch-", dir="/var/tmp"))
    submission.chmod(0o755)
    (submission / "attack.py").write_text(ATTACK)
    (submission / "attack.py").chmod(0o644)
    limits = Limits()

    def worker(**layers) -> Worker:
        made = Worker(submission, limits=limits, isolation_level="container")
        made.layers = dataclasses.replace(made.layers, **layers)
        return made

    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, {sys.version.split()[0]}; "
          f"bound {limits.workdir_bytes >> 20} MiB / {limits.workdir_files} files, files of {limits.max_file_bytes >> 20} MiB")
    interval = isolation.SPACE_WATCH_INTERVAL_S
    for label, files, counting in (("the submission alone", 0, interval), ("4,096 files", limits.workdir_files - 10, interval),
                                   ("its statvfs polls alone (no count)", 0, 1e9)):
        isolation.SPACE_WATCH_INTERVAL_S = counting
        cpu, per_second, checks = [], [], []
        for _ in range(args.repeat):
            with worker() as made:
                if files:
                    made.call("attack", "many_files", files)
                counts.clear()
                watch = made._space_watch
                before, started = thread_cpu_s(watch._thread.native_id), time.monotonic()
                time.sleep(args.idle)
                cpu.append(thread_cpu_s(watch._thread.native_id) - before)
                per_second.append(len(counts) / (time.monotonic() - started))
                replies = []
                for _ in range(20):
                    timed = time.perf_counter()
                    watch.check(pids=[made._process.pid])
                    replies.append(time.perf_counter() - timed)
                checks.append(statistics.median(replies))
        isolation.SPACE_WATCH_INTERVAL_S = interval
        print(f"watch, {label}: {1000 * statistics.median(cpu) / args.idle:.1f} ms CPU per second of a worker's life "
              f"({statistics.median(per_second):.1f} counts/s), {1e3 * statistics.median(checks):.2f} ms per reply's "
              f"count (runs {', '.join(f'{1000 * c / args.idle:.1f}' for c in cpu)} ms/s)")

    polls = isolation.SPACE_POLL_S
    for label, call, layers, poll in (
            ("writes of 1 MiB", ("write_fast", 64, 64), {}, polls),
            ("posix_fallocate (filter: block by block)", ("preallocate", 63, 64), {}, polls),
            ("writes of 1 MiB, counted every interval only", ("write_fast", 64, 64), {}, isolation.SPACE_WATCH_INTERVAL_S),
            ("posix_fallocate, counted every interval only", ("preallocate", 63, 64), {},
             isolation.SPACE_WATCH_INTERVAL_S),
            ("posix_fallocate, without the filter", ("preallocate", 63, 64), {"seccomp": False}, polls)):
        isolation.SPACE_POLL_S = poll
        overshoot = []
        for _ in range(args.repeat):
            left.clear()
            with worker(**layers) as made:
                try:
                    made.call("attack", *call)
                    outcome = "not stopped"
                except WorkerCrashed as error:
                    outcome = "stopped" if "bound of its writable space" in str(error) else str(error)[:200]
            overshoot.append(max(left, default=0) - limits.workdir_bytes / (1 << 20))
        isolation.SPACE_POLL_S = polls
        print(f"{label}: {outcome}, {statistics.median(overshoot):.0f} MiB past the bound "
              f"({', '.join(f'{o:.0f}' for o in overshoot)})")
    walk.remove(submission)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds a worker lives for the cost")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(args)
        return
    if os.geteuid() != 0 or not os.path.exists(SYSTEM_PYTHON):
        raise SystemExit(f"bench_space_watch: needs root and {SYSTEM_PYTHON} (container isolation)")
    with tempfile.TemporaryDirectory(prefix="bench-space-watch-", dir="/var/tmp") as scratch:
        os.chmod(scratch, 0o755)
        python = container_python(Path(scratch))
        environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
        subprocess.run([str(python), __file__, "--inside", "--repeat", str(args.repeat), "--idle", str(args.idle)],
                       check=True, cwd="/", env={**environment, "TRANSFORMER_GRADER_BWRAP": ""})


if __name__ == "__main__":
    main()
