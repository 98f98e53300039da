"""A file system of its own for a worker without mounts (container isolation).

Docker's default profile forbids the namespaces bubblewrap needs, but lets root `chroot`. So
the worker, root until it drops to its uid, changes its root to a tree that holds what full
isolation binds read-only: the system folders, the worker's Python and packages, the paths the
caller names, and its own folder. The files are hard links to the machine's own (the same
inodes: no copy, no disk), or copies where a link cannot be made (another file system) or
must not be (a file others may write: through a link the worker could change the original).
Nothing else of the machine is there: another checkout of the solution, home folders, the
grader's outputs, other workers' folders; and the secrets the grader knows of inside what is
there are left out, absent rather than unreadable.

No folder of the tree is writable by the worker but its own (`WORKERS/<name>`, 0700, its
uid's): a folder that others may write is made without that right. The worker, unprivileged
from then on and without CAP_SYS_CHROOT, cannot leave it.

The tree is built once per machine and set of sources (a hard link per file: seconds) and
brought up to date by each grading process before its first worker: the entries of a folder
whose modification time changed are linked again. A file changed in place keeps its inode, so
its link shows the change; a copied file (another file system) is copied again only when its
folder changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

from . import walk

# Inside the tree, where the workers' own folders are made.
WORKERS = "w"
# What a program may expect in /dev: (name, major, minor).
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9))
# Copied as they read when the tree is brought up to date: PyTorch's CPU detection (cpuinfo)
# reads them, and says so on the student's output when it cannot.
SNAPSHOTS = ("/proc/cpuinfo", "/sys/devices/system/cpu/possible", "/sys/devices/system/cpu/present",
             "/sys/devices/system/cpu/online")
# Written by nobody else: a link to a file its group or others may write would let the worker
# change the machine's file.
SHARED_WRITE_BITS = stat.S_IWGRP | stat.S_IWOTH

_brought_up_to_date: set[tuple[Path, tuple[str, ...]]] = set()  # (tree, excluded) synced by this process


def prepared_root(sources: list[str], excluded: list[str], parent: Path) -> Path:
    """The tree of `sources` (absolute paths, each at its own path inside), without anything
    inside `excluded` but the sources inside it (the deepest decides), kept in `parent` (a
    folder of root's that no sandbox uid may list); made or brought up to date once per
    process. One tree per set of sources: graders that exclude other paths share it, each
    leaving out its own (a path another grader counts as no secret is back while that grader's
    sync runs: unreadable still, by the OS permissions every secret is given, see
    isolation.deny_to_sandbox_user)."""
    key = hashlib.sha256(json.dumps(sorted(sources)).encode()).hexdigest()[:16]
    import fcntl  # POSIX: a self-check on Windows imports this module, never calls this

    root = parent / f"root-{key}"
    done = (root, tuple(sorted(excluded)))
    if done in _brought_up_to_date:
        return root
    remove_stale_roots(parent)
    lock = os.open(parent / f"root-{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another grader may be bringing it up to date
        manifest_path = parent / f"root-{key}.json"
        excluded = sorted({*excluded, str(parent)})
        try:
            manifest = json.loads(manifest_path.read_text())
            seen, excluded_then = dict(manifest["folders"]), manifest["excluded"]
        except (OSError, ValueError, KeyError, TypeError):
            seen, excluded_then = {}, []
        # A path excluded then and not now, or now and not then: its folder is looked at again.
        for path in set(excluded).symmetric_difference(excluded_then):
            seen.pop(os.path.dirname(path), None)
        tree = _Tree(root, sources=sources, excluded=excluded, seen=seen)
        tree.make_base()
        for source in sources:
            tree.mirror(source)
        temporary = manifest_path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"sources": sorted(sources), "excluded": excluded, "folders": tree.now}))
        os.replace(temporary, manifest_path)
    finally:
        os.close(lock)
    _brought_up_to_date.add(done)
    return root


def remove_stale_roots(parent: Path) -> None:
    """Remove the trees of which a source is gone (a virtual environment deleted, a cache
    moved): their links would keep the removed files' space taken for as long as they stay.
    A tree another grader is bringing up to date is left for later."""
    import fcntl

    for manifest_path in parent.glob("root-*.json"):
        try:
            sources = json.loads(manifest_path.read_text())["sources"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if all(os.path.lexists(source) for source in sources):
            continue
        lock_path = manifest_path.with_suffix(".lock")
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            continue
        try:
            manifest_path.unlink()
            walk.discard(manifest_path.with_suffix(""))  # its workers' folders too, whatever they left
            lock_path.unlink()
        finally:
            os.close(lock)


def inner_path(root: Path, path: Path) -> Path:
    """Where `path` (inside `root`) is for a process whose root is `root`."""
    return Path("/", path.relative_to(root))


class _Tree:
    """The tree of `sources` less `excluded`: of the sources and excluded paths above a path
    (or it), the deepest decides, excluded where both are. So a source may lie inside an
    excluded folder (a distribution's package inside a site folder that shows nothing else)."""

    def __init__(self, root: Path, *, sources: list[str], excluded: list[str], seen: dict[str, int]) -> None:
        self.root, self.seen = root, seen
        self.rules = {path.rstrip("/") or "/": True for path in sources}
        self.rules.update({path.rstrip("/") or "/": False for path in excluded})
        # The folders on the way to a source: kept, even where they are excluded themselves.
        self.on_the_way = {str(parent) for path in sources for parent in Path(path).parents}
        self.now: dict[str, int] = {}

    def make_base(self) -> None:
        _folder(self.root, 0o755)
        _folder(self.root / WORKERS, 0o711)  # passable, not listable: no worker finds another's
        _folder(self.root / "tmp", 0o755)  # there, as in full isolation, but not writable
        for path in SNAPSHOTS:  # no /proc or /sys: what PyTorch reads of the CPUs, as it was
            self.snapshot(path)
        devices = self.root / "dev"
        _folder(devices, 0o755)
        _folder(devices / "shm", 0o755)
        for name, major, minor in DEVICES:
            node = devices / name
            info = _lstat(node)
            if info is None or not stat.S_ISCHR(info.st_mode) or info.st_rdev != os.makedev(major, minor):
                if info is not None:
                    node.unlink()
                os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(major, minor))
                os.chmod(node, 0o666)

    def snapshot(self, path: str) -> None:
        try:
            content = Path(path).read_bytes()
        except OSError:
            return
        target = self.inside(path)
        self.folders_to(path)
        staged = target.with_name(f".{target.name}.staged")
        staged.write_bytes(content)
        os.chmod(staged, 0o444)
        os.replace(staged, target)

    def folders_to(self, path: str) -> None:
        """The folders on the way to `path` in the tree: root's, 0755, whatever the machine's are
        (a Python under /root is reachable, nothing else of /root is there), but for those that
        are mirrored themselves (inside a source), which keep the machine's."""
        for parent in map(str, reversed(Path(path).parents[:-1])):
            if self.shown(parent) or self.shown(os.path.dirname(parent)):
                if _lstat(self.inside(parent)) is None:
                    _folder(self.inside(parent), 0o755)
            else:
                _folder(self.inside(parent), 0o755)

    def shown(self, path: str) -> bool:
        """Whether `path` is in the tree: the deepest rule above it (or its own) decides."""
        for place in (path, *map(str, Path(path).parents)):
            if place in self.rules:
                return self.rules[place]
        return False

    def inside(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def mirror(self, source: str) -> None:
        """`source` at its own path in the tree; the sources inside what it excludes are
        mirrored on their own."""
        if not self.shown(source) or not os.path.lexists(source):
            return
        self.folders_to(source)
        if os.path.islink(source) or not os.path.isdir(source):
            _place(source, self.inside(source))
            return
        for directory, subdirectories, files in os.walk(source):
            on_the_way = {name for name in subdirectories if os.path.join(directory, name) in self.on_the_way}
            # Inside a source, what no rule names is in the tree (os.walk enters no excluded folder).
            subdirectories[:] = [name for name in subdirectories if self.rules.get(os.path.join(directory, name), True)]
            try:
                info = os.lstat(directory)
            except FileNotFoundError:  # removed while the tree was made
                subdirectories.clear()
                continue
            target = self.inside(directory)
            fresh = _lstat(target) is None
            _folder(target, stat.S_IMODE(info.st_mode) & ~SHARED_WRITE_BITS, owner=(info.st_uid, info.st_gid))
            self.now[directory] = info.st_mtime_ns
            if not fresh and self.seen.get(directory) == info.st_mtime_ns:
                continue
            kept = set(on_the_way)
            for name in [*files, *subdirectories]:
                path = os.path.join(directory, name)
                if not self.rules.get(path, True):
                    continue
                try:
                    if name in files or os.path.islink(path):
                        _place(path, target / name, fresh=fresh)
                except FileNotFoundError:
                    continue  # removed while the tree was made
                kept.add(name)
            if not fresh:
                for name in os.listdir(target):
                    if name not in kept:
                        walk.remove(target / name)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _folder(path: Path, mode: int, owner: tuple[int, int] = (0, 0)) -> None:
    info = _lstat(path)
    if info is not None and not stat.S_ISDIR(info.st_mode):
        walk.remove(path)
        info = None
    if info is None:
        path.mkdir(mode=mode)
        info = os.lstat(path)
    if (info.st_uid, info.st_gid) != owner:
        os.chown(path, *owner)
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)


def _place(source: str, target: Path, *, fresh: bool = False) -> None:
    """`target` the same as `source`: a symbolic link alike, a regular file by a hard link (or
    a copy), anything else (a socket, a device, a FIFO) left out. Replaced atomically: a worker
    of another grader may be reading the tree. `fresh`: its folder was made just now."""
    info = os.lstat(source)
    if fresh and stat.S_ISREG(info.st_mode) and not info.st_mode & SHARED_WRITE_BITS and _linked(source, target):
        return
    present = None if fresh else _lstat(target)
    staged = target.with_name(f".{target.name}.staged")
    if _lstat(staged) is not None:  # left by a grader that was killed while it placed it
        staged.unlink()
    if stat.S_ISLNK(info.st_mode):
        link = os.readlink(source)
        if present is not None and stat.S_ISLNK(present.st_mode) and os.readlink(target) == link:
            return
        os.symlink(link, staged)
    elif stat.S_ISREG(info.st_mode):
        if present is not None and (present.st_dev, present.st_ino) == (info.st_dev, info.st_ino):
            return
        if present is not None and stat.S_ISREG(present.st_mode) and present.st_nlink == 1 \
                and (present.st_size, present.st_mtime_ns) == (info.st_size, info.st_mtime_ns):
            return  # a copy, still current
        if info.st_mode & SHARED_WRITE_BITS or not _linked(source, staged):
            shutil.copy2(source, staged, follow_symlinks=False)
            os.chmod(staged, stat.S_IMODE(info.st_mode) & ~SHARED_WRITE_BITS)
            os.chown(staged, info.st_uid, info.st_gid)
    else:
        if present is not None:
            walk.remove(target)
        return
    if present is not None and stat.S_ISDIR(present.st_mode):
        walk.remove(target)
    os.replace(staged, target)


def _linked(source: str, target: Path) -> bool:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:  # another file system, or a link the kernel refuses
        return False
    return True
