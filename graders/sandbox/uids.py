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

What a worker leaves behind is ended under its uid, after the worker and again before the next
one starts on the slot (`end_everything_of`): every process of the uid, killed by a process of
that uid with kill(-1), which no fork loop can outrun (a /proc scan can be: a process that
changes its pid every millisecond is never where the scan looks); the uid's kernel keyrings,
cleared; its SysV IPC objects; and every file it owns in the folders that every user may write
(/tmp, /var/tmp, /dev/shm, /run/lock, /dev/mqueue).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import platform
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from . import walk

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
        become_subreaper()
        # What an earlier holder of the slot left (a grader killed before it could clean up)
        # must not meet the next student.
        end_everything_of(leased.uid, leased.gid)
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


def kill_processes_of(uid: int, gid: int | None = None) -> int:
    """SIGKILL every process of `uid`; returns how many a scan of /proc saw alive before. A
    process of the uid itself calls kill(-1, SIGKILL), which signals every process the caller
    may signal (those of its uid) but itself in one pass of the kernel's process list, under a
    lock that fork takes too: no process of the uid is created while it runs. It repeats until
    none is left (kill(-1) then fails with ESRCH). It runs whatever the scan saw: a process that
    changes its pid every millisecond is never where the scan looks. Where that process cannot
    start (the uid is at its grader's process limit), the /proc scan is the fallback, round
    after round."""
    alive = len(processes_of(uid))
    try:
        subprocess.run(_KILL_COMMAND, user=uid, group=uid if gid is None else gid, extra_groups=[],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       cwd="/", timeout=30, env={})
    except (OSError, subprocess.SubprocessError):
        pass
    for _ in range(KILL_ROUNDS):
        victims = processes_of(uid)
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    return alive


# Run as the uid: kill(-1) until none is left (bounded: a zombie of the uid answers it too,
# until its parent reaps it). A shell's builtin, so that it needs nothing the uid may not read.
_KILL_COMMAND = ["/bin/sh", "-c", f"i=0; while [ $i -lt {KILL_ROUNDS} ] && kill -s KILL -- -1 2>/dev/null; "
                                  "do i=$((i+1)); done"]

KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_CLEAR, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = 7, -4, -5
# Run as the uid, with the grader's interpreter and nothing but the standard library: empty
# the uid's two persistent keyrings (every key the worker linked there goes with them).
_CLEAR_KEYRINGS = ("import ctypes, sys\n"
                   "libc = ctypes.CDLL(None, use_errno=True)\n"
                   "failed = [ring for ring in (-4, -5) if libc.syscall(int(sys.argv[1]), 7, ring) != 0]\n"
                   "sys.exit(1 if failed else 0)")


def clear_keyrings_of(uid: int, gid: int) -> bool:
    """Empty the user and user-session keyrings of `uid` (they outlive its processes); False if
    it could not be done (no keyctl here, or the uid cannot run the interpreter: the seccomp
    filter, which refuses every keyring call, is then what holds)."""
    number = KEYCTL.get(platform.machine())
    if number is None:
        return False
    interpreter = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    try:
        done = subprocess.run([interpreter, "-I", "-S", "-c", _CLEAR_KEYRINGS, str(number)], user=uid, group=gid,
                              extra_groups=[], stdin=subprocess.DEVNULL, capture_output=True, cwd="/", timeout=30,
                              env={})
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


# The folders that every user may write: a uid's files there outlive its worker.
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue")


def remove_files_of(uid: int, folders=SHARED_WRITABLE) -> list[str]:
    """Remove every file and folder that `uid` owns in `folders`, looking into the folders
    there that the uid may write without owning them (others-writable ones, like /tmp/.X11-unix);
    another folder can hold nothing the uid made. By descriptor, whatever their depth
    (graders/sandbox/walk.py); a folder that cannot be removed is quarantined. Returns the
    names removed (or quarantined)."""
    removed: list[str] = []

    def sweep(folder_fd: int, name: str, info: os.stat_result, where: str) -> str | None:
        path = os.path.join(where, name)
        if info.st_uid == uid:
            walk.discard_at(folder_fd, name, shown=path)
            removed.append(path)
            return None
        return path if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH else None

    for folder in folders:
        if not os.path.isdir(folder) or os.path.islink(folder):
            continue
        for _ in range(3):  # other users' files come and go while it looks
            try:
                walk.walk(folder, sweep, folder)
                break
            except walk.WalkFailed:
                continue
    return removed


@contextlib.contextmanager
def file_system_identity(uid: int, gid: int):
    """This thread's file system uid and gid are `uid` and `gid` for the block (as root): the
    kernel then lets it read the descriptors of that uid's (dumpable) processes under
    /proc/<pid>/fd, which root may not without CAP_SYS_PTRACE (a container's root lacks it).
    Per thread: the grader's other threads keep root's rights. Elsewhere than Linux, nothing."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") and os.geteuid() == 0 else None
    if libc is None:
        yield
        return
    libc.setfsgid(gid)
    libc.setfsuid(uid)
    try:
        yield
    finally:
        libc.setfsuid(0)
        libc.setfsgid(0)


# /proc/sysvipc/<kind>: the columns of the id, the owner's uid and the creator's uid.
_IPC_TABLES = {"shm": (1, 7, 9), "msg": (1, 7, 9), "sem": (1, 4, 6)}
IPC_RMID = 0


def remove_ipc_objects_of(uid: int, root: str = "/proc/sysvipc") -> int:
    """Remove the SysV shared memory segments, message queues and semaphore sets that `uid`
    owns or made, in the grader's IPC namespace (a worker in an IPC namespace of its own takes
    its objects with it). Returns how many."""
    libc = ctypes.CDLL(None, use_errno=True)
    removers = {"shm": lambda ident: libc.shmctl(ident, IPC_RMID, None),
                "msg": lambda ident: libc.msgctl(ident, IPC_RMID, None),
                "sem": lambda ident: libc.semctl(ident, 0, IPC_RMID, 0)}
    removed = 0
    for kind, (id_column, uid_column, creator_column) in _IPC_TABLES.items():
        try:
            with open(os.path.join(root, kind)) as table:
                rows = [line.split() for line in table.readlines()[1:]]
        except OSError:
            continue
        for row in rows:
            if len(row) > creator_column and uid in (int(row[uid_column]), int(row[creator_column])):
                removed += removers[kind](int(row[id_column])) == 0
    return removed


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Adopt the orphans of this grader's workers (a process that left its worker, once its
    parent exits), instead of the machine's PID 1, so that `reap_orphans_of` can reap them once
    killed: a container's PID 1 often reaps nothing, and a zombie still counts against its
    uid's RLIMIT_NPROC, which the next student on the slot then finds used up."""
    prctl = getattr(ctypes.CDLL(None), "prctl", None) if sys.platform.startswith("linux") else None
    if prctl is not None:
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans_of(uid: int) -> int:
    """Reap the zombies of `uid` this process adopted; returns how many. Only those: a worker
    this process started is its Popen's to wait for."""
    reaped = 0
    me = str(os.getpid()).encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as status:
                fields = dict(line.split(b":", 1) for line in status if b":" in line)
        except OSError:
            continue
        if (fields.get(b"State", b"").split()[:1] == [b"Z"] and fields.get(b"PPid", b"").strip() == me
                and int(fields.get(b"Uid", b"-1").split()[0]) == uid):
            try:
                reaped += os.waitpid(int(entry.name), os.WNOHANG)[0] != 0
            except ChildProcessError:
                pass
    return reaped


def end_everything_of(uid: int, gid: int) -> dict:
    """After a worker of `uid`, and before the next on its slot: its processes killed and reaped,
    then (no process of it left to make more) its keyrings, IPC objects and shared files
    removed."""
    reap_orphans_of(uid)  # zombies count against the uid's process limit, which the killer needs room in
    killed = kill_processes_of(uid, gid)
    reap_orphans_of(uid)
    keyrings = clear_keyrings_of(uid, gid)
    return {"killed": killed, "keyrings_cleared": keyrings, "ipc_removed": remove_ipc_objects_of(uid),
            "files_removed": remove_files_of(uid), "left": processes_of(uid)}
