"""One unprivileged uid per running worker, leased from a pool for the worker's life.

Every limit and permission the kernel keys on the uid (RLIMIT_NPROC's process count, who may
signal whom, whose /proc entries are readable) is then per student: in a batch, one student
holding every process slot of its uid leaves the other students' workers untouched, and a
student's leftover process can be found and killed by its uid alone.

The pool is a folder of lock files, `slot-N.lock`, at one fixed place on the machine
(`/run/transformer-grader/uid-slots`, root's own): every grading process on the machine (`grade`,
the jobs of `grade batch`, Slurm tasks on one node, whatever their TMPDIR) draws from the same
pool, so no two running workers ever share a uid. A lease is an exclusive `flock` on one lock
file, held open by the grading process: the kernel releases it when that process ends, however
it ends, so no slot is lost to a crash.
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import time
from dataclasses import dataclass
from pathlib import Path

# /run is root's, in memory, and the same for every process of the machine; /var/run where a
# system has no /run.
POOL_PARENTS = ("/run", "/var/run")

# Kill rounds after a worker ends: a process of the uid that forks while it is being killed
# is met again in the next round.
KILL_ROUNDS = 50


class NoFreeSlot(RuntimeError):
    pass


@dataclass
class UidLease:
    uid: int
    gid: int
    slot: int
    _fd: int

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the flock goes with the last descriptor of the file
            self._fd = -1


def pool_folder() -> Path:
    """The machine's one pool folder, made on first use; refused unless it is root's own."""
    parent = next((Path(candidate) for candidate in POOL_PARENTS if os.path.isdir(candidate)), None)
    if parent is None:
        raise NoFreeSlot(f"no {' or '.join(POOL_PARENTS)} for the sandbox uid pool")
    pool = parent / "transformer-grader" / "uid-slots"
    for folder in (pool.parent, pool):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
            raise NoFreeSlot(f"{folder} is not a folder private to root: remove it")
    return pool


def lease(*, base_uid: int, base_gid: int, slots: int, pool: Path | None = None) -> UidLease:
    """The first free slot of the machine's pool (or of `pool`, a folder private to root)."""
    pool = pool_folder() if pool is None else pool
    for slot in range(slots):
        fd = os.open(pool / f"slot-{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        leased = UidLease(base_uid + slot, base_gid + slot, slot, fd)
        # A process left by an earlier holder of the slot (a grader killed before it could clean
        # up) must not meet the next student.
        kill_processes_of(leased.uid)
        return leased
    raise NoFreeSlot(f"all {slots} sandbox uid slots are in use on this machine")


def processes_of(uid: int) -> list[int]:
    """The live processes whose real or effective uid is `uid` (read from /proc, as root);
    zombies are left out: they hold nothing and go when their parent reaps them."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                for line in status:
                    if line.startswith(b"State:") and line.split()[1] in (b"Z", b"X"):
                        break
                    if line.startswith(b"Uid:"):
                        real, effective = (int(field) for field in line.split()[1:3])
                        if uid in (real, effective):
                            found.append(int(entry.name))
                        break
        except (OSError, ValueError):
            continue
    return found


def kill_processes_of(uid: int) -> int:
    """SIGKILL every process of `uid` until none is left (or KILL_ROUNDS rounds); returns how
    many were killed. Without a PID namespace this is what ends a process that left the
    worker's process group and session (`setsid`)."""
    killed = 0
    for _ in range(KILL_ROUNDS):
        victims = processes_of(uid)
        if not victims:
            return killed
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return killed
