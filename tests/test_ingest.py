"""Ingestion of hand-ins: well-formed ones are accepted, hostile or broken ones rejected with a reason."""

from __future__ import annotations

import hashlib
import os
import stat
import struct
import zipfile
from pathlib import Path

import nbformat
import pytest

from graders import ingest as intake
from graders.ingest import IngestLimits, Rejected
from tests.course import EXPECTED_FILES, HOMEWORK, MODULE_NAMES


def ingest(source, dest, **kwargs):
    """A hand-in of the suite's HOMEWORK, whose EXPECTED_FILES and MODULE_NAMES the tests name."""
    return intake.ingest(source, dest, assignment=HOMEWORK, **kwargs)

MiB = 1024 * 1024


def module_files(prefix: str = "") -> dict[str, bytes]:
    return {f"{prefix}{name}": f"# {name}\n".encode() for name in EXPECTED_FILES}


def make_zip(path: Path, entries: dict[str, bytes] | list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    items = entries.items() if isinstance(entries, dict) else entries
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in items:
            zf.writestr(name, data)
    return path


def patch_only_entry(data: bytes, *, flag_bits: int | None = None, file_size: int | None = None) -> bytes:
    """Rewrite header fields of a one-entry zip, which zipfile will not write itself."""
    patched = bytearray(data)
    central = patched.rfind(b"PK\x01\x02")  # the central directory follows the data
    if flag_bits is not None:
        struct.pack_into("<H", patched, 6, flag_bits)  # local header
        struct.pack_into("<H", patched, central + 8, flag_bits)
    if file_size is not None:
        struct.pack_into("<I", patched, 22, file_size)
        struct.pack_into("<I", patched, central + 24, file_size)
    return bytes(patched)


def rejection(source: Path, dest: Path, **kwargs) -> str:
    with pytest.raises(Rejected) as caught:
        ingest(source, dest, **kwargs)
    assert caught.value.reason == str(caught.value)
    # Whatever was unpacked before the rejection is gone.
    assert not dest.exists() or not any(dest.iterdir())
    return caught.value.reason


def simple_notebook(path: Path) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import torch"),
        nbformat.v4.new_code_cell("def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):\n    return q, k"),
    ]
    nbformat.write(notebook, path)
    return path


@pytest.fixture(scope="module")
def zeros_bomb(tmp_path_factory) -> bytes:
    """64 MiB of zeros deflated to about 64 KiB."""
    path = tmp_path_factory.mktemp("bomb") / "bomb.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("attention.py", "w", force_zip64=True) as entry:
            for _ in range(64):
                entry.write(bytes(MiB))
    return path.read_bytes()


# --- accepted layouts ------------------------------------------------------------------------


def test_flat_zip_is_accepted(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files())
    result = ingest(source, tmp_path / "out")
    assert result.kind == "zip"
    assert result.root == tmp_path / "out" / "submission"
    assert result.files == sorted(EXPECTED_FILES)
    assert result.missing == []
    assert result.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert (result.root / "attention.py").read_text() == "# attention.py\n"


def test_modules_inside_one_top_folder_are_found(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files("hw4/"))
    result = ingest(source, tmp_path / "out")
    assert result.root == tmp_path / "out" / "submission" / "hw4"
    assert result.missing == []
    assert "modules found in hw4/" in result.notes


def test_windows_backslash_separators_are_folders(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files("hw4\\"))
    result = ingest(source, tmp_path / "out")
    assert result.root.name == "hw4"
    assert result.missing == []


def test_two_top_folders_with_modules_are_ambiguous(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files("v1/") | module_files("v2/"))
    reason = rejection(source, tmp_path / "out")
    assert "2 different folders (v1/, v2/)" in reason
    assert "cannot tell which to grade" in reason


def test_a_second_top_folder_without_modules_is_ignored(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files("code/") | {"report/report.pdf": b"%PDF"})
    result = ingest(source, tmp_path / "out")
    assert result.root.name == "code"
    assert result.missing == []


def test_modules_at_the_top_win_over_a_nested_copy(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files() | {"old/attention.py": b"# old\n"})
    result = ingest(source, tmp_path / "out")
    assert result.root == tmp_path / "out" / "submission"
    assert "module files in old/ are not graded; those in the top level are" in result.notes


def test_missing_module_is_recorded_not_rejected(tmp_path):
    files = module_files()
    del files["sentiment.py"], files["attention.py"]
    files["Attention.py"] = b"# wrong case\n"
    result = ingest(make_zip(tmp_path / "sub.zip", files), tmp_path / "out")
    assert result.missing == ["attention.py", "sentiment.py"]
    assert "attention.py is missing, but 'Attention.py' was found; file names must match exactly" in result.notes


def test_system_junk_is_ignored(tmp_path):
    junk = {
        "__MACOSX/hw4/._attention.py": b"\0\5\26\7",
        "hw4/.DS_Store": b"\0\0\0\1Bud1",
        "hw4/__pycache__/attention.cpython-311.pyc": b"\xa7\r\r\n",
        "hw4/.ipynb_checkpoints/attention-checkpoint.py": b"# stale\n",
    }
    result = ingest(make_zip(tmp_path / "sub.zip", module_files("hw4/") | junk), tmp_path / "out")
    assert result.root.name == "hw4"
    assert result.files == sorted(EXPECTED_FILES)
    assert not (tmp_path / "out" / "submission" / "__MACOSX").exists()
    assert any(note.startswith("ignored system files: ") and "__MACOSX (1)" in note for note in result.notes)


# --- hostile entries -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("../evil.py", "points outside the folder"),
        ("hw4/../../evil.py", "points outside the folder"),
        ("..\\evil.py", "points outside the folder"),
        ("/tmp/evil.py", "has an absolute path"),
        ("\\evil.py", "has an absolute path"),
        ("C:/evil.py", "starts with a drive letter"),
        ("c:evil.py", "starts with a drive letter"),
        ("evil\n.py", "has control characters in its name"),
    ],
)
def test_entries_that_escape_the_folder_are_rejected(tmp_path, name, expected):
    source = make_zip(tmp_path / "sub.zip", module_files() | {name: b"import os\n"})
    reason = rejection(source, tmp_path / "out")
    assert expected in reason
    assert not (tmp_path / "evil.py").exists()


@pytest.mark.parametrize(
    ("file_type", "expected"),
    [
        (stat.S_IFLNK, "is a symbolic link"),
        (stat.S_IFCHR, "is a device, pipe or socket"),
        (stat.S_IFBLK, "is a device, pipe or socket"),
        (stat.S_IFIFO, "is a device, pipe or socket"),
    ],
)
def test_links_and_special_files_are_rejected(tmp_path, file_type, expected):
    info = zipfile.ZipInfo("attention.py")
    info.create_system = 3  # Unix, whose mode bits sit in the top half of external_attr
    info.external_attr = (file_type | 0o777) << 16
    source = make_zip(tmp_path / "sub.zip", [(info, b"/etc/passwd")])
    assert expected in rejection(source, tmp_path / "out")


def test_encrypted_entry_is_rejected(tmp_path):
    plain = make_zip(tmp_path / "plain.zip", {"attention.py": b"x = 1\n"}).read_bytes()
    source = tmp_path / "sub.zip"
    source.write_bytes(patch_only_entry(plain, flag_bits=0x1))
    assert "'attention.py' is encrypted" in rejection(source, tmp_path / "out")


@pytest.mark.filterwarnings("ignore:Duplicate name")
def test_duplicate_entries_are_rejected(tmp_path):
    source = make_zip(tmp_path / "sub.zip", [("attention.py", b"a = 1\n"), ("attention.py", b"a = 2\n")])
    assert "two entries named 'attention.py'" in rejection(source, tmp_path / "out")


def test_a_name_used_as_file_and_folder_is_rejected(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files() | {"notes": b"x", "notes/a.txt": b"y"})
    assert "'notes' both as a file and as a folder" in rejection(source, tmp_path / "out")


# --- sizes, counts and bombs -----------------------------------------------------------------


def test_zip_bomb_is_rejected_before_unpacking(tmp_path, zeros_bomb):
    source = tmp_path / "sub.zip"
    source.write_bytes(zeros_bomb)
    assert len(zeros_bomb) < MiB
    reason = rejection(source, tmp_path / "out")
    assert "'attention.py' unpacks to 64.0 MiB; the limit per file is 10.0 MiB" in reason


def test_zip_bomb_with_a_lying_size_is_stopped_while_reading(tmp_path, zeros_bomb):
    source = tmp_path / "sub.zip"
    source.write_bytes(patch_only_entry(zeros_bomb, file_size=1000))
    with zipfile.ZipFile(source) as zf:
        assert zf.getinfo("attention.py").file_size == 1000  # the lie is what zipfile sees
    reason = rejection(source, tmp_path / "out")
    assert reason.startswith("the zip file is damaged: 'attention.py'")


def test_extreme_compression_ratio_is_rejected(tmp_path):
    source = make_zip(tmp_path / "sub.zip", {"attention.py": bytes(2 * MiB)})
    reason = rejection(source, tmp_path / "out")
    assert "'attention.py' is compressed" in reason and "looks like a zip bomb" in reason


def test_too_many_files_are_rejected(tmp_path):
    files = module_files() | {f"data/{index}.txt": b"x" for index in range(200)}
    reason = rejection(make_zip(tmp_path / "sub.zip", files), tmp_path / "out")
    assert reason == "the zip holds 205 files; the limit is 200"


def with_end_record(data: bytes, *, entries: int | None = None, zip64: bool = False,
                    comment: bytes = b"") -> bytes:
    """Rewrite a zip's end-of-central-directory record, declaring `entries` (default: the true
    count), as a plain record or as zip64 records followed by a plain one of 0xFFFF fields."""
    eocd = data.rfind(b"PK\x05\x06")
    _, _, _, _, count, dir_size, dir_offset, _ = struct.unpack_from("<4s4H2LH", data, eocd)
    entries = count if entries is None else entries
    body = data[:eocd]
    if not zip64:
        return body + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, entries, entries, dir_size, dir_offset,
                                  len(comment)) + comment
    record = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, entries, entries, dir_size, dir_offset)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, len(body), 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, len(comment))
    return body + record + locator + end + comment


def refuse_zipfile(monkeypatch):
    """Make any parse of the central directory by zipfile fail the test."""
    def parse(*args, **kwargs):
        raise AssertionError("zipfile was asked to parse the archive")
    monkeypatch.setattr("graders.ingest.zipfile.ZipFile", parse)


def test_folder_entries_count_against_the_entry_limit(tmp_path):
    # Folder entries are never extracted, so only the entry limit can stop a zip made of them.
    path = tmp_path / "sub.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in module_files("hw4/").items():
            zf.writestr(name, data)
        for index in range(2_000):
            zf.writestr(f"hw4/empty/{index}/", b"")
    reason = rejection(path, tmp_path / "out", limits=IngestLimits(max_entries=1_000))
    assert reason.startswith("the zip declares 2,005 entries (files and folders together); the limit is 1,000.")
    assert ingest(path, tmp_path / "ok", limits=IngestLimits(max_entries=2_007)).missing == []


@pytest.mark.parametrize("zip64", [False, True], ids=["plain", "zip64"])
def test_a_declared_entry_count_over_the_limit_is_refused_unparsed(tmp_path, monkeypatch, zip64):
    # 950,000 folder entries fit in 50 MiB; zipfile spent 12 s and 700 MB on them. The
    # declared count alone refuses them: the directory it describes is not even there.
    whole = make_zip(tmp_path / "whole.zip", module_files()).read_bytes()
    declared = 950_000 if zip64 else 0xFFFF
    source = tmp_path / "sub.zip"
    source.write_bytes(with_end_record(whole, entries=declared, zip64=zip64))
    refuse_zipfile(monkeypatch)
    reason = rejection(source, tmp_path / "out")
    assert reason.startswith(f"the zip declares {declared:,} entries (files and folders together); the limit is 10,000.")


def test_an_understated_entry_count_is_caught_walking_the_directory(tmp_path, monkeypatch):
    path = make_zip(tmp_path / "whole.zip", module_files() | {f"d{index}/": b"" for index in range(40)})
    source = tmp_path / "sub.zip"
    source.write_bytes(with_end_record(path.read_bytes(), entries=1))
    refuse_zipfile(monkeypatch)
    reason = rejection(source, tmp_path / "out", limits=IngestLimits(max_entries=30))
    assert reason.startswith("the zip holds more than 30 entries (files and folders together)")


@pytest.mark.parametrize("zip64", [False, True], ids=["plain", "zip64"])
def test_true_end_records_and_a_comment_are_read_as_zipfile_reads_them(tmp_path, zip64):
    path = make_zip(tmp_path / "whole.zip", module_files("hw4/") | {"hw4/": b""})
    source = tmp_path / "sub.zip"
    source.write_bytes(with_end_record(path.read_bytes(), zip64=zip64, comment=b"made by hand"))
    with zipfile.ZipFile(source) as zf:
        assert zf.comment == b"made by hand" and len(zf.infolist()) == 6
    limits = IngestLimits(max_entries=6)
    assert ingest(source, tmp_path / "out", limits=limits).missing == []


def test_total_size_is_capped(tmp_path):
    source = make_zip(tmp_path / "sub.zip", {"attention.py": b"# a\n" * 15_000, "bert.py": b"# b\n" * 15_000})
    limits = IngestLimits(max_total_bytes=100_000)
    assert source.stat().st_size < limits.max_total_bytes
    assert rejection(source, tmp_path / "out", limits=limits) == "the zip unpacks to 117.2 KiB; the limit is 97.7 KiB"


def test_an_oversized_zip_is_rejected_unopened(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files())
    reason = rejection(source, tmp_path / "out", limits=IngestLimits(max_total_bytes=100))
    assert reason.startswith("the file is ") and reason.endswith(" KiB; submissions are limited to 0.1 KiB")


# --- unreadable zips -------------------------------------------------------------------------


def test_not_a_zip_is_rejected(tmp_path):
    source = tmp_path / "sub.zip"
    source.write_text("def scaled_dot_product(): pass\n")
    assert rejection(source, tmp_path / "out") == "the file is not a zip archive (nor a folder or a .ipynb notebook)"


def test_truncated_zip_is_rejected(tmp_path):
    whole = make_zip(tmp_path / "whole.zip", module_files()).read_bytes()
    source = tmp_path / "sub.zip"
    source.write_bytes(whole[: len(whole) // 2])
    assert rejection(source, tmp_path / "out").startswith("the zip file is damaged or truncated")


def test_empty_zip_is_rejected(tmp_path):
    source = make_zip(tmp_path / "sub.zip", {})
    assert rejection(source, tmp_path / "out") == "the zip file is empty"


def test_zip_of_only_junk_is_rejected(tmp_path):
    source = make_zip(tmp_path / "sub.zip", {"hw4/": b"", "__MACOSX/hw4/._x": b"junk"})
    assert "holds no files" in rejection(source, tmp_path / "out")


def test_zip_without_modules_or_notebook_is_rejected(tmp_path):
    source = make_zip(tmp_path / "sub.zip", {"report.pdf": b"%PDF"})
    reason = rejection(source, tmp_path / "out")
    assert reason.startswith("found none of the module files (attention.py,")
    assert "'report.pdf'" in reason


def test_missing_source_is_rejected(tmp_path):
    assert "does not exist" in rejection(tmp_path / "nothing.zip", tmp_path / "out")


def test_destination_must_be_empty(tmp_path):
    source = make_zip(tmp_path / "sub.zip", module_files())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old").write_text("previous run")
    with pytest.raises(ValueError):
        ingest(source, tmp_path / "out")


# --- folders ---------------------------------------------------------------------------------


def write_folder(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


def test_folder_is_copied_and_hashed(tmp_path):
    folder = write_folder(tmp_path / "hw4", module_files())
    first = ingest(folder, tmp_path / "out1")
    assert first.kind == "folder"
    assert first.missing == []
    assert first.root == tmp_path / "out1" / "submission"

    (folder / ".DS_Store").write_bytes(b"junk")
    assert ingest(folder, tmp_path / "out2").sha256 == first.sha256
    (folder / "bert.py").write_text("# changed\n")
    assert ingest(folder, tmp_path / "out3").sha256 != first.sha256


def test_folder_link_outside_is_rejected(tmp_path):
    folder = write_folder(tmp_path / "hw4", module_files())
    (tmp_path / "secret.txt").write_text("hidden labels")
    (folder / "data.txt").symlink_to(tmp_path / "secret.txt")
    assert rejection(folder, tmp_path / "out") == "'data.txt' is a link to a place outside the submission folder"


def test_folder_link_inside_is_copied_as_a_file(tmp_path):
    files = module_files()
    del files["attention.py"]
    folder = write_folder(tmp_path / "hw4", files | {"src/attention.py": b"x = 1\n"})
    (folder / "attention.py").symlink_to(folder / "src" / "attention.py")
    result = ingest(folder, tmp_path / "out")
    copied = result.root / "attention.py"
    assert not copied.is_symlink() and copied.read_text() == "x = 1\n"


def test_folder_fifo_is_skipped(tmp_path):
    folder = write_folder(tmp_path / "hw4", module_files())
    os.mkfifo(folder / "pipe")
    result = ingest(folder, tmp_path / "out")
    assert "skipped 'pipe': not a regular file" in result.notes


def test_folder_file_over_the_limit_is_stopped_while_copying(tmp_path):
    folder = write_folder(tmp_path / "hw4", module_files() | {"big.bin": bytes(5000)})
    reason = rejection(folder, tmp_path / "out", limits=IngestLimits(max_file_bytes=4096))
    assert reason.startswith("'big.bin' is larger than the limit per file")


def test_folder_with_too_many_files_is_rejected(tmp_path):
    folder = write_folder(tmp_path / "hw4", module_files())
    reason = rejection(folder, tmp_path / "out", limits=IngestLimits(max_files=3))
    assert reason.startswith("the submission holds more than 3 files")


def test_a_folder_of_many_folders_is_refused_while_listing(tmp_path):
    folder = write_folder(tmp_path / "hw4", module_files())
    for index in range(60):
        (folder / "data" / str(index)).mkdir(parents=True)
    reason = rejection(folder, tmp_path / "out", limits=IngestLimits(max_entries=50))
    assert reason.startswith("the folder holds more than 50 entries (files and folders together); the limit is 50.")
    assert ingest(folder, tmp_path / "ok", limits=IngestLimits(max_entries=68)).missing == []


def test_empty_folder_is_rejected(tmp_path):
    (tmp_path / "hw4").mkdir()
    assert rejection(tmp_path / "hw4", tmp_path / "out") == "the folder holds no files"


# --- notebooks -------------------------------------------------------------------------------


def test_zip_with_one_notebook_is_a_notebook_submission(tmp_path):
    notebook = simple_notebook(tmp_path / "hw.ipynb").read_bytes()
    source = make_zip(tmp_path / "sub.zip", {"hw4/hw.ipynb": notebook, "__MACOSX/hw4/._hw.ipynb": b"x"})
    result = ingest(source, tmp_path / "out")
    assert result.kind == "notebook"
    assert result.root == tmp_path / "out" / "from_notebook"
    assert result.files == ["attention.py"]
    assert result.missing == [name for name in EXPECTED_FILES if name != "attention.py"]
    assert "scaled_dot_product: cell 2 -> attention.py" in result.notes
    assert result.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()


def test_notebook_file_is_a_notebook_submission(tmp_path):
    source = simple_notebook(tmp_path / "hw.ipynb")
    result = ingest(source, tmp_path / "out")
    assert result.kind == "notebook"
    assert result.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert any(note.startswith("answers.toml: the notebook answers no question") for note in result.notes)


def test_folder_with_one_notebook_is_a_notebook_submission(tmp_path):
    folder = tmp_path / "hw4"
    folder.mkdir()
    simple_notebook(folder / "hw.ipynb")
    assert ingest(folder, tmp_path / "out").kind == "notebook"


def test_two_notebooks_without_modules_are_rejected(tmp_path):
    notebook = simple_notebook(tmp_path / "hw.ipynb").read_bytes()
    source = make_zip(tmp_path / "sub.zip", {"part1.ipynb": notebook, "part2.ipynb": notebook})
    reason = rejection(source, tmp_path / "out")
    assert reason.startswith("found 2 notebooks ('part1.ipynb', 'part2.ipynb') and no module files")


def test_modules_are_graded_over_a_notebook(tmp_path):
    notebook = simple_notebook(tmp_path / "hw.ipynb").read_bytes()
    result = ingest(make_zip(tmp_path / "sub.zip", module_files() | {"hw.ipynb": notebook}), tmp_path / "out")
    assert result.kind == "zip"
    assert "notebook 'hw.ipynb' is not read: the module files are graded" in result.notes


def test_notebook_without_graded_definitions_is_rejected(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell("print('hello')")]
    nbformat.write(notebook, tmp_path / "hw.ipynb")
    reason = rejection(tmp_path / "hw.ipynb", tmp_path / "out")
    assert reason.startswith("the notebook 'hw.ipynb' defines none of the graded names (scaled_dot_product,")


def test_malformed_notebook_is_rejected(tmp_path):
    (tmp_path / "hw.ipynb").write_text('{"cells": [')
    assert rejection(tmp_path / "hw.ipynb", tmp_path / "out").startswith("the notebook cannot be read")


def test_every_graded_name_has_a_module():
    assert set(MODULE_NAMES) == {name for name in EXPECTED_FILES if name.endswith(".py")}
