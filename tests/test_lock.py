"""The locked environment: after `bash setup.sh` the environment is exactly
graders/requirements.lock, the golden answers were recorded with it, and where the running
environment draws other inputs than the golden answers', the self-check and the build say so in
one line with the fix instead of grading or recording against answers for other questions."""

import re
import shutil
import stat
import tomllib

import pytest
from packaging.requirements import Requirement

from graders import lock
from graders.build import REPO_ROOT
from graders.recording import read_manifest
from graders.selfcheck import SelfCheckError, cmd_build, cmd_check, self_check
from tests.course import PACKS, REFERENCE_DIR


def test_this_environment_is_exactly_the_lock():
    found = lock.differences()
    assert not found, "this environment is not graders/requirements.lock (run `bash setup.sh`):\n  " + "\n  ".join(found)


def test_the_lock_holds_every_requirement_of_the_grader_within_its_range():
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pins = lock.read_lock()
    wanted = [*pyproject["dependencies"], *(line for extra in lock.EXTRAS for line in pyproject["optional-dependencies"][extra])]
    for line in wanted:
        requirement = Requirement(line)
        name = lock.canonical(requirement.name)
        assert name in pins, f"{name} is required by pyproject.toml and not locked"
        assert requirement.specifier.contains(pins[name], prereleases=True), (line, pins[name])
    assert set(lock.EXTRAS) == set(pyproject["optional-dependencies"])  # setup.sh installs every extra


@pytest.mark.parametrize("pack", PACKS, ids=lambda pack: pack.name)
def test_each_pack_golden_answers_were_recorded_with_the_lock(pack):
    manifest = read_manifest(pack.golden_dir)
    assert lock.golden_mismatch(manifest, pack.name) is None
    assert manifest["fingerprint"]["versions"]["hypothesis"] == lock.read_lock()["hypothesis"]


def test_a_golden_answer_of_another_version_is_named_with_the_command_that_records_it_again():
    manifest = {"fingerprint": {"versions": {"hypothesis": "6.1.0", "torch": "2.13.0"}}}
    line = lock.golden_mismatch(manifest, "gpt", lock={"hypothesis": "6.170.15", "torch": "2.13.0"})
    assert line == ("the golden answers of gpt were recorded with hypothesis 6.1.0 and the lock says 6.170.15: "
                    "run `grade build --golden --assignment gpt`")


def test_setup_installs_the_lock_and_resolves_nothing_beyond_it():
    setup = (REPO_ROOT / "setup.sh").read_text()
    code = [line.strip() for line in setup.splitlines() if not line.strip().startswith("#")]
    assert [line for line in code if "pip install" in line] == [
        'pip_install() { .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"; }']
    installs = [line for line in code if line.startswith("pip_install ")]
    assert installs == ['pip_install "$(grep -E \'^torch==\' "$LOCK")" \\',
                        'pip_install --no-deps -r "$LOCK"',
                        'pip_install --no-deps --no-build-isolation -e .   # built with the lock\'s setuptools']
    assert "LOCK=graders/requirements.lock" in setup and ".venv/bin/python -m pip check" in setup
    assert re.search(r"^torch==\d+\.\d+\.\d+$", (REPO_ROOT / "graders" / "requirements.lock").read_text(), re.M)


# ---------------------------------------------------------------------------- what differs, said


def test_differences_name_each_missing_other_and_extra_distribution():
    pins = {"hypothesis": "6.170.15", "rich": "15.0.0", "torch": "2.13.0"}
    installed = {"hypothesis": "6.170.17", "torch": "2.13.0+cpu", "ipython": "9.0", "pip": "23.2"}
    assert lock.differences(pins, installed) == ["hypothesis is 6.170.17 (the lock: 6.170.15)",
                                                  "rich is not installed (the lock: 15.0.0)",
                                                  "ipython 9.0 is installed but not in the lock"]
    exact = {"hypothesis": "6.170.15", "rich": "15.0.0", "torch": "2.13.0+cu128", "pip": "25.0"}
    assert lock.differences(pins, exact) == []  # a runner's CUDA build of the locked release is the lock


def test_the_lock_file_is_read_strictly(tmp_path):
    path = tmp_path / "requirements.lock"
    path.write_text("# a comment\nJinja2==3.1.6\ntyping_extensions==4.16.0  # why\n")
    assert lock.read_lock(path) == {"jinja2": "3.1.6", "typing-extensions": "4.16.0"}
    path.write_text("rich>=13\n")
    with pytest.raises(lock.LockError, match="line 1: 'rich>=13' is not `name==version`"):
        lock.read_lock(path)


def test_freeze_keeps_releases_and_leaves_out_pip_and_the_grader(tmp_path):
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nprintf 'Jinja2==3.1.6\\npip==23.2.1\\ntorch==2.13.0+cpu\\n"
                    "transformer_grader==0.1.0\\nsetuptools==84.2.1\\n'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert lock.freeze(fake) == ["jinja2==3.1.6", "setuptools==84.2.1", "torch==2.13.0"]


def test_pins_follow_requirements_with_the_markers_of_other_platforms():
    pins = lock.pins(["huggingface-hub"], ranged=["torch"])
    by_name = {line.split("==")[0]: line for line in pins}
    assert by_name["huggingface-hub"] == f"huggingface-hub=={lock.read_lock()['huggingface-hub']}"
    assert by_name["hf-xet"].startswith(f"hf-xet=={lock.read_lock()['hf-xet']}; platform_machine == ")
    assert "torch" not in by_name


def test_pins_refuse_an_environment_that_is_not_the_lock(monkeypatch):
    real = lock.installed_versions()
    monkeypatch.setattr(lock, "installed_versions", lambda: {**real, "rich": "1.0"})
    with pytest.raises(lock.LockError, match=r"not the lock \(rich 1.0 \(the lock: .*\)\): run `bash setup.sh`"):
        lock.pins(["rich"])


# ---------------------------------------------------------------------------- the one-line refusals


@pytest.fixture
def newer_hypothesis(monkeypatch):
    """This process's environment, as if the package index had given it a newer hypothesis."""
    real = lock.installed_versions()
    monkeypatch.setattr(lock, "installed_versions", lambda: {**real, "hypothesis": "6.999.0"})
    return lock.read_lock()["hypothesis"]


def test_a_self_check_under_another_hypothesis_refuses_with_the_fix(newer_hypothesis, tmp_path, capsys):
    folder = tmp_path / "hw"
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    with pytest.raises(SelfCheckError) as refused:
        self_check(folder, ["attention"])
    assert str(refused.value) == (f"the golden answers were drawn with hypothesis {newer_hypothesis} and this environment "
                                  f"has 6.999.0, which draws other inputs: run `pip install hypothesis=={newer_hypothesis}`, "
                                  "then check again")
    assert cmd_check(["attention", "--path", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"pip install hypothesis=={newer_hypothesis}" in err
    assert not (folder / ".grade").exists()  # nothing graded against answers for other inputs


def test_grade_build_refuses_to_record_or_ship_answers_of_another_environment(newer_hypothesis, capsys):
    assert cmd_build(["--golden"], "bert") == 2
    err = capsys.readouterr().err
    assert err == (f"grade build: hypothesis 6.999.0 is installed and the lock says {newer_hypothesis}: the golden "
                   "answers are the lock's; run `bash setup.sh` to install the lock, or `bash scripts/upgrade-lock.sh` "
                   "to move it\n")
    assert cmd_build(["--bundle"], "bert") == 2


def test_the_lock_check_command_says_whether_this_environment_is_the_lock(capsys, monkeypatch):
    assert lock.main(["check"]) == 0
    assert capsys.readouterr().out.startswith("environment: exactly the lock (")
    real = lock.installed_versions()
    monkeypatch.setattr(lock, "installed_versions", lambda: {**real, "hypothesis": "6.999.0"})
    assert lock.main(["check"]) == 1
    out = capsys.readouterr().out
    assert "hypothesis is 6.999.0 (the lock: " in out and "bash scripts/upgrade-lock.sh" in out


def test_the_upgrade_is_one_script_that_relocks_reinstalls_rerecords_and_tests():
    script = (REPO_ROOT / "scripts" / "upgrade-lock.sh").read_text()
    steps = [line.strip() for line in script.splitlines()
             if line.strip().startswith((".venv/bin/", "bash setup.sh", "rm -rf .venv"))]
    assert steps == ['.venv/bin/python -m graders.lock refresh "${torch_args[@]}"', "rm -rf .venv", "bash setup.sh",
                     ".venv/bin/grade build --golden", ".venv/bin/pytest"]
