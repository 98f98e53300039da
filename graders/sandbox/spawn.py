"""Starting worker processes, without importing torch: `grade check` starts its worker first
thing, so that the worker imports torch and warms up torch.optim while the grader imports its
own modules, on another core.

A self-check's worker is started before anything is known of the submission: it imports its
modules, then waits for its configuration, the first message on its request pipe
(`python -m graders.sandbox.worker --config-on-stdin`). `prestart_self_check_worker` starts one
and keeps it; the first `Worker(containment_only=True)` adopts it (`take_prestarted`), and any
later one starts its own the same way. Nothing of the submission reaches a process before its
configuration does: what the student's code meets is the same either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
# Passed on to a self-check's worker: Windows's Python needs SYSTEMROOT to start, and its
# libraries are found through PATH there.
PLATFORM_VARIABLES = ("PATH", "SYSTEMROOT", "WINDIR")
PIPE_BYTES = 1 << 20  # the request and reply pipes (default 64 KiB); see `pipe`


@dataclass
class StartedWorker:
    """A self-check's worker process waiting for its configuration, and the grader's pipe ends."""

    process: subprocess.Popen
    request_write: int
    reply_read: int
    output_read: int
    threads: int


_prestarted: dict[tuple[str, ...], StartedWorker] = {}


def base_environment(threads: int) -> dict[str, str]:
    """What every worker's environment holds; its own folders (HOME, TMPDIR) are added later."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
        "USER": "grader-sandbox", "LOGNAME": "grader-sandbox",  # the sandbox uid has no passwd entry
        "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONFAULTHANDLER": "1",  # a segfault's Python traceback ends up in the output
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        **{name: str(threads) for name in THREAD_VARIABLES},
    }


def start_self_check_worker(*, threads: int, preload: tuple[str, ...] = ()) -> StartedWorker:
    """A self-check's worker, with what every platform has: the protocol on its stdin and
    stdout (it moves them aside and points its stdout at its stderr), its output on its stderr.
    It imports its modules and the grader-side modules in `preload` (a second or more of
    transformers), starts warming up torch.optim in a thread, and waits for its configuration."""
    environment = base_environment(threads)
    environment.update({name: os.environ[name] for name in PLATFORM_VARIABLES if name in os.environ})
    python, environment = interpreter_itself(environment)
    command = [python, "-s", "-P", "-m", "graders.sandbox.worker", "--config-on-stdin", *preload]
    request_read, request_write = pipe()
    reply_read, reply_write = pipe()
    output_read, output_write = os.pipe()
    process = spawn(command, ours=(request_write, reply_read, output_read),
                    theirs=(request_read, reply_write, output_write),
                    stdin=request_read, stdout=reply_write, stderr=output_write, env=environment)
    return StartedWorker(process, request_write, reply_read, output_read, threads)


def prestart_self_check_worker(*, threads: int, preload: tuple[str, ...] = ()) -> None:
    """Start a worker the first self-check of this process will adopt (one per `preload`)."""
    if tuple(preload) not in _prestarted:
        _prestarted[tuple(preload)] = start_self_check_worker(threads=threads, preload=preload)


def take_prestarted(*, threads: int, preload: tuple[str, ...] = ()) -> StartedWorker | None:
    """The prestarted worker for `preload`, if one runs with these settings; a mismatched one is
    ended."""
    started = _prestarted.pop(tuple(preload), None)
    if started is None:
        return None
    if started.threads == threads and started.process.poll() is None:
        return started
    _end(started)
    return None


def end_prestarted() -> None:
    """End the workers started ahead that no grade adopted (a self-check that could not start)."""
    while _prestarted:
        _end(_prestarted.pop(next(iter(_prestarted))))


def _end(started: StartedWorker) -> None:
    for fd in (started.request_write, started.reply_read, started.output_read):
        os.close(fd)  # it reads the end of its configuration pipe and exits
    started.process.wait()


def spawn(command: list[str], *, ours: tuple[int, ...], theirs: tuple[int, ...], **popen) -> subprocess.Popen:
    """The worker in a session of its own (POSIX: a process group to kill; ignored on Windows).
    The pipe ends the worker inherits (`theirs`) are closed here once it has them; the grader's
    own ends (`ours`) too if it could not start."""
    try:
        return subprocess.Popen(command, start_new_session=True, **popen)
    except BaseException:
        for fd in ours:
            os.close(fd)
        raise
    finally:
        for fd in theirs:
            os.close(fd)


def pipe() -> tuple[int, int]:
    """A pipe that holds a typical request or reply whole: with the default 64 KiB, sending a
    few activations takes several switches between the two processes."""
    read, write = os.pipe()
    try:
        import fcntl
    except ImportError:  # Windows
        return read, write
    if hasattr(fcntl, "F_SETPIPE_SZ"):  # Linux only: elsewhere pipes keep the system's size
        try:
            fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:
            pass  # above /proc/sys/fs/pipe-max-size for this user: keep the default
    return read, write


def interpreter_itself(environment: dict[str, str]) -> tuple[str, dict[str, str]]:
    """The Python to start a worker with, and its environment. On Windows, a virtual
    environment's python.exe is a launcher that runs the real interpreter as its child: killing
    the launcher would leave the worker running. Like multiprocessing there, start the base
    interpreter and tell it which environment it is in."""
    if sys.platform == "win32" and sys._base_executable != sys.executable:
        return sys._base_executable, {**environment, "__PYVENV_LAUNCHER__": sys.executable}
    return sys.executable, environment
