"""The sandbox's one walker (graders/sandbox/walk.py): what a worker could write is walked,
counted and removed by descriptor, without recursion and without following a link, and a
folder that cannot be removed is quarantined instead of breaking the next worker."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graders.sandbox import doctor, isolation, uids, walk

pytestmark = pytest.mark.skipif(not walk.DESCRIPTORS, reason="POSIX: folders opened by descriptor")
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
needs_root = pytest.mark.skipif(not AS_ROOT, reason="other uids' files: the grader runs as root")
# Deeper than the recursion limit the tests set, and longer than PATH_MAX.
DEPTH, NAME = 300, "d" * 30
SHALLOW_RECURSION = 150


def chain(top: Path, depth: int = DEPTH, *, every: int = 50, size: int = 8192) -> Path:
    """A chain of `depth` folders below `top` (made by descriptor: its path is longer than
    PATH_MAX), a file of `size` bytes every `every` levels; returns `top`."""
    top.mkdir(parents=True, exist_ok=True)
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for level in range(depth):
            os.mkdir(NAME, dir_fd=fd)
            inner = os.open(NAME, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
            if level % every == 0:
                file = os.open("data", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
                os.write(file, b"x" * size)
                os.close(file)
    finally:
        os.close(fd)
    return top


@pytest.fixture
def shallow_recursion():
    """A recursion limit that a chain of DEPTH folders exceeds, as 1,000 would a deeper one."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(SHALLOW_RECURSION)
    yield
    sys.setrecursionlimit(limit)


def test_a_tree_deeper_than_the_recursion_limit_and_path_max_is_walked_and_removed(tmp_path, shallow_recursion):
    top = chain(tmp_path / "tree")
    assert DEPTH * (len(NAME) + 1) > os.pathconf("/", "PC_PATH_MAX")
    seen = {"folders": 0, "files": 0}

    def visit(folder_fd, name, info, state):
        seen["folders" if name == NAME else "files"] += 1
        return state

    walk.walk(top, visit, True)
    assert seen == {"folders": DEPTH, "files": DEPTH // 50}
    with pytest.raises(RecursionError):  # positive control: what the clean-up used
        shutil.rmtree(top, ignore_errors=True)
    walk.remove(top)
    assert not top.exists()


def test_links_are_removed_never_followed(tmp_path):
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "file").write_text("the grader's")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "to-folder").symlink_to(outside / "keep")
    (tree / "to-file").symlink_to(outside / "keep" / "file")
    entered = []
    walk.walk(tree, lambda fd, name, info, state: entered.append(name) or state, True)
    assert sorted(entered) == ["to-file", "to-folder"]  # seen, not entered
    walk.remove(tree)
    assert not tree.exists() and (outside / "keep" / "file").read_text() == "the grader's"
    link = tmp_path / "link"
    link.symlink_to(outside)
    walk.remove(link)
    assert not link.exists() and outside.is_dir()


def test_a_folder_replaced_while_it_is_walked_fails_the_walk(tmp_path):
    for name in ("a", "b"):
        (tmp_path / "tree" / name / "inner").mkdir(parents=True)
    visited = []

    def replace_the_first(folder_fd, name, info, state):
        """Once both are listed (the first to be entered next), the first becomes a link."""
        visited.append(name)
        if len(visited) == 2:
            first = tmp_path / "tree" / visited[0]
            os.rename(first, tmp_path / "elsewhere")
            first.symlink_to(tmp_path / "elsewhere")
        return "below"

    with pytest.raises(walk.WalkFailed) as failed:
        walk.walk(tmp_path / "tree", replace_the_first, "top")
    assert failed.value.changed


@needs_root
def test_a_folder_the_walk_cannot_read_fails_it(tmp_path):
    closed = tmp_path / "closed"
    (closed / "inside").mkdir(parents=True)
    closed.chmod(0o700)
    tmp_path.chmod(0o755)
    with uids.file_system_identity(65534, 65534):  # not root: no right to override permissions
        with pytest.raises(walk.WalkFailed) as failed:
            walk.walk(tmp_path, lambda fd, name, info, state: state, True)
    assert not failed.value.changed
    walk.walk(tmp_path, lambda fd, name, info, state: state, True)  # positive control: as root


@needs_root
def test_a_folder_that_cannot_be_removed_is_quarantined(tmp_path, monkeypatch):
    parent = tmp_path / "workers"
    stuck = parent / "w-1"
    (stuck / "a" / "b").mkdir(parents=True)
    (stuck / "a" / "b" / "pinned").write_text("")
    if subprocess.run(["chattr", "+i", str(stuck / "a" / "b" / "pinned")], capture_output=True).returncode != 0:
        pytest.skip("no chattr +i on this file system: nothing here resists root")
    try:
        with pytest.warns(RuntimeWarning, match="quarantined"):
            assert walk.discard(stuck) is False
        assert not stuck.exists()  # out of the way of the next worker
        [aside] = walk.quarantined([parent])
        assert Path(aside).name.startswith(walk.QUARANTINED) and os.stat(aside).st_mode & 0o777 == 0
        assert os.stat(aside).st_uid == 0
        monkeypatch.setattr(isolation, "workdirs_parent", lambda: parent)
        reported = doctor._quarantined()
        assert reported.ok is None and aside in reported.detail and "rm -rf" in reported.fix
    finally:
        # (the removal moved it up before it met the file it could not remove)
        subprocess.run(["find", str(parent), "-name", "pinned", "-exec", "chattr", "-i", "{}", "+"], capture_output=True)
    for aside in walk.quarantined([parent]):
        assert walk.discard(aside)
    assert walk.quarantined([parent]) == []


@needs_root
def test_the_sweep_of_a_uid_removes_its_deep_trees_and_nothing_of_others(tmp_path, shallow_recursion):
    uid = 1_970_100_250
    shared = tmp_path / "tmp"
    shared.mkdir(mode=0o1777)
    shared.chmod(0o1777)
    theirs = chain(shared / "left-behind")
    os.lchown(theirs, uid, uid)
    isolation._give(theirs, (uid, uid))
    (shared / "not-theirs").write_text("another user's")
    removed = uids.remove_files_of(uid, folders=[str(shared)])
    assert removed == [str(theirs)] and sorted(os.listdir(shared)) == ["not-theirs"]


def test_space_is_counted_by_blocks_each_file_once_however_deep(tmp_path):
    work = chain(tmp_path / "work", every=100, size=1 << 20)  # 3 files of 1 MiB, below PATH_MAX's reach
    deepest = work / "sparse"
    fd = os.open(deepest, os.O_WRONLY | os.O_CREAT, 0o644)
    os.ftruncate(fd, 1 << 30)  # a length of 1 GiB, no block
    os.close(fd)
    os.link(deepest, work / "again")  # two names, one file
    used, files = isolation.space_used(work, 1_970_100_251, 1_970_100_251, max_files=10_000, pids=[])
    assert 3 << 20 <= used < (3 << 20) + DEPTH * 8192  # the folders' own blocks besides
    assert files == DEPTH + 3 + 1  # the folders, the data files, the sparse file once
    assert isolation.space_used(work, 0, 0, max_files=10, pids=[])[1] == 11  # stops past the limit
