"""Writing a file or a folder so that a reader (or a resumed batch, or another grader sharing a
cache) sees the old version or the new one, never half of one: write a temporary sibling, then
rename it over the target. What is written is readable by everyone: outputs, and caches that a
sandboxed worker reads as another user.

An output folder of a grade is made by `private_output_folder` before any worker starts: a
folder that a sandbox uid made first (`--out /tmp/X`) would let the student's leftover process
rewrite the results after the grader wrote them, and one that others may open would show one
student the results (the rubric's answers) of another."""

import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path


class OutputFolderError(RuntimeError):
    """An output folder that cannot be used; the message says why, with the fix."""


class UnsafeOutputFolder(OutputFolderError):
    """An output folder that someone other than the grader could change or open."""


def private_output_folder(folder, *, untrusted_uids: range = range(0)) -> Path:
    """Make `folder` (and its missing parents) for the grader's outputs, or take the grader's own
    existing one, so that no other user, a sandbox uid above all, can create, change or open it:
    the folder itself is the grader's and mode 0700; no folder on the way is writable by others
    (unless sticky, like /tmp, whose entries only their owner may rename) or owned by one of
    `untrusted_uids`; no link on the way is someone else's. Raises UnsafeOutputFolder, saying
    why, otherwise."""
    folder = Path(os.path.abspath(folder))
    _check_links_on_the_way(folder)
    _refuse_files_on_the_way(folder)
    make_folder(folder.parent)
    resolved = Path(os.path.realpath(folder))
    for ancestor in reversed(resolved.parents):
        info = os.stat(ancestor)
        if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
            raise UnsafeOutputFolder(f"{ancestor} is writable by every user: another could replace the output "
                                     f"folder {folder}; choose one under a folder only you may change")
        if info.st_uid in untrusted_uids:
            raise UnsafeOutputFolder(f"{ancestor} belongs to a sandbox uid ({info.st_uid}): choose another output folder")
    try:
        os.mkdir(resolved, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise OutputFolderError(f"cannot make the output folder {folder}: {error.strerror}") from None
    info = os.lstat(resolved)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise UnsafeOutputFolder(f"{folder} exists and is not a folder of the grader's user (uid {os.geteuid()}): "
                                 "someone else made it; remove it or choose another output folder")
    if info.st_mode & 0o077:
        # The grader's own folder from an earlier grade: closed now, before any worker starts (a
        # lookup through a descriptor opened earlier is checked against the new mode too).
        os.chmod(resolved, stat.S_IMODE(info.st_mode) & 0o700)
    return resolved


def make_folder(folder) -> Path:
    """Make `folder` and the folders on the way, or raise OutputFolderError saying what is in the
    way (a file where a folder must be), with the fix."""
    folder = Path(folder)
    _refuse_files_on_the_way(Path(os.path.abspath(folder)))
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputFolderError(f"cannot make the output folder {folder}: {error.strerror}") from None
    return folder


def output_file(path) -> Path:
    """`path` as a file to write, its folder made; raises OutputFolderError where a folder is
    there, or a file stands where a folder must be."""
    path = Path(path)
    if path.is_dir():
        raise OutputFolderError(f"{path} is a folder: give a file's name")
    blocking = next((place for place in Path(os.path.abspath(path)).parents if place.exists() and not place.is_dir()), None)
    if blocking is not None:
        raise OutputFolderError(f"{blocking} is a file, so {path} cannot be written inside it: choose another place")
    make_folder(path.parent)
    return path


def _refuse_files_on_the_way(folder: Path) -> None:
    blocking = next((place for place in (folder, *folder.parents) if place.exists() and not place.is_dir()), None)
    if blocking == folder:
        raise OutputFolderError(f"{folder} is a file, not a folder: choose an output folder (a new one is made)")
    if blocking is not None:
        raise OutputFolderError(f"{blocking} is a file, so {folder} cannot be made inside it: choose another output folder")


def _check_links_on_the_way(folder: Path) -> None:
    """A symbolic link on the way must be root's or the grader's: another user's (in /tmp) could
    point the outputs anywhere."""
    current = Path(folder.anchor)
    for part in folder.parts[1:]:
        current = current / part
        try:
            info = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):  # the rest is made (or refused: a file on the way)
            return
        if stat.S_ISLNK(info.st_mode):
            if info.st_uid not in (0, os.geteuid()):
                raise UnsafeOutputFolder(f"{current} is a link of another user (uid {info.st_uid}): "
                                         "choose another output folder")
            current = Path(os.path.realpath(current))


def write_atomically(path, data) -> Path:
    """Write `data` (str or bytes) to `path` atomically; the file is readable by everyone (0644),
    like any other output, although mkstemp creates it private."""
    path = Path(path)
    _check_folder_is_safe(path.parent)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data.encode("utf-8") if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _check_folder_is_safe(folder: Path) -> None:
    """Checked ownership: the rename that publishes a file is only as safe as its folder. One
    that anybody may write, without the sticky bit, lets another user swap the file after it is
    written."""
    info = os.stat(folder)
    if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
        raise UnsafeOutputFolder(f"refusing to write into {folder}: every user may change it")


def fill_folder_atomically(folder: Path, fill: Callable[[Path], None]) -> None:
    """Let `fill` write a temporary sibling folder, then rename it to `folder`; a lost race keeps the winner's."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        fill(tmp)
        _readable_by_everyone(tmp)
        os.rename(tmp, folder)
    except OSError:
        if not folder.is_dir():  # not a lost race: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _readable_by_everyone(folder: Path) -> None:
    """The sandboxed worker reads caches as another user; some writers (safetensors) create 0600 files.
    Nothing in a cache is secret: features and encoder weights, never labels."""
    for path in [folder, *folder.rglob("*")]:
        path.chmod(path.stat().st_mode | (0o555 if path.is_dir() else 0o444))
