"""Walking and removing folders that a worker could write: by descriptor, without recursion,
never following a link.

What a worker writes is the student's to shape: a chain of folders deeper than Python's
recursion limit (`shutil.rmtree` recursed until RecursionError, which its `ignore_errors` does
not catch: the sweep of old folders met it again before every later worker, and each failed to
start), or one whose path is longer than PATH_MAX (a walk that names folders by their path
cannot open it, and counted nothing below it). So nothing here recurses on Python's stack or
builds a path: a folder is opened relative to its parent's descriptor (`openat` with
O_NOFOLLOW), its entries are looked at with `fstatat` without following links, and the walk
keeps a bounded number of descriptors open, climbing back through ".." where it closed one,
checked to be the folder it left.

`walk` is the one walker of the sandbox: the write bound's count of a worker's space
(isolation.space_used) and the sweep of a uid's leftovers in the shared folders
(uids.remove_files_of) both visit with it. `remove` empties a tree by moving every folder
inside it up to its top (one level deep at any time, so depth costs nothing) and removing
them there; `discard` is what clean-up uses: a folder that cannot be removed is quarantined,
renamed out of the way (`.quarantined-<name>-<random>`, root's and closed to every other user)
so that nothing else trips on it, and `grade doctor` lists it (`quarantined`).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
import stat
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# POSIX: a folder opened by its descriptor, never through a link. (Windows has no descriptor
# of a folder: a self-check there, the student's own code on their own machine, removes with
# shutil.rmtree.)
DESCRIPTORS = hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd and os.scandir in os.supports_fd
FOLDER_FLAGS = (os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0))
# Descriptors of folders a walk keeps open at most; deeper, it climbs back through "..".
OPEN_FOLDERS = 32
# Entries read from a folder at a time while it is emptied.
CHUNK = 4096
# What opening a folder that was just listed fails with when it was removed or replaced since.
_CHANGED = frozenset({errno.ENOENT, errno.ELOOP, errno.ENOTDIR})
QUARANTINED = ".quarantined-"


class WalkFailed(OSError):
    """A folder that the walk could not open or list (`changed`: it was there when its parent
    was listed and is gone, or another folder now; a walk of a live worker's folder races it)."""

    def __init__(self, message: str, *, changed: bool) -> None:
        super().__init__(message)
        self.changed = changed


# visit(folder_fd, name, info, state): the state to walk the entry's own entries with (it is a
# folder to enter), or None.
Visitor = Callable[[int, str, os.stat_result, Any], Any]


@dataclass
class _Frame:
    fd: int | None
    identity: tuple[int, int]
    pending: list[tuple[str, tuple[int, int], Any]] = field(default_factory=list)


def walk(top: str | os.PathLike, visit: Visitor, state: Any) -> None:
    """Call `visit` on every entry below `top` (not `top` itself), depth first, without
    following links; a folder is entered when `visit` returns a state for it. Raises
    WalkFailed when a folder cannot be opened or listed; what `visit` raises ends the walk."""
    fd = _open_folder(None, os.fspath(top), None)
    frames = [_Frame(fd, _identity(os.fstat(fd)))]
    first_open = 0  # the frames below it have closed their descriptors: a suffix stays open
    try:
        frames[0].pending = _listing(fd, visit, state)
        while frames:
            frame = frames[-1]
            if frame.pending:
                name, identity, inner = frame.pending.pop()
                frames.append(_Frame(_open_folder(frame.fd, name, identity), identity))
                if len(frames) - first_open > OPEN_FOLDERS:
                    os.close(frames[first_open].fd)
                    frames[first_open].fd = None
                    first_open += 1
                frames[-1].pending = _listing(frames[-1].fd, visit, inner)
                continue
            frames.pop()
            try:
                if frames and frames[-1].fd is None:
                    frames[-1].fd = _climb(frame.fd, frames[-1].identity)
                    first_open = len(frames) - 1
            finally:
                os.close(frame.fd)
    finally:
        for frame in frames:
            if frame.fd is not None:
                os.close(frame.fd)


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _open_folder(parent_fd: int | None, name: str, identity: tuple[int, int] | None) -> int:
    try:
        fd = os.open(name, FOLDER_FLAGS, dir_fd=parent_fd)
    except OSError as error:
        changed = error.errno in _CHANGED
        raise WalkFailed(f"cannot open the folder {name!r}: {error.strerror}", changed=changed) from error
    if identity is not None and _identity(os.fstat(fd)) != identity:
        os.close(fd)
        raise WalkFailed(f"the folder {name!r} was replaced while it was walked", changed=True)
    return fd


def _listing(fd: int, visit: Visitor, state: Any) -> list[tuple[str, tuple[int, int], Any]]:
    """Visit the entries of the folder `fd`; the folders to enter, with their states."""
    inside = []
    try:
        entries = os.scandir(fd)
    except OSError as error:
        raise WalkFailed(f"cannot list a folder: {error.strerror}", changed=False) from error
    with entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since it was listed
            inner = visit(fd, entry.name, info, state)
            if inner is not None and stat.S_ISDIR(info.st_mode):
                inside.append((entry.name, _identity(info), inner))
    return inside


def _climb(child_fd: int, identity: tuple[int, int]) -> int:
    parent = _open_folder(child_fd, "..", None)
    if _identity(os.fstat(parent)) != identity:
        os.close(parent)
        raise WalkFailed("a folder was moved while it was walked", changed=True)
    return parent


# ---------------------------------------------------------------------------- removal

def remove(path: str | os.PathLike) -> None:
    """Remove `path` (a link itself, never what it points to) and everything below it; nothing
    when it does not exist. Raises OSError when something cannot be removed."""
    path = os.path.abspath(os.fspath(path))
    if not DESCRIPTORS:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
        return
    try:
        parent = os.open(os.path.dirname(path), FOLDER_FLAGS)
    except FileNotFoundError:
        return
    try:
        remove_at(parent, os.path.basename(path))
    finally:
        os.close(parent)


def remove_at(folder_fd: int, name: str) -> None:
    """Remove the entry `name` of the folder `folder_fd` and everything below it."""
    try:
        info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=folder_fd)
        return
    top = _open_folder(folder_fd, name, _identity(info))
    try:
        _empty(top)
    finally:
        os.close(top)
    os.rmdir(name, dir_fd=folder_fd)


def _empty(top: int) -> None:
    """Empty the folder `top`: its files are removed, and each folder in it is emptied in turn,
    the folders inside that one moved up into `top` first. No descriptor but two is open at
    a time, however deep the tree."""
    token = secrets.token_hex(6)
    moved = 0
    while names := _some_entries(top):
        for name, is_folder in names:
            if not is_folder:
                _unlink(top, name)
                continue
            folder = _open_folder(top, name, None)
            try:
                while inner := _some_entries(folder):
                    for inner_name, inner_is_folder in inner:
                        if not inner_is_folder:
                            _unlink(folder, inner_name)
                            continue
                        moved += 1
                        fresh = f".removing-{token}-{moved}"
                        os.rename(inner_name, fresh, src_dir_fd=folder, dst_dir_fd=top)
            finally:
                os.close(folder)
            os.rmdir(name, dir_fd=top)


def _some_entries(fd: int) -> list[tuple[str, bool]]:
    """Up to CHUNK entries of the folder `fd`: (name, whether it is a folder, not a link)."""
    found = []
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                found.append((entry.name, entry.is_dir(follow_symlinks=False)))
            except FileNotFoundError:
                continue
            if len(found) >= CHUNK:
                break
    return found


def _unlink(fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass


def discard(path: str | os.PathLike) -> bool:
    """Clean-up that nothing breaks: remove `path`; where that fails, quarantine it (renamed to
    `.quarantined-<name>-<random>` beside it, root's, mode 0: no sandbox uid enters it again)
    and warn. Never raises. True when it was removed."""
    path = os.path.abspath(os.fspath(path))
    try:
        if not DESCRIPTORS:
            remove(path)
            return True
        parent = os.open(os.path.dirname(path), FOLDER_FLAGS)
    except FileNotFoundError:
        return True
    except OSError as error:
        warnings.warn(f"sandbox: {path} could not be removed ({error}); remove it by hand", RuntimeWarning,
                      stacklevel=2)
        return False
    try:
        return discard_at(parent, os.path.basename(path), shown=path)
    finally:
        os.close(parent)


def discard_at(folder_fd: int, name: str, *, shown: str | None = None) -> bool:
    """`discard` of the entry `name` of the folder `folder_fd` (`shown`: its path, for the
    warning)."""
    try:
        remove_at(folder_fd, name)
        return True
    except OSError as error:
        reason = f"{type(error).__name__}: {error}"
    shown = shown or name
    aside = f"{QUARANTINED}{name[:80]}-{secrets.token_hex(4)}"
    try:
        os.rename(name, aside, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
    except OSError as error:
        warnings.warn(f"sandbox: {shown} cannot be removed ({reason}) nor moved aside ({error}); "
                      "remove it by hand", RuntimeWarning, stacklevel=3)
        return False
    try:
        if stat.S_ISDIR(os.stat(aside, dir_fd=folder_fd, follow_symlinks=False).st_mode):
            if os.geteuid() == 0:
                os.chown(aside, 0, 0, dir_fd=folder_fd, follow_symlinks=False)
            os.chmod(aside, 0, dir_fd=folder_fd)
    except OSError:
        pass  # moved aside is what matters: nothing looks for it under that name
    warnings.warn(f"sandbox: {shown} could not be removed ({reason}); quarantined as {aside} beside it "
                  "(`grade doctor` lists it: remove it by hand)", RuntimeWarning, stacklevel=3)
    return False


def quarantined(folders) -> list[str]:
    """What `discard` quarantined in `folders`."""
    found = []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        found += [os.path.join(folder, name) for name in sorted(names) if name.startswith(QUARANTINED)]
    return found
