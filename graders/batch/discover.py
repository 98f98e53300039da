"""Which submissions a batch holds, under which student id, with which input hash.

A SUBMISSIONS folder holds one entry per student: a zip, a folder or a .ipynb notebook. Every
entry whose name does not start with "." (and is not `__MACOSX`) is a submission, whatever its
type: an unexpected file (a stray `.tar.gz`) is graded like any other input and ends as a rejected
row of the gradebook, so no student silently disappears from it.

The student id is the entry's name without its extension (`alice.zip` -> `alice`,
`alice.ipynb` -> `alice`, `alice/` -> `alice`). Two naming schemes of LMS downloads are
understood on request (`--names`):

    canvas   `doejane_12345_67890_hw.zip` or `doejane_LATE_12345_67890_hw.zip`
             -> id 12345 (the Canvas user id, the "ID" column of a Canvas gradebook), name doejane
    moodle   `Jane Doe_4567_assignsubmission_file_` (a folder, or a file with that prefix)
             -> id 4567 (the participant id, "Participant 4567" in Moodle's grading worksheet), name Jane Doe

An entry that does not match the scheme keeps its plain id. A manifest CSV (`student_id,path`,
paths relative to the manifest's folder unless absolute) replaces all of this: only the listed
entries are graded, under the listed ids.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from graders.grading import input_sha256

SKIPPED_NAMES = frozenset({"__MACOSX"})
STRIPPED_SUFFIXES = (".zip", ".ipynb")
_UNSAFE = re.compile(r"[^A-Za-z0-9._@+-]")
_CANVAS = re.compile(r"^(?P<name>[^_]+)_(?:LATE_)?(?P<id>\d+)_(?P<submission>\d+)_.*$")
_MOODLE = re.compile(r"^(?P<name>.+?)_(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_.*$")
NAME_SCHEMES = ("plain", "canvas", "moodle")


class DiscoveryError(Exception):
    """The batch cannot start (duplicate ids, unreadable manifest); the message says why."""


@dataclass(frozen=True)
class Submission:
    student_id: str  # safe as a folder name
    path: Path
    name: str = ""  # a display name where the LMS file name gives one
    sha256: str = ""  # of the input as it is (graders.grading.input_sha256)

    def to_json(self) -> dict:
        return {"student_id": self.student_id, "path": str(self.path), "name": self.name, "sha256": self.sha256}


def safe_id(text: str) -> str:
    """An id usable as a folder name: unusual characters become "_"."""
    cleaned = _UNSAFE.sub("_", text.strip())
    if cleaned in ("", ".", ".."):
        cleaned = "_" + cleaned.replace(".", "_")
    return cleaned[:120]


def id_from_entry(entry_name: str, scheme: str = "plain") -> tuple[str, str]:
    """(student id, display name) of a SUBMISSIONS entry."""
    stem = entry_name
    for suffix in STRIPPED_SUFFIXES:
        if stem.lower().endswith(suffix) and len(stem) > len(suffix):
            stem = stem[: -len(suffix)]
            break
    if scheme == "canvas" and (match := _CANVAS.match(entry_name)):
        return safe_id(match["id"]), match["name"]
    if scheme == "moodle" and (match := _MOODLE.match(entry_name)):
        return safe_id(match["id"]), match["name"]
    return safe_id(stem), ""


def discover(folder: Path | None, *, manifest: Path | None = None, names: str = "plain",
             hash_inputs: bool = True, exclude: tuple[Path, ...] = ()) -> list[Submission]:
    """The submissions, sorted by student id. Raises DiscoveryError on duplicate ids.
    `exclude`: paths that are not submissions even inside the folder (the output folder)."""
    excluded = {Path(p).resolve() for p in exclude}
    if manifest is not None:
        pairs = _from_manifest(Path(manifest), folder)
    else:
        if folder is None or not Path(folder).is_dir():
            raise DiscoveryError(f"{folder} is not a folder of submissions")
        pairs = []
        for entry in sorted(Path(folder).iterdir()):
            if entry.name.startswith(".") or entry.name in SKIPPED_NAMES or entry.resolve() in excluded:
                continue
            student_id, display = id_from_entry(entry.name, names)
            pairs.append((student_id, entry, display))
    seen: dict[str, Path] = {}
    duplicates = []
    for student_id, path, _ in pairs:
        if student_id in seen:
            duplicates.append(f"{student_id}: {seen[student_id].name} and {path.name}")
        seen.setdefault(student_id, path)
    if duplicates:
        raise DiscoveryError("several submissions have the same student id (keep one, or give a --manifest):\n  "
                             + "\n  ".join(duplicates))
    submissions = [Submission(sid, path, display, input_sha256(path) if hash_inputs else "")
                   for sid, path, display in pairs]
    return sorted(submissions, key=lambda s: s.student_id)


def _from_manifest(manifest: Path, folder: Path | None) -> list[tuple[str, Path, str]]:
    try:
        text = manifest.read_text(encoding="utf-8-sig")
    except OSError as error:
        raise DiscoveryError(f"cannot read the manifest {manifest}: {error}") from None
    rows = list(csv.DictReader(text.splitlines()))
    if not rows or not {"student_id", "path"} <= set(rows[0]):
        raise DiscoveryError(f"{manifest}: the manifest needs the columns student_id,path")
    base = manifest.parent
    pairs = []
    for number, row in enumerate(rows, start=2):
        raw_id, raw_path = (row.get("student_id") or "").strip(), (row.get("path") or "").strip()
        if not raw_id or not raw_path:
            raise DiscoveryError(f"{manifest}:{number}: empty student_id or path")
        path = Path(raw_path)
        if not path.is_absolute():
            path = (base / path) if (base / path).exists() or folder is None else Path(folder) / path
        pairs.append((safe_id(raw_id), path, (row.get("name") or "").strip()))
    return pairs
