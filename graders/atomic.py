"""Writing a file or a folder so that a reader (or a resumed batch, or another grader sharing a
cache) sees the old version or the new one, never half of one: write a temporary sibling, then
rename it over the target. What is written is readable by everyone: outputs, and caches that a
sandboxed worker reads as another user."""

import os
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path


def write_atomically(path, data) -> Path:
    """Write `data` (str or bytes) to `path` atomically; the file is readable by everyone (0644),
    like any other output, although mkstemp creates it private."""
    path = Path(path)
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
