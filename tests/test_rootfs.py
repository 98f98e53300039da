"""The tree a container-isolation worker changes its root to (graders/sandbox/rootfs.py): what
it holds, what it leaves out, and how it follows the machine's files."""

import os
import shutil
import stat
from pathlib import Path

import pytest

from graders.sandbox import rootfs

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                                reason="the tree is made by root (device nodes, owners)")


@pytest.fixture
def machine(tmp_path):
    """A source folder like a Python installation, and the grader's private parent folder."""
    source = tmp_path / "opt" / "python"
    (source / "lib").mkdir(parents=True)
    (source / "lib" / "os.py").write_text("# the standard library\n")
    (source / "lib" / "shared.py").write_text("# others may write this one\n")
    (source / "lib" / "shared.py").chmod(0o666)
    (source / "open").mkdir(mode=0o777)
    (source / "open").chmod(0o1777)
    (source / "secret").mkdir()
    (source / "secret" / "solution.py").write_text("the answer\n")
    (source / "lib" / "link.py").symlink_to("os.py")
    parent = tmp_path / "private"
    parent.mkdir(mode=0o711)
    return source, parent


def prepared(source: Path, parent: Path, excluded=()) -> Path:
    rootfs._brought_up_to_date.clear()  # as a new grading process would
    return rootfs.prepared_root([str(source)], [str(path) for path in excluded], parent)


def inside(root: Path, path: Path) -> Path:
    return root / str(path).lstrip("/")


def test_files_are_the_machines_own_by_hard_link_and_the_secrets_are_absent(machine):
    source, parent = machine
    root = prepared(source, parent, excluded=[source / "secret"])
    linked = inside(root, source / "lib" / "os.py")
    assert os.stat(linked).st_ino == os.stat(source / "lib" / "os.py").st_ino  # no copy
    assert os.readlink(inside(root, source / "lib" / "link.py")) == "os.py"
    assert not inside(root, source / "secret").exists()
    assert sorted(os.listdir(root / "dev")) == ["full", "null", "random", "shm", "urandom", "zero"]
    assert stat.S_ISCHR(os.stat(root / "dev" / "null").st_mode)


def test_nothing_in_the_tree_is_writable_by_the_worker_but_its_own_folder(machine):
    source, parent = machine
    root = prepared(source, parent)
    shared = inside(root, source / "lib" / "shared.py")
    # A link would let the worker change the machine's file: a copy, without the write bits.
    assert os.stat(shared).st_ino != os.stat(source / "lib" / "shared.py").st_ino
    assert stat.S_IMODE(os.stat(shared).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(inside(root, source / "open")).st_mode) == 0o1755
    for folder in (root, root / "tmp", root / "dev" / "shm", *inside(root, source).parents[:-1]):
        if folder.is_relative_to(root):
            assert not os.stat(folder).st_mode & 0o022, folder
    assert stat.S_IMODE(os.stat(root / rootfs.WORKERS).st_mode) == 0o711  # passable, not listable


def test_the_tree_follows_the_machine_from_one_grading_process_to_the_next(machine):
    source, parent = machine
    root = prepared(source, parent, excluded=[source / "secret"])
    (source / "lib" / "new.py").write_text("added\n")
    (source / "lib" / "os.py").unlink()
    (source / "lib" / "os.py").write_text("# replaced: a new inode\n")
    root = prepared(source, parent, excluded=[source / "secret"])
    assert inside(root, source / "lib" / "new.py").read_text() == "added\n"
    assert inside(root, source / "lib" / "os.py").read_text() == "# replaced: a new inode\n"
    (source / "lib" / "new.py").unlink()
    prepared(source, parent, excluded=[source / "secret"])
    assert not inside(root, source / "lib" / "new.py").exists()
    # What one grading process counts a secret, the next may not, and the other way round.
    prepared(source, parent)
    assert inside(root, source / "secret" / "solution.py").read_text() == "the answer\n"
    prepared(source, parent, excluded=[source / "secret" / "solution.py"])
    assert not inside(root, source / "secret" / "solution.py").exists()


def test_one_process_brings_a_tree_up_to_date_once(machine):
    source, parent = machine
    root = prepared(source, parent)
    (source / "lib" / "later.py").write_text("after the first worker\n")
    assert rootfs.prepared_root([str(source)], [], parent) == root
    assert not inside(root, source / "lib" / "later.py").exists()  # a batch pays the walk once


def test_a_worker_sees_its_folder_at_the_path_inside_its_root(tmp_path):
    assert rootfs.inner_path(tmp_path, tmp_path / "w" / "w-1") == Path("/w/w-1")


def test_a_tree_whose_source_is_gone_is_removed_with_its_links(machine, tmp_path):
    source, parent = machine
    other = tmp_path / "venv"
    (other / "lib").mkdir(parents=True)
    (other / "lib" / "big.bin").write_bytes(b"x" * 4096)
    stale = prepared(other, parent)
    kept = prepared(source, parent)
    assert stale != kept and stale.is_dir()
    shutil.rmtree(other)  # its file lives on through the tree's link until the tree goes
    prepared(source, parent)
    assert not stale.exists() and sorted(path.name for path in parent.iterdir() if path.name.startswith(stale.name)) == []
    assert kept.is_dir()
