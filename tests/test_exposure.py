"""What of the machine a worker sees (graders/sandbox/exposure.py): an allow-list, whatever the
install layout. The attacks on it, in both isolation levels, are in test_container_attacks.py."""

import os
import sys
from pathlib import Path

import pytest

import graders
from graders.sandbox import exposure

ENGINE = Path(graders.__file__).resolve().parent


def distribution(site: Path, name: str, files: list[str]) -> None:
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{file},,\n" for file in [*files, f"{info.name}/RECORD"]))
    for file in files:
        if not file.startswith(".."):
            (site / file).parent.mkdir(parents=True, exist_ok=True)
            (site / file).write_text("")


@pytest.fixture
def layout(tmp_path, monkeypatch):
    """A site folder with a distribution, the grader installed as a wheel (its reference beside
    the engine), a stray folder no distribution lists, and a .pth naming a checkout."""
    site, checkout = tmp_path / "site-packages", tmp_path / "checkout"
    distribution(site, "good", ["good/__init__.py", "good.libs/libgood.so", "../../../bin/good"])
    distribution(site, "transformer_grader", ["graders/__init__.py", "reference/bert/attention.py"])
    (site / "stray").mkdir()
    (site / "stray" / "solution.py").write_text("a copy of the solution")
    for path in (".git/HEAD", "tests/test_x.py", "fixtures/hidden.json", "mypack/__init__.py", "mypack/tasks.py"):
        (checkout / path).parent.mkdir(parents=True, exist_ok=True)
        (checkout / path).write_text("")
    (site / "checkout.pth").write_text(f"# the course's checkout\n{checkout}\nimport os\n")
    monkeypatch.setattr(exposure.site, "getsitepackages", lambda: [str(site)])
    monkeypatch.syspath_prepend(str(checkout))
    exposure.exposure.cache_clear()
    yield site.resolve(), checkout.resolve()
    exposure.exposure.cache_clear()


def test_a_folder_on_the_path_shows_only_its_distributions_and_what_the_worker_imports(layout):
    site, checkout = layout
    seen = exposure.exposure((), ("mypack.tasks", "graders.packs.bert.tasks"))
    for shown in (site / "good" / "__init__.py", site / "good.libs", site / "good-1.0.dist-info" / "RECORD",
                  site / "checkout.pth", checkout / "mypack" / "tasks.py", ENGINE / "sandbox" / "worker.py",
                  ENGINE / "packs" / "bert" / "tasks.py"):
        assert seen.visible(str(shown)), shown
    for absent in (site / "stray" / "solution.py", site / "reference" / "bert" / "attention.py",
                   checkout / ".git" / "HEAD", checkout / "tests" / "test_x.py", checkout / "fixtures",
                   ENGINE / "packs" / "gpt", ENGINE.parent / "reference", ENGINE.parent / ".git", Path("/root")):
        assert not seen.visible(str(absent)), absent
    assert seen.visible(sys.executable) and seen.visible(os.path.realpath(sys.executable))


def test_the_engine_shows_the_packs_of_its_task_modules_only(layout):
    graded = exposure.exposure((), ("graders.packs.causal_lm.tasks",))
    assert graded.visible(str(ENGINE / "packs" / "causal_lm")) and not graded.visible(str(ENGINE / "packs" / "bert"))
    assert not exposure.exposure((), ()).visible(str(ENGINE / "packs" / "bert" / "tasks.py"))


def test_readable_paths_are_shown_whole(layout, tmp_path):
    cache = tmp_path / "cache"
    (cache / "model").mkdir(parents=True)
    assert exposure.exposure((str(cache),), ()).visible(str(cache / "model"))
