"""Which submissions a batch holds, under which student id, with which input hash.

A SUBMISSIONS folder holds one entry per student: a zip, a folder or a .ipynb notebook. Every
entry whose name does not start with "." (and is not `__MACOSX`) is a submission, whatever its
type: an unexpected file (a stray `.tar.gz`) is graded like any other input and ends as a rejected
row of the gradebook, so no student silently disappears from it.

The student id is the entry's name without its extension (`alice.zip` -> `alice`,
`alice.ipynb` -> `alice`, `alice/` -> `alice`). Two naming schemes of LMS downloads are
understood on request (`--names`):

    canvas   `doejane_12345_67890_hw.zip` or `doejane_LATE_12345_67890_hw.zip`
             -> id 12345 (the Canvas user id, the "ID" column of a Canvas gradebook), name doejane,
             late when Canvas marked it LATE. A student who uploaded the module files one by one
             (`doejane_12345_67890_model.py`, `doejane_12345_67890_train.py`, ...) is one
             submission: the files are copied under their own names into a folder of the batch's
             (`staging`), the latest upload of each name winning (the highest Canvas submission
             id; a re-upload Canvas renamed `model-1.py` counts as `model.py`).
    moodle   `Jane Doe_4567_assignsubmission_file_` (a folder, or a file with that prefix)
             -> id 4567 (the participant id, "Participant 4567" in Moodle's grading worksheet), name
             Jane Doe. A folder of Moodle's "download submissions in folders" that holds a single
             zip or notebook (`Jane Doe_4567_assignsubmission_file_/hw4.zip`) is that file.

Both layouts are read anchored to what the LMS writes, not by the first number in the name: the
name (chosen by the student, in their profile) and the uploaded file's name (chosen by the student
too) may both hold something shaped like `_<id>_...`, to land as another student. Every reading of
the layout is tried; an entry that reads as two different students is graded as neither: it is a
submission of its own, under its plain id, rejected with the reason (`Submission.rejected`), and the
others are graded. Two entries with one id (Canvas: uploads of one id under two names) are refused
with the batch (`DiscoveryError`, before anything is graded), never merged. A Moodle folder ends with its `_assignsubmission_<plugin>_`,
so the id is the one just before that end, whatever the name holds.

An entry that does not match the scheme keeps its plain id. A manifest CSV (`student_id,path`,
paths relative to the manifest's folder unless absolute) replaces all of this: only the listed
entries are graded, under the listed ids.
"""

from __future__ import annotations

import csv
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from graders.grading import input_sha256

SKIPPED_NAMES = frozenset({"__MACOSX"})
STRIPPED_SUFFIXES = (".zip", ".ipynb")
_UNSAFE = re.compile(r"[^A-Za-z0-9._@+-]")
# Where the LMS's own part may begin (after `<name>`): every such place is a reading of the name.
_CANVAS_AT = re.compile(r"_(?=(?P<late>LATE_)?(?P<id>\d+)_(?P<submission>\d+)_(?P<file>.+)$)")
_RENAMED_UPLOAD = re.compile(r"^(?P<stem>.+)-\d+(?P<suffix>\.[A-Za-z0-9]+)$")  # Canvas's `model-1.py`
_MOODLE_AT = re.compile(r"_(?=(?P<id>\d+)_assignsubmission_(?:file|onlinetext)_(?P<file>.*)$)")
NAME_SCHEMES = ("plain", "canvas", "moodle")


class DiscoveryError(Exception):
    """The batch cannot start (duplicate ids, ambiguous names, unreadable manifest); the message says why."""


class AmbiguousName(DiscoveryError):
    """An entry whose name reads as more than one student id in the LMS's layout."""


@dataclass(frozen=True)
class LmsName:
    """One reading of an entry's name in an LMS's layout."""
    name: str
    student_id: str
    file: str  # the uploaded file's own name (Moodle's folder: "")
    submission: int = 0  # Canvas's submission id
    late: bool = False  # Canvas's LATE


@dataclass(frozen=True)
class Submission:
    student_id: str  # safe as a folder name
    path: Path
    name: str = ""  # a display name where the LMS file name gives one
    sha256: str = ""  # of the input as it is (graders.grading.input_sha256)
    late: bool = False  # the LMS marked it late (Canvas's LATE)
    rejected: str = ""  # why it is not graded, decided from its name alone (an ambiguous LMS name)

    def to_json(self) -> dict:
        return {"student_id": self.student_id, "path": str(self.path), "name": self.name, "sha256": self.sha256,
                "late": self.late, "rejected": self.rejected}


def safe_id(text: str) -> str:
    """An id usable as a folder name: unusual characters become "_"."""
    cleaned = _UNSAFE.sub("_", text.strip())
    if cleaned in ("", ".", ".."):
        cleaned = "_" + cleaned.replace(".", "_")
    return cleaned[:120]


def lms_name(entry_name: str, scheme: str, *, folder: bool = False) -> LmsName | None:
    """The entry's name read in the LMS's layout, None where it does not match it. Raises
    AmbiguousName where it reads as two different students."""
    if scheme == "canvas":
        readings = [LmsName(entry_name[:at.start()], at["id"], at["file"], int(at["submission"]), bool(at["late"]))
                    for at in _CANVAS_AT.finditer(entry_name) if at.start() > 0]
        # `doejane_LATE_1_2_f` also reads as the name `doejane_LATE`: the same student, not late.
        readings = [r for r in readings if not any(o.late and r.name == f"{o.name}_LATE" for o in readings)]
    elif scheme == "moodle":
        readings = [LmsName(entry_name[:at.start()], at["id"], at["file"])
                    for at in _MOODLE_AT.finditer(entry_name) if at.start() > 0]
        if folder and readings and not readings[-1].file:
            readings = readings[-1:]  # Moodle's folder ends with its layout: the name is all before it
    else:
        return None
    if len({reading.student_id for reading in readings}) > 1:
        raise AmbiguousName(f"{entry_name!r} reads as the {scheme} ids "
                            f"{', '.join(dict.fromkeys(r.student_id for r in readings))}")
    return readings[0] if readings else None


def id_from_entry(entry_name: str, scheme: str = "plain", *, folder: bool = False) -> tuple[str, str]:
    """(student id, display name) of a SUBMISSIONS entry. Raises AmbiguousName (see lms_name)."""
    stem = entry_name
    for suffix in STRIPPED_SUFFIXES:
        if stem.lower().endswith(suffix) and len(stem) > len(suffix):
            stem = stem[: -len(suffix)]
            break
    reading = lms_name(entry_name, scheme, folder=folder)
    if reading is not None:
        return safe_id(reading.student_id), reading.name
    return safe_id(stem), ""


def discover(folder: Path | None, *, manifest: Path | None = None, names: str = "plain",
             hash_inputs: bool = True, exclude: tuple[Path, ...] = (), staging: Path | None = None) -> list[Submission]:
    """The submissions, sorted by student id. Raises DiscoveryError on duplicate ids.
    `exclude`: paths that are not submissions even inside the folder (the output folder).
    `staging`: where a Canvas student's files uploaded one by one are gathered into one folder
    (without it, they are duplicate ids)."""
    excluded = {Path(p).resolve() for p in exclude}
    late: set[str] = set()
    rejected: dict[str, str] = {}
    if manifest is not None:
        pairs = _from_manifest(Path(manifest), folder)
    else:
        if folder is None or not Path(folder).is_dir():
            raise DiscoveryError(f"{folder} is not a folder of submissions")
        pairs = []
        for entry in sorted(Path(folder).iterdir()):
            if entry.name.startswith(".") or entry.name in SKIPPED_NAMES or entry.resolve() in excluded:
                continue
            try:
                reading = lms_name(entry.name, names, folder=entry.is_dir() and not entry.is_symlink())
            except AmbiguousName as error:
                # Graded as neither student: a row of its own, under its plain id, says why.
                student_id, _ = id_from_entry(entry.name)
                rejected[student_id] = (f"its name {error}: it is graded as neither; give the entry the one id it "
                                        "belongs to (rename it), or list the batch in a --manifest")
                pairs.append((student_id, entry, ""))
                continue
            if reading is None:
                student_id, display = id_from_entry(entry.name)
                pairs.append((student_id, entry, display))
                continue
            if reading.late:
                late.add(safe_id(reading.student_id))
            if names == "moodle":
                entry = _single_file_inside(entry)
            pairs.append((safe_id(reading.student_id), entry, reading.name))
        if names == "canvas" and staging is not None:
            pairs = _gather_canvas_uploads(pairs, Path(staging), frozenset(rejected))
    seen: dict[str, Path] = {}
    duplicates = []
    for student_id, path, _ in pairs:
        if student_id in seen:
            duplicates.append(f"{student_id}: {seen[student_id].name!r} and {path.name!r}")
        seen.setdefault(student_id, path)
    if duplicates:
        raise DiscoveryError("several submissions have the same student id (keep one, or give a --manifest):\n  "
                             + "\n  ".join(duplicates))
    submissions = [Submission(sid, path, display, input_sha256(path) if hash_inputs else "", sid in late,
                              rejected.get(sid, "")) for sid, path, display in pairs]
    return sorted(submissions, key=lambda s: s.student_id)


def detect_assignment(folder: Path | None, *, manifest: Path | None = None, names: str = "plain",
                      exclude: tuple[Path, ...] = ()):
    """The installed assignment whose hand-ins the batch's submissions are, told per submission as
    `grade SUBMISSION` tells it (`assignment.for_submission`), with a line saying so. Raises
    DiscoveryError where they are of several assignments, or where none shows one's files."""
    from graders.assignment import PackError, for_submission

    votes: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="grade-detect-") as staging:
        submissions = discover(folder, manifest=manifest, names=names, hash_inputs=False, exclude=exclude,
                               staging=Path(staging))
        for submission in submissions:
            try:
                name = for_submission(submission.path).name
            except PackError:
                continue  # graded as a rejection of whichever assignment the others are
            votes.setdefault(name, []).append(submission.student_id)
    if not submissions:
        raise DiscoveryError(f"{folder if manifest is None else manifest} holds no submission to tell the homework "
                             "from: choose one with --assignment NAME")
    if not votes:
        raise DiscoveryError(f"none of the {len(submissions)} submissions shows an installed assignment's files: "
                             "choose one with --assignment NAME")
    if len(votes) > 1:
        counts = sorted(votes.items(), key=lambda item: -len(item[1]))
        said = "; ".join(f"{name}: {len(ids)} ({', '.join(ids[:5])}{', ...' if len(ids) > 5 else ''})"
                         for name, ids in counts)
        raise DiscoveryError(f"the submissions are hand-ins of {len(votes)} assignments ({said}); a gradebook is one "
                             "homework's: choose one with --assignment NAME (or list one homework's in a --manifest)")
    [(name, ids)] = votes.items()
    others = len(submissions) - len(ids)
    said = (f"{len(ids)} of {len(submissions)} submissions; "
            + ("the other shows" if others == 1 else f"the other {others} show") + " no homework's files"
            if others else f"all {len(ids)} submissions")
    return name, f"grading the submissions as {name} ({said}); --assignment NAME chooses another"


def _single_file_inside(entry: Path) -> Path:
    """A Moodle folder holding a single zip or notebook is that file; anything else stays the folder."""
    if not entry.is_dir() or entry.is_symlink():
        return entry
    inside = [path for path in entry.iterdir() if not path.name.startswith(".") and path.name not in SKIPPED_NAMES]
    if len(inside) == 1 and inside[0].is_file() and not inside[0].is_symlink() \
            and inside[0].suffix.lower() in STRIPPED_SUFFIXES:
        return inside[0]
    return entry


def _gather_canvas_uploads(pairs: list[tuple[str, Path, str]], staging: Path,
                           rejected: frozenset[str] = frozenset()) -> list[tuple[str, Path, str]]:
    """Each Canvas student with several uploaded files, or with one module file, becomes one
    folder under `staging` holding the files under their own names; a zip, a notebook or a
    folder alone stays as it is, and so do the `rejected` ids' entries."""
    by_student: dict[str, list[tuple[str, Path, str]]] = {}
    for pair in pairs:
        by_student.setdefault(pair[0], []).append(pair)
    gathered = []
    for student_id, entries in by_student.items():
        if student_id in rejected:
            gathered += entries
            continue
        uploads = [(reading, path) for _, path, _ in entries
                   if (reading := lms_name(path.name, "canvas")) and path.is_file() and not path.is_symlink()]
        alone = len(entries) == 1 and (entries[0][1].is_dir() or entries[0][1].suffix.lower() in STRIPPED_SUFFIXES)
        if alone or len(uploads) != len(entries):
            gathered += entries
            continue
        if len({display for _, _, display in entries}) > 1:  # Canvas names one student's uploads alike
            raise DiscoveryError(f"uploads of the student id {student_id} under different names "
                                 f"({', '.join(sorted({repr(path.name) for _, path, _ in entries}))}): keep the "
                                 "student's own, or list the batch in a --manifest")
        latest: dict[str, tuple[int, Path]] = {}
        for reading, path in uploads:
            renamed = _RENAMED_UPLOAD.match(reading.file)
            name = f"{renamed['stem']}{renamed['suffix']}" if renamed else reading.file
            if name not in latest or reading.submission >= latest[name][0]:
                latest[name] = (reading.submission, path)
        folder = staging / student_id
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for name, (_, path) in sorted(latest.items()):
            shutil.copyfile(path, folder / safe_id(name))
        gathered.append((student_id, folder, entries[0][2]))
    return gathered


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
