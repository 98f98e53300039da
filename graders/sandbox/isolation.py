"""The operating-system layers around a worker: bubblewrap, the sandbox user, its directory.

- bubblewrap (when installed and working): new network, PID, IPC and UTS namespaces (no
  network at all), a read-only view of the file system, a private /tmp, the worker's own
  directory as the only writable place, an empty tmpfs (or /dev/null) over every secret path.
- The sandbox user (when the grader runs as root): the worker drops to an unprivileged uid, so
  RLIMIT_NPROC binds and root-only files are out of reach. Without bubblewrap this needs the
  interpreter to be readable by that user; when it is not (a Python under /root), the worker
  stays root, which `Layers.note` records.
- A fresh directory per worker, under a directory that other users cannot list, holding a
  copy of the submission: the worker never sees where the submission came from.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import site
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import graders

BWRAP_CANDIDATES = ("bwrap", "/usr/bin/bwrap")


@dataclass(frozen=True)
class Layers:
    """Which sandbox layers a worker runs under; recorded with the results."""

    bwrap: bool
    sandbox_uid: int | None  # the uid the worker switches to; None: it keeps the grader's
    note: str = ""  # why a layer is missing

    def to_json(self) -> dict:
        # The rlimits and the audit hook have no condition: every worker has them.
        return {"bwrap": self.bwrap, "sandbox_uid": self.sandbox_uid, "rlimits": True,
                "audit_hook": True, "note": self.note}


def choose_layers(*, use_bwrap: bool | None, sandbox_uid: int) -> Layers:
    """`use_bwrap`: None uses bubblewrap where it works, True requires it, False avoids it."""
    as_root = os.geteuid() == 0
    bwrap = find_bwrap() if use_bwrap is not False else None
    with_bwrap = bwrap is not None and bwrap_works(bwrap, as_root)
    if use_bwrap and not with_bwrap:
        raise RuntimeError("bubblewrap was required but is not installed or cannot create namespaces here")
    missing = "" if with_bwrap else "no bubblewrap: no namespaces, secret paths guarded by the audit hook only"
    if not as_root:
        return Layers(with_bwrap, None, note=_join(missing, "the grader is not root: the worker runs as the grader's user"))
    if with_bwrap:
        return Layers(True, sandbox_uid)
    unreachable = [path for path in interpreter_paths() if blocking_ancestor(path)]
    if unreachable:
        return Layers(False, None, note=_join(
            missing, f"the worker runs as ROOT: uid {sandbox_uid} cannot reach {unreachable[0]} "
                     f"(blocked at {blocking_ancestor(unreachable[0])})"))
    return Layers(False, sandbox_uid, note=missing)


def _join(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def find_bwrap() -> str | None:
    for candidate in BWRAP_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


@functools.lru_cache(maxsize=None)
def bwrap_works(bwrap: str, as_root: bool) -> bool:
    """Try once: bwrap is installed on machines (containers) that forbid namespaces."""
    probe = [bwrap, *namespace_args(as_root), "--die-with-parent", "--ro-bind", "/", "/",
             "--dev", "/dev", "--proc", "/proc", "true"]
    try:
        return subprocess.run(probe, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def namespace_args(as_root: bool) -> list[str]:
    if not as_root:
        return ["--unshare-all"]
    # As root, --unshare-all would add a user namespace in which the worker is root mapped to
    # real root: it could not become the sandbox user (unmapped there) and, as real root,
    # would escape RLIMIT_NPROC. So every namespace but the user one, and only the
    # capabilities the worker needs to switch user (switching drops them all).
    return ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]


def bwrap_command(bwrap: str, *, workdir: Path, secret_paths: list[str], drop_to_user: bool,
                  gpu: bool) -> list[str]:
    """The bwrap command line (up to `--`) that runs the worker in `workdir`."""
    as_root = os.geteuid() == 0
    command = [bwrap, *namespace_args(as_root), "--die-with-parent", "--new-session",
               "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # The private /tmp hides a grader installed under /tmp (a CI checkout, say): bind back what
    # the worker's Python needs from there, read-only, and nothing else of that checkout.
    for path in interpreter_paths():
        if Path(path).is_relative_to("/tmp") and path != "/tmp":
            for parent in reversed(Path(path).relative_to("/tmp").parents[:-1]):
                command += ["--perms", "0755", "--dir", str(Path("/tmp") / parent)]
            command += ["--ro-bind", path, path]
    if gpu:
        for device in sorted(glob.glob("/dev/nvidia*")):
            command += ["--dev-bind", device, device]
    if drop_to_user:
        # A directory on the way to the interpreter that the sandbox user may not enter (a
        # pyenv under /root) becomes an empty tmpfs with just the needed paths bound back in;
        # the rest of it (root's dotfiles and tokens) disappears from the sandbox.
        for hidden, needed in sorted(_paths_to_reexpose().items()):
            command += ["--tmpfs", hidden]
            for path in needed:
                # bwrap would create the directories in between as 0700, closed to that user.
                for parent in reversed(Path(path).relative_to(hidden).parents[:-1]):
                    command += ["--perms", "0755", "--dir", str(Path(hidden) / parent)]
                command += ["--ro-bind", path, path]
    for secret in secret_paths:
        if os.path.isdir(secret):
            command += ["--tmpfs", secret]
        elif os.path.lexists(secret):
            command += ["--ro-bind", "/dev/null", secret]
    # Bound last, so that a secret folder holding it (the parent of all workers' folders) is
    # hidden around it but not over it.
    command += ["--bind", str(workdir), str(workdir)]
    return [*command, "--chdir", str(workdir), "--"]


def interpreter_paths() -> list[str]:
    """What the worker's Python must read: its installation, its packages, the grader's code."""
    # sys.path too: a .pth file may point at packages outside the environment (the secret paths
    # are hidden over whatever this exposes, since they are mounted after it).
    candidates = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
                  os.path.dirname(os.path.realpath(graders.__file__)), *site.getsitepackages(),
                  *(entry for entry in sys.path if entry)}
    return sorted({os.path.realpath(path) for path in candidates if os.path.isdir(path)})


def blocking_ancestor(path: str) -> str | None:
    """The first directory on the way to `path` that other users may not enter, if any."""
    current = "/"
    for part in Path(path).parts[1:]:
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & stat.S_IXOTH:
            return current
    return None


def _paths_to_reexpose() -> dict[str, list[str]]:
    """{a directory the sandbox user may not enter: the needed paths inside it}, leaving out
    paths inside other needed paths (bound with them)."""
    plan: dict[str, list[str]] = {}
    needed = interpreter_paths()
    for path in needed:
        hidden = blocking_ancestor(path)
        if hidden is not None and not any(path.startswith(other + "/") for other in needed):
            plan.setdefault(hidden, []).append(path)
    return plan


def conflicting_secret(secret_paths: list[str]) -> tuple[str, str] | None:
    """A secret path that would hide something the worker needs, and that thing."""
    for secret in secret_paths:
        for needed in interpreter_paths():
            if needed == secret or needed.startswith(secret.rstrip("/") + "/"):
                return secret, needed
    return None


# ---------------------------------------------------------------------------- working directory

def workdirs_parent() -> Path:
    """Where this user's workers get their directories: others may pass through, not list it,
    so that a worker cannot find the directory (the submission) of another."""
    parent = Path(tempfile.gettempdir()) / f"grader-sandbox-{os.geteuid()}"
    try:
        parent.mkdir(mode=0o711)
    except FileExistsError:
        pass
    info = os.lstat(parent)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o066:
        raise RuntimeError(f"{parent} exists but is not a private directory of this user")
    return parent


def make_workdir(submission_dir: Path, *, owner: tuple[int, int] | None) -> Path:
    """A fresh directory: `submission/` (a copy of the submission) and `tmp/` (TMPDIR).

    Its name says which grader process made it, so that directories left by a grader that was
    killed (and so could not clean up) are removed by the next one.
    """
    parent = workdirs_parent()
    remove_orphaned_workdirs(parent)
    workdir = Path(tempfile.mkdtemp(prefix=f"w-{_process_tag(os.getpid())}-", dir=parent))
    # Enterable by others: bwrap (root without capabilities) must chdir into it before the
    # worker becomes its owner. Not listable, and its name is random.
    workdir.chmod(0o711)
    try:
        copy_submission(submission_dir, workdir / "submission")
        (workdir / "tmp").mkdir()
        if owner is not None:
            for directory, subdirectories, files in os.walk(workdir):
                for name in [".", *subdirectories, *files]:
                    os.lchown(os.path.join(directory, name), *owner)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return workdir


def remove_orphaned_workdirs(parent: Path) -> None:
    """Remove the directories whose grader process is gone."""
    for entry in parent.iterdir():
        parts = entry.name.split("-")  # "w", pid, start time, random (which has no "-")
        if len(parts) == 4 and parts[1].isdigit() and _process_tag(int(parts[1])) != f"{parts[1]}-{parts[2]}":
            shutil.rmtree(entry, ignore_errors=True)


def _process_tag(pid: int) -> str:
    """`pid-starttime`: unique among the processes of one boot, unlike a pid alone. Empty
    start time for a process that no longer exists."""
    try:
        stat_fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return f"{pid}-"
    return f"{pid}-{stat_fields[19]}"  # field 22 of proc(5), counted after the command name


def copy_submission(source: Path, destination: Path) -> None:
    """Copy regular files and folders only. Symbolic links could point at anything on the
    grader's machine (and would be followed with the grader's rights), FIFOs would block the
    copy, and `__pycache__` bytecode need not match the source the grader sees."""

    def skipped(directory: str, names: list[str]) -> list[str]:
        result = []
        for name in names:
            mode = os.lstat(os.path.join(directory, name)).st_mode
            if name == "__pycache__" or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                result.append(name)
        return result

    shutil.copytree(source, destination, ignore=skipped)
