"""Writing a file so that a reader (or a resumed batch) sees the old version or the new one,
never half of one: write a temporary sibling, then rename it over the target."""

import os
import tempfile
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
