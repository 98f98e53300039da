"""Turn a hand-in (a zip, a folder or a notebook) into a plain folder of module files.

Everything in a submission is hostile: names, sizes, file types, the zip structure itself.
Nothing here imports or runs student code; it only copies bytes, under limits, into a fresh
folder the caller owns, and says what it found. Unusable input raises `Rejected` with a reason
a TA can read; a module that is merely missing is recorded, so the grade can report it per part.
"""

from __future__ import annotations

import codecs
import difflib
import hashlib
import io
import json
import os
import re
import shutil
import stat
import struct
import tempfile
import tokenize
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Literal

# What a hand-in is and how much of one is read: shared with the notebook reader, which this
# module calls (graders/handin.py); callers of `ingest` find them here too.
from graders.handin import MiB, IngestLimits, Rejected, SubmissionLayout

# The grader reads no more of a questions file than this, and parses it safely.
from graders.answers_file import MAX_ANSWERS_BYTES, answers_text, parse_answers


# Folders and files that operating systems, editors and tools add on their own (.grade/ and
# .pytest_cache/: what `grade check` and `pytest` write in the student bundle's homework folder).
# They are skipped without being read, wherever they appear in the tree.
IGNORED_NAMES = frozenset({"__MACOSX", ".ipynb_checkpoints", "__pycache__", ".DS_Store", ".git", ".grade",
                           ".pytest_cache"})

_COPY_CHUNK = 64 * 1024
# Below this size a high compression ratio is ordinary (a short file of repeated lines).
_RATIO_CHECK_FROM_BYTES = 1 * MiB

RAW_FOLDER = "submission"
NOTEBOOK_FOLDER = "from_notebook"


@dataclass(frozen=True)
class Ingested:
    root: Path  # the folder holding the modules
    kind: Literal["zip", "folder", "notebook"]
    sha256: str
    files: list[str]  # paths relative to root, sorted
    missing: list[str]  # files of the assignment's layout not found in root
    notes: list[str] = field(default_factory=list)
    # Why a missing module is missing, when there is more to say than "not in the submission".
    missing_reasons: dict[str, str] = field(default_factory=dict)
    # A notebook hand-in's map: {"notebook", "definitions": [{name, cell, module}],
    # "answers": [{key, cell}]}; None for modules handed in as files.
    origin: dict | None = None
    # Module files present that Python could not read as source (their encoding), with why and the fix.
    unreadable: dict[str, str] = field(default_factory=dict)


def ingest(source: Path, dest: Path, *, assignment, limits: IngestLimits = IngestLimits()) -> Ingested:
    """Copy the submission at `source` into `dest` (absent or empty) and locate the modules of
    `assignment` (graders/assignment.py).

    A zip or folder is copied into `dest/submission/`; a notebook's definitions are written as
    modules into `dest/from_notebook/`. On rejection everything written into `dest` is removed.
    """
    source, dest = Path(source), Path(dest)
    if not source.exists():
        raise Rejected(f"{_show(str(source))} does not exist")
    if dest.exists() and any(dest.iterdir()):
        raise ValueError(f"destination {dest} must be absent or empty")
    if source.is_dir() and dest.resolve().is_relative_to(source.resolve()):
        raise ValueError("the destination must not lie inside the submission folder")
    dest.mkdir(parents=True, exist_ok=True)
    try:
        return _ingest_into(source, dest, limits, SubmissionLayout.of(assignment))
    except Rejected:
        for child in dest.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
        raise


def _ingest_into(source: Path, dest: Path, limits: IngestLimits, layout: SubmissionLayout) -> Ingested:
    notes: list[str] = []
    raw = dest / RAW_FOLDER
    raw.mkdir()
    if source.is_dir():
        kind = "folder"
        _copy_folder(source, raw, limits, notes)
        sha256 = _hash_tree(raw)
    elif source.suffix.lower() == ".ipynb":
        kind = "notebook"
        try:
            src = _open_regular_file(source.resolve())
        except _NotRegular:
            raise Rejected(f"{_show(source.name)} is not a regular file") from None
        with src:
            _copy_stream(src, raw / source.name, source.name, limits, _Budget(limits))
        sha256 = _hash_file(raw / source.name)
    else:
        kind = "zip"
        _extract_zip(source, raw, limits, notes)
        sha256 = _hash_file(source)

    module_dir, notebook = _locate(raw, notes, layout)
    missing_reasons, origin = {}, None
    if notebook is None:
        root = module_dir
    else:
        kind = "notebook"
        root, missing_reasons, origin = _modules_from_notebook(raw / notebook, module_dir, dest / NOTEBOOK_FOLDER, notes,
                                                               layout)

    files = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    missing = [name for name in layout.expected_files if not (root / name).is_file()]
    notes.extend(_near_miss_notes(missing, raw, layout))
    unreadable = {name: problem for name in layout.expected_files if name.endswith(".py") and (root / name).is_file()
                  and (problem := source_encoding_problem((root / name).read_bytes(), name))}
    return Ingested(root=root, kind=kind, sha256=sha256, files=files, missing=missing, notes=notes,
                    missing_reasons=missing_reasons, origin=origin, unreadable=unreadable)


_BYTE_ORDER_MARKS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                     (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
SAVE_AS_UTF8 = ("Python reads source files as UTF-8: save it as UTF-8 (in VS Code: the encoding in the status bar, "
                "'Save with Encoding', UTF-8; in Notepad: Save As, Encoding UTF-8) and hand it in again")


def source_encoding_problem(data: bytes, name: str) -> str | None:
    """Why Python cannot read `data` as the source of `name`, in words with the fix, or None. Python
    reads UTF-8 unless a coding line says otherwise (PEP 263); an editor's UTF-16 (Windows'
    "Unicode") gives "source code string cannot contain null bytes", which says neither."""
    shown = _show(name)
    encoding = next((label for mark, label in _BYTE_ORDER_MARKS if data.startswith(mark)), None)
    if encoding is not None:
        return f"{shown} is saved as {encoding} (it starts with a {encoding} byte-order mark); {SAVE_AS_UTF8}"
    if b"\0" in data:
        return (f"{shown} holds null bytes: it is saved as UTF-16 or another encoding of two or four bytes a "
                f"character, or it is not a text file; {SAVE_AS_UTF8}")
    try:
        declared = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    except SyntaxError as error:
        if "unknown encoding" in str(error.msg):  # a coding line naming no encoding Python knows
            return f"{shown}: {_show(str(error.msg), 120)}; {SAVE_AS_UTF8}"
        declared = "utf-8"  # its first lines are not UTF-8: said below, with where
    try:
        data.decode(declared)
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        return (f"{shown} is not valid {error.encoding.upper()} (byte 0x{data[error.start]:02x} on line {line}): it was "
                f"saved in another encoding (Latin-1 or Windows-1252, say); {SAVE_AS_UTF8}")
    return None


# --- zip -------------------------------------------------------------------------------------


def _extract_zip(archive: Path, out: Path, limits: IngestLimits, notes: list[str]) -> None:
    archive_size = archive.stat().st_size
    if archive_size > limits.max_total_bytes:
        raise Rejected(
            f"the file is {_size(archive_size)}; submissions are limited to {_size(limits.max_total_bytes)}"
        )
    # Counted before zipfile reads the central directory: zipfile builds an object per entry,
    # which is where a zip of a million folder entries spends its time and memory.
    _check_entry_count(archive, limits)
    try:
        zf = zipfile.ZipFile(archive)
    # zipfile raises a zoo of exception types on crafted input; each means "unreadable".
    except Exception:
        with archive.open("rb") as f:
            head = f.read(512)
        if head[:2] == b"PK":
            raise Rejected("the zip file is damaged or truncated") from None
        raise Rejected(_not_a_zip(archive.name, head)) from None

    with zf:
        infos = zf.infolist()
        if not infos:
            raise Rejected("the zip file is empty")
        if len(infos) > limits.max_entries:  # a layout the early count did not parse
            raise Rejected(_too_many_entries(f"the zip holds {len(infos):,} entries", limits))
        wanted = _select_entries(infos, limits, notes)
        budget = _Budget(limits)
        for path, info in wanted:
            try:
                with zf.open(info) as src:
                    _copy_stream(src, out.joinpath(*path.parts), path.as_posix(), limits, budget,
                                 compressed_size=info.compress_size)
            except Rejected:
                raise
            # Damaged data (bad CRC, truncated deflate stream, a size that lies) surfaces here.
            except Exception as error:
                raise Rejected(f"the zip file is damaged: {_show(path.as_posix())}: {str(error)[:200]}") from None


# What a file that is not a zip is, by its first bytes: the archives and documents handed in instead.
_OTHER_KINDS = ((b"\x1f\x8b", "a gzip archive (.tar.gz, .tgz)"), (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
                (b"Rar!\x1a\x07", "a RAR archive"), (b"BZh", "a bzip2 archive"), (b"\xfd7zXZ\x00", "an xz archive"),
                (b"%PDF", "a PDF document"))


def _not_a_zip(name: str, head: bytes) -> str:
    """Why a file given as a zip is none, with the fix: what it is, where its first bytes say."""
    kind = next((label for magic, label in _OTHER_KINDS if head.startswith(magic)), None)
    if kind is None and head[257:262] == b"ustar":
        kind = "a tar archive"
    if kind is not None:
        return f"the file is {kind}, not a zip: hand in a .zip of the module files (or the folder, or a .ipynb notebook)"
    if name.endswith(".py"):
        return (f"{_show(name)} is a single file, not a zip, a folder or a notebook: hand in the folder that holds "
                "the module files, or a zip of it")
    return "the file is not a zip archive (nor a folder or a .ipynb notebook)"


# The zip records read before zipfile is trusted with the archive (APPNOTE.TXT 4.3.12-4.3.16).
_EOCD = struct.Struct("<4s4H2LH")  # signature, disk numbers, entry counts, directory size, offset, comment length
_EOCD64_LOCATOR = struct.Struct("<4sLQL")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_CENTRAL_ENTRY = struct.Struct("<4s24x3H12x")  # signature, then the name, extra and comment lengths


def zip_names(archive: Path, limits: IngestLimits = IngestLimits()) -> list[str]:
    """The member names of a zip, read behind the guards of its extraction (its size, and its
    entry count before zipfile parses the directory); none for a zip that fails them or cannot
    be read."""
    try:
        if archive.stat().st_size > limits.max_total_bytes:
            return []
        _check_entry_count(archive, limits)
        with zipfile.ZipFile(archive) as zf:
            return zf.namelist()
    except Exception:  # Rejected, or any of zipfile's errors on crafted input
        return []


def hand_in_listing(source: Path, limits: IngestLimits = IngestLimits()) -> tuple[list[PurePosixPath], set[str]]:
    """(the paths of a folder's or zip's files, as ingest would copy them; the names the
    notebooks among them define), for telling which assignment a hand-in is of. Nothing is
    extracted or run: a folder is walked (no link followed, at most `max_entries` entries), a
    zip's directory read behind its guards, and at most a few notebooks of either parsed. What
    cannot be read lists nothing; ingest then says why."""
    from .notebook import defined_names, defined_names_in

    files: list[PurePosixPath] = []
    notebooks: list = []
    if source.is_dir():
        pending, listed = [PurePosixPath()], 0
        while pending and listed <= limits.max_entries:
            relative_dir = pending.pop()
            try:
                with os.scandir(source.joinpath(*relative_dir.parts)) as listing:
                    for entry in listing:
                        listed += 1
                        if entry.name in IGNORED_NAMES or listed > limits.max_entries:
                            continue
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(relative_dir / entry.name)
                        elif entry.is_file():
                            files.append(relative_dir / entry.name)
            except OSError:
                continue
        notebooks = [source.joinpath(*file.parts) for file in files if file.suffix.lower() == ".ipynb"]
        defined = set().union(*(defined_names(notebook) for notebook in notebooks[:_NOTEBOOKS_READ]))
        return files, defined
    if not source.is_file():
        return [], set()
    for name in zip_names(source, limits):
        path = _safe_listed_path(name)
        if path is not None and not name.endswith(("/", "\\")) and not IGNORED_NAMES & set(path.parts):
            files.append(path)
            if path.suffix.lower() == ".ipynb":
                notebooks.append(name)
    defined: set[str] = set()
    if notebooks:
        try:
            with zipfile.ZipFile(source) as zf:
                for name in notebooks[:_NOTEBOOKS_READ]:
                    info = zf.getinfo(name)
                    if info.file_size <= limits.max_file_bytes and not info.flag_bits & 0x1:
                        defined |= defined_names_in(zf.read(info))
        except Exception:  # noqa: BLE001 - zipfile's zoo of errors on crafted input: ingest says it
            pass
    return files, defined


# A hand-in holds one notebook; of a folder of several, a few are enough to tell the homework.
_NOTEBOOKS_READ = 3


def _safe_listed_path(name: str) -> PurePosixPath | None:
    """A zip entry's path as ingest would store it, or None where ingest refuses it."""
    try:
        return _safe_entry_path(name)
    except Rejected:
        return None


def rejection_as(source: Path, assignment) -> str | None:
    """Why ingest would reject `source` as a hand-in of `assignment`, or None if it would take it."""
    with tempfile.TemporaryDirectory(prefix="grade-detect-") as scratch:
        try:
            ingest(source, Path(scratch) / "submission", assignment=assignment)
        except Rejected as rejected:
            return rejected.reason
    return None


def _too_many_entries(found: str, limits: IngestLimits) -> str:
    return (f"{found} (files and folders together); the limit is {limits.max_entries:,}. "
            "Hand in only the module files, not a whole project or data folder")


def _check_entry_count(archive: Path, limits: IngestLimits) -> None:
    """Reject a zip with more than `max_entries` entries, reading only its directory records.

    The end-of-central-directory record (or its zip64 form) declares the number of entries;
    a declared count over the limit is refused at once. The count can lie, so the central
    directory is then walked header by header, stopping after `max_entries`, which costs
    microseconds per entry instead of zipfile's object per entry. The records are found the way
    zipfile finds them; whatever cannot be parsed here is left to zipfile to judge.
    """
    with archive.open("rb") as f:
        size = f.seek(0, os.SEEK_END)
        tail_start = max(size - (_EOCD.size + 0xFFFF), 0)
        f.seek(tail_start)
        tail = f.read()
        if tail[-_EOCD.size:][:4] == b"PK\x05\x06" and tail[-2:] == b"\0\0":
            at = len(tail) - _EOCD.size  # no archive comment: the common case
        else:
            at = tail.rfind(b"PK\x05\x06")
            if at < 0 or at + _EOCD.size > len(tail):
                return
        _, _, _, on_disk, total, dir_size, _, _ = _EOCD.unpack_from(tail, at)
        eocd_at = tail_start + at
        dir_start = eocd_at - dir_size
        locator_at = eocd_at - _EOCD64_LOCATOR.size
        if locator_at - _EOCD64.size >= 0:
            f.seek(locator_at - _EOCD64.size)
            records = f.read(_EOCD64.size + _EOCD64_LOCATOR.size)
            if (records[_EOCD64.size:][:4] == b"PK\x06\x07" and records[:4] == b"PK\x06\x06"):
                fields = _EOCD64.unpack_from(records)
                on_disk, total, dir_size = fields[6], fields[7], fields[8]
                dir_start = locator_at - _EOCD64.size - dir_size
        declared = max(on_disk, total)
        if declared > limits.max_entries:
            raise Rejected(_too_many_entries(f"the zip declares {declared:,} entries", limits))
        if dir_start < 0 or dir_size > size:
            return
        f.seek(dir_start)
        walked = count = 0
        while walked < dir_size:
            header = f.read(_CENTRAL_ENTRY.size)
            if len(header) < _CENTRAL_ENTRY.size:
                return
            signature, name, extra, comment = _CENTRAL_ENTRY.unpack(header)
            if signature != b"PK\x01\x02":
                return
            count += 1
            if count > limits.max_entries:
                raise Rejected(_too_many_entries(f"the zip holds more than {limits.max_entries:,} entries", limits))
            f.seek(name + extra + comment, os.SEEK_CUR)
            walked += _CENTRAL_ENTRY.size + name + extra + comment


def _select_entries(infos: list[zipfile.ZipInfo], limits: IngestLimits, notes: list[str]
                    ) -> list[tuple[PurePosixPath, zipfile.ZipInfo]]:
    """Check every entry before anything is written; return the regular files to extract."""
    wanted: list[tuple[PurePosixPath, zipfile.ZipInfo]] = []
    ignored: dict[str, int] = {}
    seen: set[PurePosixPath] = set()
    declared_total = 0
    for info in infos:
        path = _safe_entry_path(info.filename)
        if _check_entry_type(info) == stat.S_IFDIR or path is None:
            continue
        junk = next((part for part in path.parts if part in IGNORED_NAMES), None)
        if junk is not None:
            ignored[junk] = ignored.get(junk, 0) + 1
            continue
        if path in seen:
            raise Rejected(f"the zip holds two entries named {_show(path.as_posix())}")
        seen.add(path)
        if info.file_size > limits.max_file_bytes:
            raise Rejected(
                f"{_show(path.as_posix())} unpacks to {_size(info.file_size)}; "
                f"the limit per file is {_size(limits.max_file_bytes)}"
            )
        _check_ratio(path.as_posix(), info.file_size, info.compress_size, limits)
        declared_total += info.file_size
        wanted.append((path, info))

    if len(wanted) > limits.max_files:
        raise Rejected(f"the zip holds {len(wanted)} files; the limit is {limits.max_files}")
    if declared_total > limits.max_total_bytes:
        raise Rejected(
            f"the zip unpacks to {_size(declared_total)}; the limit is {_size(limits.max_total_bytes)}"
        )
    folders = {parent for path in seen for parent in path.parents}
    clash = next((path for path in sorted(seen) if path in folders), None)
    if clash is not None:
        raise Rejected(f"the zip holds {_show(clash.as_posix())} both as a file and as a folder")
    if not wanted:
        raise Rejected("the zip holds no files (only folders or system files such as __MACOSX)")
    if ignored:
        notes.append("ignored system files: " + ", ".join(f"{name} ({count})" for name, count in sorted(ignored.items())))
    return wanted


def _safe_entry_path(name: str) -> PurePosixPath | None:
    """The entry's path inside the extraction folder, or Rejected if it could leave it."""
    if any(ord(char) < 32 or ord(char) == 127 for char in name):
        raise Rejected(f"the zip entry {_show(name)} has control characters in its name")
    # Some Windows tools write backslashes as separators; treating them as separators lets the
    # same checks catch `..\evil.py` while accepting such zips.
    normalised = name.replace("\\", "/")
    if normalised.startswith("/"):
        raise Rejected(f"the zip entry {_show(name)} has an absolute path")
    if re.match(r"[A-Za-z]:", normalised):
        raise Rejected(f"the zip entry {_show(name)} starts with a drive letter")
    parts = [part for part in normalised.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise Rejected(f"the zip entry {_show(name)} points outside the folder ('..')")
    return PurePosixPath(*parts) if parts else None


def _check_entry_type(info: zipfile.ZipInfo) -> int:
    """Reject anything but a plain file or folder; return stat.S_IFDIR or stat.S_IFREG."""
    shown = _show(info.filename)
    if info.flag_bits & 0x1:
        raise Rejected(f"the zip entry {shown} is encrypted; password-protected zips cannot be graded")
    file_type = stat.S_IFMT(info.external_attr >> 16)
    if file_type == stat.S_IFLNK:
        raise Rejected(f"the zip entry {shown} is a symbolic link; only regular files are accepted")
    # Zips made on Windows leave the Unix type bits at zero, which means a plain file.
    if file_type not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise Rejected(f"the zip entry {shown} is a device, pipe or socket, not a regular file")
    is_folder = file_type == stat.S_IFDIR or info.filename.endswith(("/", "\\"))
    return stat.S_IFDIR if is_folder else stat.S_IFREG


def _check_ratio(name: str, size: int, compressed_size: int, limits: IngestLimits) -> None:
    if size >= _RATIO_CHECK_FROM_BYTES and size > limits.max_compression_ratio * max(compressed_size, 1):
        ratio = size / max(compressed_size, 1)
        raise Rejected(
            f"{_show(name)} is compressed {ratio:.0f}:1, far more than real files are "
            f"(limit {limits.max_compression_ratio:.0f}:1); this looks like a zip bomb"
        )


# --- folder ----------------------------------------------------------------------------------


def _copy_folder(source: Path, out: Path, limits: IngestLimits, notes: list[str]) -> None:
    base = source.resolve()
    budget = _Budget(limits)
    ignored: dict[str, int] = {}
    # An explicit stack rather than os.walk: it never follows links, and it stops as soon as
    # a limit is crossed instead of listing a huge tree first. Every entry listed counts
    # against `max_entries`, folders and ignored names included, as it is read from the
    # directory, so a folder of a million subfolders stops after the limit.
    pending = [PurePosixPath()]
    listed = 0
    while pending:
        relative_dir = pending.pop()
        entries = []
        try:
            with os.scandir(source.joinpath(*relative_dir.parts)) as listing:
                for entry in listing:
                    listed += 1
                    if listed > limits.max_entries:
                        raise Rejected(_too_many_entries(
                            f"the folder holds more than {limits.max_entries:,} entries", limits))
                    entries.append(entry)
        except OSError as error:
            raise Rejected(f"cannot list {_show(relative_dir.as_posix())}: {error.strerror}") from None
        entries.sort(key=lambda entry: entry.name)
        for entry in entries:
            relative = relative_dir / entry.name
            shown = relative.as_posix()
            if entry.name in IGNORED_NAMES:
                ignored[entry.name] = ignored.get(entry.name, 0) + 1
                continue
            if entry.is_symlink():
                try:
                    target = Path(entry.path).resolve()
                except (OSError, RuntimeError):  # a loop of links
                    notes.append(f"skipped {_show(shown)}: a link that leads nowhere")
                    continue
                if not target.is_relative_to(base):
                    raise Rejected(f"{_show(shown)} is a link to a place outside the submission folder")
                if not target.is_file():
                    notes.append(f"skipped {_show(shown)}: a link to something other than a file")
                    continue
                file_path = target
            elif entry.is_dir(follow_symlinks=False):
                pending.append(relative)
                continue
            elif entry.is_file(follow_symlinks=False):
                file_path = Path(entry.path)
            else:
                notes.append(f"skipped {_show(shown)}: not a regular file")
                continue
            try:
                src = _open_regular_file(file_path)
            except _NotRegular:
                notes.append(f"skipped {_show(shown)}: not a regular file")
                continue
            with src:
                budget.count_file(shown)
                _copy_stream(src, out.joinpath(*relative.parts), shown, limits, budget)
    if budget.files == 0:
        raise Rejected("the folder holds no files")
    if ignored:
        notes.append("ignored system files: " + ", ".join(f"{name} ({count})" for name, count in sorted(ignored.items())))


class _NotRegular(Exception):
    pass


def _open_regular_file(path: Path) -> BinaryIO:
    # O_NONBLOCK keeps a fifo from blocking the open; O_NOFOLLOW refuses a file swapped for a
    # link after it was listed. The type is then checked on the open descriptor itself.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise Rejected(f"cannot read {_show(path.name)}: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _NotRegular(path)
    return os.fdopen(fd, "rb")


# --- copying under limits --------------------------------------------------------------------


class _Budget:
    """Counts files and bytes actually written, whatever the input declared."""

    def __init__(self, limits: IngestLimits):
        self.limits = limits
        self.files = 0
        self.bytes = 0

    def count_file(self, shown: str) -> None:
        self.files += 1
        if self.files > self.limits.max_files:
            raise Rejected(f"the submission holds more than {self.limits.max_files} files (reached at {_show(shown)})")

    def count_bytes(self, shown: str, written_to_file: int, more: int) -> None:
        if written_to_file + more > self.limits.max_file_bytes:
            raise Rejected(f"{_show(shown)} is larger than the limit per file, {_size(self.limits.max_file_bytes)}")
        self.bytes += more
        if self.bytes > self.limits.max_total_bytes:
            raise Rejected(f"the submission is larger than the limit of {_size(self.limits.max_total_bytes)} in all")


def _copy_stream(src: BinaryIO, target: Path, shown: str, limits: IngestLimits, budget: _Budget,
                 *, compressed_size: int | None = None) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        out = target.open("xb")
    except OSError as error:
        raise Rejected(f"cannot store {_show(shown)}: {error.strerror}") from None
    with out:
        written = 0
        while chunk := src.read(_COPY_CHUNK):
            budget.count_bytes(shown, written, len(chunk))
            written += len(chunk)
            if compressed_size is not None:
                _check_ratio(shown, written, compressed_size, limits)
            out.write(chunk)


# --- finding the modules ---------------------------------------------------------------------


def _locate(raw: Path, notes: list[str], layout: SubmissionLayout) -> tuple[Path | None, PurePosixPath | None]:
    """The folder holding the modules, or the one notebook to read when there are no modules
    (with the folder of a questions file handed in beside it, or None).

    The shallowest folder holding module files wins; two at the same depth (say `v1/` and
    `v2/`) are ambiguous and rejected rather than guessed between.
    """
    files = [PurePosixPath(p.relative_to(raw).as_posix()) for p in raw.rglob("*") if p.is_file()]
    notebooks = sorted(p for p in files if p.suffix.lower() == ".ipynb")
    module_dirs = {p.parent for p in files if p.name in layout.expected_files}
    if len(notebooks) == 1 and {p.name for p in files if p.name in layout.expected_files} == {layout.answers_file}:
        # A notebook and the questions file but no module file: the notebook holds the code, and a
        # questions file in its own folder is read with it (the notebook's answers fill its gaps).
        notebook = notebooks[0]
        elsewhere = sorted(module_dirs - {notebook.parent})
        if elsewhere:
            notes.append(f"{layout.answers_file} in {', '.join(_folder(f) for f in elsewhere)} is not read: only the one "
                         f"beside the notebook ({_folder(notebook.parent)}) is")
        return (raw.joinpath(*notebook.parent.parts) if notebook.parent in module_dirs else None), notebook
    if module_dirs:
        shallowest = min(len(folder.parts) for folder in module_dirs)
        candidates = sorted(folder for folder in module_dirs if len(folder.parts) == shallowest)
        if len(candidates) > 1:
            raise Rejected(
                f"module files are in {len(candidates)} different folders "
                f"({', '.join(_folder(c) for c in candidates)}); the grader cannot tell which to grade"
            )
        chosen = candidates[0]
        if chosen.parts:
            notes.append(f"modules found in {_folder(chosen)}")
        others = sorted(module_dirs - {chosen})
        if others:
            notes.append(f"module files in {', '.join(_folder(o) for o in others)} are not graded; those in {_folder(chosen)} are")
        if notebooks:
            shown = ", ".join(_show(n.as_posix()) for n in notebooks[:5])
            verb = "is" if len(notebooks) == 1 else "are"
            notes.append(f"notebook {shown} {verb} not read: the module files are graded")
        return raw.joinpath(*chosen.parts), None
    if len(notebooks) == 1:
        return None, notebooks[0]
    if notebooks:
        shown = ", ".join(_show(n.as_posix()) for n in notebooks[:5])
        raise Rejected(f"found {len(notebooks)} notebooks ({shown}) and no module files; hand in one notebook or the module files")
    found = ", ".join(_show(p.as_posix()) for p in sorted(files)[:10])
    archives = [p for p in files if p.suffix.lower() == ".zip"]
    if archives:
        raise Rejected(f"the submission holds another zip ({', '.join(_show(p.as_posix()) for p in archives[:3])}) and "
                       "none of the module files: hand in the files themselves (a zip of the folder, not of a zip)")
    raise Rejected(f"found none of the module files ({', '.join(layout.expected_files)}) and no notebook; "
                   f"the submission holds: {found}")


def _modules_from_notebook(notebook: Path, answers_dir: Path | None, out: Path, notes: list[str],
                           layout: SubmissionLayout) -> tuple[Path, dict[str, str], dict]:
    """Write the notebook's modules and questions file into `out`: (out, missing reasons, origin)."""
    # Imported here because notebook.py imports the layout from this file.
    from .notebook import extract_notebook

    extraction = extract_notebook(notebook, out, layout=layout)
    if not extraction.modules and not extraction.answers:
        expected = ", ".join(name for names in layout.module_names.values() for name in names)
        raise Rejected(f"the notebook {_show(notebook.name)} defines none of the graded names ({expected})")
    notes.extend(extraction.notes)
    answer_cells = _write_notebook_answers(extraction.answers, extraction.answer_cells, answers_dir, out, notes, layout)
    missing_reasons = {
        module: "; ".join(extraction.not_read[name] for name in names if name in extraction.not_read)
        or (f"the notebook {_show(notebook.name)} defines none of {module}'s names "
            f"({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
        for module, names in layout.module_names.items() if module not in extraction.modules
    }
    origin = {
        "notebook": notebook.name,
        "definitions": [{"name": name, "cell": cell, "module": module}
                        for name, cell, module in extraction.definition_cells],
        "answers": [{"key": key, "cell": cell} for key, cell in answer_cells.items()],
    }
    return out, missing_reasons, origin


def _write_notebook_answers(from_notebook: dict[str, dict[str, str]], cells: dict[str, int],
                            answers_dir: Path | None, out: Path, notes: list[str], layout: SubmissionLayout
                            ) -> dict[str, int]:
    """Write the questions file into `out` from the notebook's answer cells and the
    file handed in beside the notebook. Where both answer a question, the file wins (it is the
    documented one) and a note says so. Returns the notebook cell of each answer used."""
    answers_file = layout.answers_file
    if answers_file is None:
        return {}
    handed_in = answers_dir / answers_file if answers_dir is not None else None
    if handed_in is None or not handed_in.is_file():
        if not from_notebook:
            example = max(layout.answer_headings, key=len, default="")
            notes.append(f"{answers_file}: the notebook answers no question (no markdown cell is headed with a "
                         f"question's id, e.g. '## {example}'; the template's {answers_file} says how)")
            return {}
        (out / answers_file).write_text(answers_toml_text(from_notebook), encoding="utf-8")
        return dict(cells)
    try:
        if handed_in.stat().st_size > MAX_ANSWERS_BYTES:
            raise ValueError(f"it is over {MAX_ANSWERS_BYTES // 1024} KiB")
        file_answers = parse_answers(answers_text(handed_in.read_bytes()), answers_file)
    except ValueError as error:
        # The file is graded as the student handed it in: the answers part says it is unreadable.
        notes.append(f"{answers_file} beside the notebook cannot be read ({_show(str(error), 120)}); "
                     "the notebook's answers are not used")
        shutil.copyfile(handed_in, out / answers_file)
        return {}
    merged: dict[str, dict[str, str]] = {}
    used_cells: dict[str, int] = {}
    in_both = []
    for section, answers in from_notebook.items():
        given = file_answers.get(section) if isinstance(file_answers.get(section), dict) else {}
        for key, answer in answers.items():
            if given.get(key) not in ("", None):
                if answer:
                    in_both.append(f"{key} (cell {cells[key]})")
                continue
            merged.setdefault(section, {})[key] = answer
            used_cells[key] = cells[key]
    for section, answers in file_answers.items():
        if isinstance(answers, dict):
            for key, answer in answers.items():
                if answer not in ("", None) and isinstance(answer, (str, int, float)) and not isinstance(answer, bool):
                    merged.setdefault(section, {})[key] = answer
    if in_both:
        notes.insert(0, f"answered in both {answers_file} and the notebook: {', '.join(in_both)}; "
                        f"the {answers_file} answers are graded")
    notes.append(f"{answers_file}: the file handed in beside the notebook is read; the notebook's answers fill its gaps")
    (out / answers_file).write_text(answers_toml_text(merged), encoding="utf-8")
    return used_cells


def answers_toml_text(answers: dict[str, dict]) -> str:
    """A questions file's text for {section: {key: str or number}}, however hostile the strings are.

    Keys come from the layout's answer headings or a parsed TOML file; values are written as TOML basic
    strings, every character TOML forbids raw escaped (JSON's escapes are TOML's, but not for
    DEL, which TOML also wants escaped, nor for lone surrogates, which TOML cannot hold)."""
    lines = ["# Written by the grader from a notebook hand-in."]
    for section, entries in answers.items():
        lines.append(f"\n[{_toml_string(section)}]")
        for key, value in entries.items():
            # Python writes numbers as TOML does (repr gives inf and nan for those floats).
            shown = _toml_string(value) if isinstance(value, str) else repr(value)
            lines.append(f"{_toml_string(key)} = {shown}")
    return "\n".join(lines) + "\n"


def _toml_string(text: str) -> str:
    text = text.encode("utf-8", "replace").decode("utf-8")
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _near_miss_notes(missing: list[str], raw: Path, layout: SubmissionLayout) -> list[str]:
    """Point at `Model.py` or `model (1).py` when `model.py` is missing."""
    names = sorted({p.name for p in raw.rglob("*") if p.is_file()} - set(layout.expected_files))
    notes = []
    for expected in missing:
        close = difflib.get_close_matches(expected.lower(), [n.lower() for n in names], n=1, cutoff=0.75)
        if close:
            original = next(n for n in names if n.lower() == close[0])
            notes.append(f"{expected} is missing, but {_show(original)} was found; file names must match exactly")
    return notes


# --- hashing and display ---------------------------------------------------------------------


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _hash_tree(root: Path) -> str:
    """A hash of the copied files' sorted relative paths and contents."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*"), key=lambda p: p.relative_to(root).as_posix()):
        if path.is_file():
            # Lengths make the encoding unambiguous: no two trees hash the same input stream.
            name = path.relative_to(root).as_posix().encode("utf-8", "surrogateescape")
            digest.update(len(name).to_bytes(8, "big") + name)
            digest.update(path.stat().st_size.to_bytes(8, "big"))
            with path.open("rb") as f:
                while chunk := f.read(_COPY_CHUNK):
                    digest.update(chunk)
    return digest.hexdigest()


def _show(name: str, limit: int = 80) -> str:
    """A name from the submission, safe to put in a message: quoted, escaped and short."""
    text = ascii(name)[1:-1] if not name.isprintable() else name
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _folder(path: PurePosixPath) -> str:
    return f"{path.as_posix()}/" if path.parts else "the top level"


def _size(size: int) -> str:
    return f"{size / MiB:.1f} MiB" if size >= MiB else f"{size / 1024:.1f} KiB"
