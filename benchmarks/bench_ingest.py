"""How fast, and in how much memory, a zip of ~950,000 folder entries is refused.

Folder entries are never extracted, so before they counted against `IngestLimits.max_entries`
nothing stopped such a zip until zipfile had built an object per entry. The zip written here is
the cheapest form of that attack: one module file, then 950,000 central-directory records of a
folder named `d/` (48 bytes each, 45 MB in all, under the 50 MiB limit on a submission).

    .venv/bin/python benchmarks/bench_ingest.py [--entries 950000]

Each measurement runs in a fresh interpreter and reports wall time and the growth of its peak
resident memory over the same interpreter's peak before the call:

- `zipfile`: `zipfile.ZipFile(path).infolist()`, the work ingest used to do before any limit;
- `ingest`: `graders.ingest.ingest(path, dest, assignment=bert)`, which now refuses on the declared count;
- `ingest, count hidden`: the same zip with the end record declaring 1 entry, so the refusal
  comes from walking the central directory (stopped after `max_entries`).
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MEASURE = r"""
import json, resource, sys, time, zipfile
from pathlib import Path
what, path, dest = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
from graders.assignment import load
from graders.ingest import Rejected, ingest
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
outcome = ""
if what == "zipfile":
    outcome = f"{len(zipfile.ZipFile(path).infolist()):,} entries parsed"
else:
    try:
        ingest(path, dest, assignment=load("bert"))
        outcome = "accepted"
    except Rejected as rejected:
        outcome = rejected.reason
seconds = time.perf_counter() - start
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"seconds": seconds, "peak_mib": grown / 1024, "outcome": outcome}))
"""


def folder_zip(path: Path, entries: int, *, declared: int | None = None) -> int:
    """Write the zip; return its size. `declared` overrides the count in the end record."""
    name, data = b"attention.py", b"# attention\n"
    crc = zipfile.crc32(data)
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, len(data), len(data), len(name), 0)
    module_central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, crc, len(data), len(data),
                                 len(name), 0, 0, 0, 0, 0o100644 << 16, 0) + name
    folder_central = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0,
                                 2, 0, 0, 0, 0, (0o040755 << 16) | 0x10, 0) + b"d/"
    with path.open("wb") as f:
        f.write(local + name + data)
        directory_at = f.tell()
        f.write(module_central)
        f.write(folder_central * (entries - 1))
        directory_size = f.tell() - directory_at
        count = entries if declared is None else declared
        if count > 0xFFFF:
            f.write(struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count,
                                directory_size, directory_at))
            f.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, directory_at + directory_size, 1))
            f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))
        else:
            f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, count, count, directory_size, directory_at, 0))
        return f.tell()


def measure(what: str, path: Path, dest: Path) -> dict:
    done = subprocess.run([sys.executable, "-c", MEASURE, what, str(path), str(dest)], cwd=REPO,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=950_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        declared = Path(tmp) / "declared.zip"
        hidden = Path(tmp) / "hidden.zip"
        size = folder_zip(declared, args.entries)
        folder_zip(hidden, args.entries, declared=1)
        print(f"{args.entries:,} entries, {size / 1e6:.1f} MB")
        for label, what, path in [("zipfile", "zipfile", declared), ("ingest", "ingest", declared),
                                  ("ingest, count hidden", "ingest", hidden)]:
            result = measure(what, path, Path(tmp) / f"out-{what}-{path.stem}")
            print(f"{label:22} {result['seconds'] * 1000:9.1f} ms  {result['peak_mib']:7.1f} MiB  {result['outcome'][:90]}")


if __name__ == "__main__":
    main()
