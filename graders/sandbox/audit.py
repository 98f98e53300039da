"""The worker's audit hook: an in-process second layer under the OS sandbox.

Installed after torch, numpy and safetensors are imported (torch loads libraries through ctypes
while importing) and before any student code. A denied event raises `PermissionError` in the
student's code, which the grader receives as a `StudentError`.

Denied: starting processes, signalling processes, network connections and name lookups, loading
native code through ctypes (but for the libraries of installed packages) and reading or writing
raw memory through it, creating links, writing
anywhere but the worker's own directory, reading or listing the secret paths, and the standard
ways of reaching the hook itself (gc's object graph, swapping a function's code).

Every denial with the submission's code on the call stack is also recorded (`DenialLog`: the
event and a short summary of its argument, a bounded number per reply); the worker sends them with its next reply, and the grader lists
them in results.json for a person to review. Student code shares the worker's process and can
empty or fill that log, so it is a tripwire for review, never evidence a score rests on.

An audit hook is a tripwire, not a wall: code that corrupts the interpreter's memory (numpy's
`as_strided` can reach it) or opens files from C without an audit event (`torch.from_file`,
`safetensors.safe_open`) gets past it. The OS layers do not depend on it, and nothing depends on
it for a score: the grader only ever receives values from the worker and scores them itself.
"""

from __future__ import annotations

import glob
import os
import stat
import sys
from typing import Callable, Iterable

DENIED_EVENTS = frozenset({
    # processes
    "os.system", "os.exec", "os.posix_spawn", "os.fork", "os.forkpty", "subprocess.Popen",
    "os.kill", "os.killpg", "signal.pthread_kill", "_posixsubprocess.fork_exec",
    # network (lookups too: without a network namespace, DNS is a way out)
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo",
    "socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.getnameinfo",
    # native code and raw memory (ctypes.dlopen: see `already_loaded_libraries`)
    "ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.call_function",
    "ctypes.cdata", "ctypes.PyObj_FromPtr", "ctypes.string_at", "ctypes.wstring_at",
    "sqlite3.enable_load_extension",
    # links could point out of the working directory or at a secret
    "os.symlink", "os.link",
    # the ways to the hook's own function objects
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
})
# Re-importing this module would bring back the fork_exec that `disable_fork_exec` removed.
DENIED_IMPORTS = frozenset({"_posixsubprocess"})
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Events whose first argument is a path that is modified.
WRITE_EVENTS = frozenset({
    "os.remove", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.utime", "os.truncate",
    "os.setxattr", "os.removexattr", "shutil.rmtree",
})
# Events whose first argument is a path that is read or entered.
READ_EVENTS = frozenset({"os.listdir", "os.scandir", "os.chdir"})
WRITABLE_DEVICES = ("/dev/null",)
# Denials recorded between two replies (more are only counted), and the length of each field.
MAX_DENIALS = 100
MAX_EVENT_CHARS = 80
MAX_DETAIL_CHARS = 200


class DenialLog:
    """The denials of the hook since the worker last took them. The hook appends to `entries`
    and counts what does not fit in `dropped` (a one-element list: nothing the hook does to
    it raises an audit event of its own)."""

    def __init__(self) -> None:
        self.entries: list[dict[str, str]] = []
        self.dropped = [0]

    def take(self) -> dict | None:
        """`{"denials": [{"event", "detail"}, ...], "dropped": n}`, or None when there were none."""
        taken = self.entries[:]
        del self.entries[:len(taken)]
        dropped, self.dropped[0] = self.dropped[0], 0
        if not taken and not dropped:
            return None
        return {"denials": taken, "dropped": dropped}


def install(*, workdir: str, secret_paths: Iterable[str], denials: DenialLog | None = None) -> None:
    disable_fork_exec()
    sys.addaudithook(make_hook(workdir=os.path.realpath(workdir),
                               secret_paths=tuple(os.path.realpath(p) for p in secret_paths),
                               loaded_libraries=already_loaded_libraries(), denials=denials,
                               installed_folders=installed_folders(os.path.realpath(workdir)),
                               # code objects name their files as imported, not resolved
                               code_dirs=(workdir, os.path.realpath(workdir))))


def installed_folders(workdir: str) -> tuple[str, ...]:
    """Where the interpreter's installed packages and the system's libraries live (real paths):
    a library there was installed, not written by the submission. Packages load their native
    parts from there lazily: torchvision's operators, when transformers first imports it. The
    worker's own folder and /dev/shm, the only places it can write, are never among them."""
    import site

    site_folders = site.getsitepackages()
    # a .pth file's folders too: packages installed outside the environment (a runner's own
    # PyTorch, in a virtual environment of its own, named by a .pth of the grader's)
    candidates = [*site_folders, *(folder for site_folder in site_folders for folder in pth_folders(site_folder)),
                  sys.prefix, sys.base_prefix, "/usr/lib", "/usr/lib64", "/usr/local/lib", "/lib", "/lib64"]
    folders = {os.path.realpath(folder) for folder in candidates if os.path.isdir(folder)}
    writable = (workdir, "/dev/shm")
    return tuple(sorted(folder for folder in folders
                        if folder != "/" and not any(place == folder or place.startswith(folder + "/")
                                                     or folder.startswith(place + "/") for place in writable)))


def pth_folders(site_folder: str) -> list[str]:
    """The folders that the .pth files of `site_folder` add to the worker's sys.path (packages
    installed outside the environment), read as `site` reads them. Not the grader's own sys.path,
    which may hold its working directory (under pytest, the whole repository)."""
    folders = []
    for pth in sorted(glob.glob(os.path.join(glob.escape(site_folder), "*.pth"))):
        for line in _read_text(pth).splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "import ", "import\t")):
                folders.append(os.path.join(site_folder, line))
    return folders


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


# The /proc files a worker reads after it changed its root to a tree without /proc (container
# isolation, graders/sandbox/rootfs.py): opened before, read through their descriptors (a
# file's descriptor leads nowhere else, unlike a folder's).
PROC_FILES = ("/proc/self/status", "/proc/self/maps", "/proc/net/dev")
_kept_proc_files: dict[str, int] = {}


def keep_proc_files() -> None:
    for path in PROC_FILES:
        try:
            _kept_proc_files[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass


def read_proc(path: str) -> str:
    """A /proc file of this process, read now: by its path, or, without /proc, through the
    descriptor `keep_proc_files` kept."""
    try:
        return _read_text(path)
    except FileNotFoundError:
        if path not in _kept_proc_files:
            raise
    descriptor = _kept_proc_files[path]
    os.lseek(descriptor, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(descriptor, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def already_loaded_libraries() -> frozenset[str]:
    """Real paths of the shared libraries mapped into this process.

    Some imports open one again through ctypes (torch.distributed, which transformers imports,
    does `ctypes.CDLL("libc.so.6")`). Opening a library that is already mapped runs no new
    code, and what would make it dangerous, looking up and calling its functions, stays denied.
    """
    maps = read_proc("/proc/self/maps").splitlines()
    return frozenset(os.path.realpath(fields[5]) for fields in map(str.split, maps)
                     if len(fields) == 6 and fields[5].startswith("/") and ".so" in fields[5])


def disable_fork_exec() -> None:
    """subprocess starts processes through `_posixsubprocess.fork_exec`, which raises no audit
    event in the Python versions we support; replace it with one that refuses (and raises an
    event of its own first, which the hook denies and records)."""
    import _posixsubprocess
    import subprocess

    raise_event = sys.audit

    def fork_exec(*args, **kwargs):
        raise_event("_posixsubprocess.fork_exec")
        raise PermissionError("sandbox: starting processes is not allowed")

    _posixsubprocess.fork_exec = fork_exec
    subprocess._fork_exec = fork_exec


def make_hook(*, workdir: str, secret_paths: tuple[str, ...], loaded_libraries: frozenset[str],
              denials: DenialLog | None = None, code_dirs: tuple[str, ...] = (),
              installed_folders: tuple[str, ...] = ()) -> Callable[[str, tuple], None]:
    """The hook function. Everything it calls is bound here, in its closure: student code can
    rebind `os.lstat` or `builtins.len`, but not what the hook already holds."""
    lstat, readlink, getcwd = os.lstat, os.readlink, os.getcwd
    is_link, is_directory = stat.S_ISLNK, stat.S_ISDIR
    type_, str_, bytes_, int_, any_ = type, str, bytes, int, any
    permission_error = PermissionError
    denied_events, denied_imports = DENIED_EVENTS, DENIED_IMPORTS
    read_events, write_events = READ_EVENTS, WRITE_EVENTS
    write_flags, writable_devices = WRITE_FLAGS, WRITABLE_DEVICES
    fs_encoding = sys.getfilesystemencoding()
    not_a_path = object()
    loaded_names = frozenset(path.rpartition("/")[2] for path in loaded_libraries)

    entries = denials.entries if denials is not None else None
    dropped = denials.dropped if denials is not None else None
    len_, max_denials, type_name = len, MAX_DENIALS, type.__dict__["__name__"].__get__
    get_frame, starts_with = sys._getframe, str.startswith
    student_files = tuple(folder.rstrip("/") + "/" for folder in (workdir, *code_dirs))

    def caused_by_student() -> bool:
        """Whether code from the worker's directory (the submission's copy) is on the stack.
        The grader's own harness triggers denials too (importing transformers probes the
        system with subprocess and ctypes): those are not the student's doing."""
        frame = get_frame(1)
        for _ in range(1000):
            if frame is None:
                return False
            filename = frame.f_code.co_filename
            if type_(filename) is not str_ or starts_with(filename, student_files):
                return True
            frame = frame.f_back
        return True  # too deep to tell

    def summary(value: object, limit: int) -> str:
        """Text of an event's argument without running any of the student's code (no repr of
        an object of theirs: a str subclass's __repr__ would run inside the hook)."""
        kind = type_(value)
        if kind is str_:
            text = value
        elif kind is bytes_:
            text = bytes_.decode(value, fs_encoding, "backslashreplace")
        elif kind is int_:
            text = int_.__repr__(value)
        else:
            text = "<" + str_.__str__(type_name(kind)) + ">"  # a metaclass's __name__ is not called
        return text if len_(text) <= limit else text[:limit - 3] + "..."

    def deny(event: str, detail: object = None) -> None:
        shown = None if detail is None else summary(detail, MAX_DETAIL_CHARS)
        suffix = "" if shown is None else f" ({shown!r})"
        if entries is not None and caused_by_student():
            if len_(entries) < max_denials:
                entries.append({"event": summary(event, MAX_EVENT_CHARS), "detail": shown or ""})
            else:
                dropped[0] += 1
        raise permission_error(f"sandbox: {event} is not allowed{suffix}")

    def inside(path: str, root: str) -> bool:
        return path == root or path.startswith(root + "/")

    def is_secret(path: str) -> bool:
        if inside(path, workdir):
            return False
        for secret in secret_paths:
            if inside(path, secret):
                return True
        return False

    def resolve(path: str) -> str:
        """The real path, like os.path.realpath but with the primitives bound above."""
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        pending = [part for part in reversed(path.split("/")) if part not in ("", ".")]
        resolved = ""
        links_followed = 0
        while pending:
            part = pending.pop()
            if part == "..":
                resolved = resolved.rpartition("/")[0]
                continue
            candidate = resolved + "/" + part
            try:
                mode = lstat(candidate).st_mode
            except OSError:
                resolved = candidate  # does not exist (yet): nothing to follow
                continue
            if not is_link(mode) or links_followed >= 40:
                resolved = candidate
                continue
            links_followed += 1
            target = readlink(candidate)
            if target.startswith("/"):
                resolved = ""
            pending.extend(part for part in reversed(target.split("/")) if part not in ("", "."))
        return resolved or "/"

    def escapes_upwards(relative: str) -> bool:
        """A relative path that climbs above its starting directory. The event does not say
        which directory that is (`dir_fd`), so its target cannot be known; refuse it."""
        depth = 0
        for part in relative.split("/"):
            if part == "..":
                depth -= 1
                if depth < 0:
                    return True
            elif part not in ("", "."):
                depth += 1
        return False

    def as_path(event: str, arg: object):
        """The resolved path an event argument names; `not_a_path` for a pipe or socket fd."""
        if arg is None:  # os.listdir() and os.scandir() without an argument
            arg = "."
        kind = type_(arg)
        if kind is int_:
            if arg < 0:
                return not_a_path
            try:
                target = readlink(f"/proc/self/fd/{arg}")
            except OSError:
                return not_a_path
            return resolve(target) if target.startswith("/") else not_a_path
        if kind is bytes_:
            arg = bytes_.decode(arg, fs_encoding, "surrogateescape")
        elif kind is not str_:
            deny(event)
        if not arg.startswith("/") and escapes_upwards(arg):
            deny(event, arg)
        return resolve(arg)

    def check_read(event: str, arg: object) -> None:
        path = as_path(event, arg)
        if path is not not_a_path and is_secret(path):
            deny(event, arg)

    def check_write(event: str, arg: object) -> None:
        path = as_path(event, arg)
        if path is not not_a_path and not inside(path, workdir) and path not in writable_devices:
            deny(event, arg)

    def check_open(event: str, arg: object, flags: int) -> None:
        if flags & write_flags:
            check_write(event, arg)
            return
        path = as_path(event, arg)
        if path is not_a_path:
            return
        if is_secret(path):
            deny(event, arg)
        # A directory fd outside the working directory would let `dir_fd=` relative paths
        # reach places this hook cannot see.
        if not inside(path, workdir):
            try:
                mode = lstat(path).st_mode
            except OSError:
                return
            if is_directory(mode):
                deny(event, arg)

    def check_dlopen(event: str, name: object) -> None:
        """Only libraries already mapped or installed: a bare name is what the dynamic linker
        finds loaded under that name; a path must be the very file, or a file of an installed
        package (never one the submission could have written)."""
        if name is None:  # the main program, mapped from the start
            return
        if type_(name) is not str_:
            deny(event)
        if "/" in name:
            path = resolve(name)
            if path not in loaded_libraries and not (any_(inside(path, folder) for folder in installed_folders)
                                                     and not inside(path, workdir)):
                deny(event, name)
        elif name not in loaded_names:
            deny(event, name)

    def hook(event: str, args: tuple) -> None:
        if event in denied_events:
            deny(event)
        elif event == "open":
            check_open(event, args[0], args[2])
        elif event == "ctypes.dlopen":
            check_dlopen(event, args[0])
        elif event in read_events:
            check_read(event, args[0])
        elif event in write_events:
            check_write(event, args[0])
        elif event == "os.rename":
            check_write(event, args[0])
            check_write(event, args[1])
        elif event == "sqlite3.connect":
            if args[0] != ":memory:":
                check_write(event, args[0])
        elif event == "import":
            if args[0] in denied_imports:
                deny(event, args[0])
        elif event == "object.__setattr__":
            # Swapping the code of the hook's own functions for no-ops would switch it off
            # (other code may do this: types.coroutine does).
            if args[1] == "__code__":
                for function in own_functions:
                    if args[0] is function:
                        deny("replacing the sandbox's code")

    own_functions = (hook, deny, summary, caused_by_student, inside, is_secret, resolve, escapes_upwards, as_path,
                     check_read, check_write, check_open, check_dlopen)
    return hook
