"""`sandbox.probe`: a harness task that reports what the worker itself finds around it.

Run by `grade doctor` in a worker with no student code loaded (an empty submission), so its
report is the sandbox's own: which uid it runs as, which capabilities it kept, how much it may
write, whether it has a network and which of the grader's secrets exist for it.
"""

from __future__ import annotations

import glob
import os
import stat
from typing import Any

from graders.sandbox.audit import read_proc
from graders.sandbox.harness import task


@task("sandbox.probe")
def sandbox_probe(ctx: Any, secret_paths: list) -> dict:
    status = read_proc("/proc/self/status").splitlines()
    fields = dict(line.split(":\t", 1) for line in status if ":\t" in line)
    space = {}
    for name, path in (("workdir", str(ctx.workdir)), ("tmp", "/tmp"), ("shm", "/dev/shm")):
        info = os.statvfs(path)
        space[name] = {"bytes": info.f_blocks * info.f_frsize, "files": info.f_files}
    return {
        "uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "groups": os.getgroups(),
        "capabilities": {name: int(fields.get(name, "0"), 16) for name in ("CapEff", "CapPrm", "CapAmb")},
        "no_new_privs": fields.get("NoNewPrivs", "").strip() == "1",
        "seccomp_filters": int(fields.get("Seccomp_filters", "0")),
        "cpus": sorted(os.sched_getaffinity(0)),
        "space": space,
        "tmp_writable": os.access("/tmp", os.W_OK),
        "interfaces": _interfaces(),
        "processes_visible": sum(entry.isdigit() for entry in os.listdir("/proc")) if os.path.isdir("/proc/self") else None,
        "secrets_present": [path for path in secret_paths if _visible(path)],
        "gpu_nodes": sorted(glob.glob("/dev/nvidia*")),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def _interfaces() -> list[str]:
    """The network interfaces of the worker's network namespace, read from /proc: listing them
    through a socket (if_nameindex) is refused by the worker's seccomp filter."""
    table = read_proc("/proc/net/dev").splitlines()
    return sorted(line.split(":", 1)[0].strip() for line in table[2:])


def _visible(path: str) -> bool:
    """Whether `path` exists here with its content: bubblewrap masks a secret inside a bound
    folder with an empty tmpfs (a folder) or /dev/null (a file)."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISCHR(info.st_mode):
        return False
    if stat.S_ISDIR(info.st_mode) and os.path.ismount(path):
        usage = os.statvfs(path)
        return usage.f_files - usage.f_ffree > 1
    return True


@task("sandbox.imports")
def sandbox_imports(ctx: Any, modules: list) -> dict:
    """{module: None, or the error its import raised here}: what the checks' tasks import, tried
    in the worker itself (its audit hook, its uid, its view of the file system)."""
    import importlib

    from graders.dependencies import error_chain

    failed = {}
    for module in modules:
        try:
            importlib.import_module(module)
            failed[module] = None
        except BaseException as error:  # noqa: BLE001 - what the doctor reports
            bottom = error_chain(error)[-1]
            failed[module] = f"{type(bottom).__name__}: {str(bottom)[:300]}"
    return failed

