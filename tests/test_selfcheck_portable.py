"""A self-check runs where students are, not only on Linux: with the Linux-only facilities the
grader itself uses made unavailable to the grader's code (the `fcntl` and `resource` modules,
libc's `prctl` through ctypes, /proc, `os.fork`, `pass_fds`), the POSIX functions Windows lacks
removed for everyone (`select.poll`, `os.writev`, `os.set_blocking`, `os.killpg`, `os.geteuid`),
and multiprocessing set to spawn, it gives the same results as on Linux. torch and the other
libraries keep whatever they import themselves.

The simulation is a module run at interpreter start by a `.pth` file of a virtual environment
(so it is active in the grading process and in its worker, whose environment is scrubbed); the
environment sees this checkout's `graders` and this environment's packages, nothing else.
The same simulation hides a package from everyone: without transformers, the checks that need
it are skipped with the command that installs it and nobody's code is blamed (an instructor's
grade becomes an infrastructure error); without hypothesis, `grade` says what to install.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from pathlib import Path

import pytest

from graders.build import REPO_ROOT
from graders.lock import read_lock
from tests.course import REFERENCE_DIR, TEMPLATE_DIR

pytestmark = pytest.mark.slow

TEMPLATE = TEMPLATE_DIR
STUDENT = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"
TIMEOUT_S = 900

SIMULATION = textwrap.dedent('''
    """Makes this interpreter look like a platform without Linux's facilities, to the grader's code."""
    import builtins
    import ctypes
    import json
    import multiprocessing
    import os
    import sys
    import sysconfig
    from pathlib import Path

    _HERE = Path(__file__).resolve().parent
    _CONFIG = json.loads((_HERE / "_simulated_platform.json").read_text())
    _GRADERS = _CONFIG["graders_dir"] + os.sep
    _STDLIB = (sysconfig.get_paths()["stdlib"] + os.sep, "<frozen")
    _LOG = _HERE / "_simulated_platform.log"


    def _log(line):
        try:
            with open(_LOG, "a") as log:
                log.write(f"{os.getpid()} {line}\\n")
        except OSError:
            pass  # an instructor's worker may write nowhere but its own folder


    def _grader_file(filename):
        return bool(filename) and os.path.realpath(filename).startswith(_GRADERS)


    def _caller_is_grader():
        """Whether the nearest frame outside the standard library is the grader's."""
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(_STDLIB):
            frame = frame.f_back
        return frame is not None and _grader_file(frame.f_code.co_filename)


    _real_import = builtins.__import__


    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        top = name.partition(".")[0] if level == 0 else ""
        if top in _CONFIG["hidden_everywhere"] or (
                top in _CONFIG["hidden_from_grader"] and _grader_file((globals or {}).get("__file__"))):
            _log(f"blocked import {name} from {(globals or {}).get('__name__')}")
            raise ModuleNotFoundError(f"No module named {top!r} (simulated platform)", name=top)
        return _real_import(name, globals, locals, fromlist, level)


    builtins.__import__ = _import

    def _elsewhere():
        """Everything but the hidden packages: the platform without Linux's (and POSIX's) facilities."""
        import select
        import subprocess

        _real_cdll_getattr = ctypes.CDLL.__getattr__

        def _cdll_getattr(self, name):
            if name == "prctl" and _grader_file(sys._getframe(1).f_code.co_filename):
                _log("blocked ctypes prctl")
                raise AttributeError(name)
            return _real_cdll_getattr(self, name)

        ctypes.CDLL.__getattr__ = _cdll_getattr

        def _audit(event, args):
            if event == "os.fork" and _caller_is_grader():
                _log("blocked os.fork")
                raise OSError("fork is not available (simulated platform)")
            if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)) \\
                    and os.fsdecode(args[0]).startswith("/proc") and _caller_is_grader():
                _log(f"blocked {event} {os.fsdecode(args[0])}")
                raise FileNotFoundError(f"no /proc on this platform (simulated): {os.fsdecode(args[0])}")

        sys.addaudithook(_audit)
        multiprocessing.set_start_method("spawn", force=True)

        # POSIX, not only Linux: absent on Windows, so absent here for everyone.
        for owner, name in ((select, "poll"), (os, "writev"), (os, "set_blocking"), (os, "killpg"), (os, "geteuid")):
            delattr(owner, name)
        _real_popen_init = subprocess.Popen.__init__

        def _popen_init(self, *args, **kwargs):
            if kwargs.get("pass_fds") and _grader_file(sys._getframe(1).f_code.co_filename):
                _log("blocked pass_fds")
                raise ValueError("pass_fds is not supported on this platform (simulated)")
            _real_popen_init(self, *args, **kwargs)

        subprocess.Popen.__init__ = _popen_init


    if _CONFIG["elsewhere"]:
        _elsewhere()
    _log(f"started {' '.join(sys.orig_argv)}")
''')

LINUX_ONLY = ["fcntl", "resource"]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """(python, folder of the simulation): a virtual environment whose interpreter runs the
    simulation first thing, in every process it starts."""
    base = Path(tempfile.mkdtemp(prefix="portable-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None))
    try:
        venv = base / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = Path(sysconfig.get_paths(vars={"base": str(venv), "platbase": str(venv)})["purelib"])
        (site / "_simulated_platform.py").write_text(SIMULATION)
        (site / "simulated_platform.pth").write_text(
            f"{REPO_ROOT}\n{sysconfig.get_paths()['purelib']}\nimport _simulated_platform\n")
        # An installed distribution of its own: a worker's root shows a site folder's distributions
        # only (graders/sandbox/exposure.py), and the simulation must run in the worker too.
        metadata = site / "_simulated_platform-0.dist-info"
        metadata.mkdir()
        (metadata / "METADATA").write_text("Metadata-Version: 2.1\nName: _simulated_platform\nVersion: 0\n")
        (metadata / "RECORD").write_text("_simulated_platform.py,,\n_simulated_platform.json,,\n"
                                         "_simulated_platform-0.dist-info/METADATA,,\n"
                                         "_simulated_platform-0.dist-info/RECORD,,\n")
        yield venv / "bin" / "python", site
    finally:
        shutil.rmtree(base, ignore_errors=True)


def configure(site: Path, *, hidden_everywhere=(), elsewhere=True):
    """`elsewhere`: a platform without Linux's facilities; otherwise Linux as it is, less the
    packages `hidden_everywhere`."""
    (site / "_simulated_platform.json").write_text(json.dumps({
        "graders_dir": str((REPO_ROOT / "graders").resolve()), "hidden_from_grader": LINUX_ONLY if elsewhere else [],
        "hidden_everywhere": list(hidden_everywhere), "elsewhere": elsewhere}))
    (site / "_simulated_platform.log").unlink(missing_ok=True)


def homework(tmp_path: Path, name: str, modules: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(TEMPLATE, folder)
    for path in modules.glob("*.py"):
        if path.name != "__init__.py":
            shutil.copy(path, folder / path.name)
    return folder


def self_check(python, folder: Path, out: Path, *parts: str) -> subprocess.Popen:
    """`grade check` as a separate process, its workers' folders in a temporary folder of its
    own: other graders on the machine (other checkouts, older code) remove the folders they
    cannot place, and a simulated grader, without /proc, writes no start time into its names."""
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    environment["TMPDIR"] = str(out.with_name(out.name + "-tmp"))
    os.makedirs(environment["TMPDIR"])
    return subprocess.Popen([str(python), "-P", "-m", "graders.selfcheck", "check", *parts, "--path", str(folder),
                             "--out", str(out)], cwd=folder, env=environment, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finished(process: subprocess.Popen, out: Path) -> tuple[int, str, dict]:
    output, _ = process.communicate(timeout=TIMEOUT_S)
    return process.returncode, output, json.loads((out / "results.json").read_text())


def outcomes(results: dict) -> dict:
    return {c["id"]: (c["status"], c["score"], (c["diagnosis"] or {}).get("id"), c["counterexample"])
            for part in results["parts"] for c in part["checks"]}


def test_the_simulation_takes_the_linux_facilities_from_the_grader(simulated):
    python, site = simulated
    configure(site)
    probe = subprocess.run([str(python), "-c", "import torch, graders.sandbox.uids"], capture_output=True, text=True)
    assert "No module named 'fcntl' (simulated platform)" in probe.stderr, probe.stderr[-2000:]
    probe = subprocess.run([str(python), "-c", "import torch, graders.sandbox.worker as w; print(w.linux_prctl())"],
                           capture_output=True, text=True)
    assert probe.returncode == 0 and probe.stdout.strip() == "None", probe.stdout + probe.stderr[-2000:]


def test_a_self_check_without_linux_facilities_gives_the_linux_results(simulated, tmp_path):
    python, site = simulated
    configure(site)
    folder = homework(tmp_path, "student", STUDENT)
    runs = {name: self_check(interpreter, folder, tmp_path / name)
            for name, interpreter in (("linux", sys.executable), ("simulated", python))}
    linux_status, linux_output, linux = finished(runs["linux"], tmp_path / "linux")
    status, output, results = finished(runs["simulated"], tmp_path / "simulated")
    assert results["status"] == "graded", output[-3000:]
    assert (status, outcomes(results)) == (linux_status, outcomes(linux)), output[-3000:] + linux_output[-3000:]
    assert results["score"] == linux["score"] and linux_status == 1
    assert {"passed", "failed"} <= {status for status, *_ in outcomes(results).values()}

    log = (site / "_simulated_platform.log").read_text()
    assert "graders.sandbox.worker" in log, log  # the worker ran under the simulation too
    assert results["sandbox"]["audit_hook"] is False and results["sandbox"]["bwrap"] is False


LOCKED_TRANSFORMERS = read_lock()["transformers"]  # the fix installs the lock's version


def test_a_missing_transformers_is_the_environments_problem_with_its_fix(simulated, tmp_path):
    python, site = simulated
    configure(site, hidden_everywhere=["transformers"])
    folder = homework(tmp_path, "correct", REFERENCE_DIR)
    status, output, results = finished(self_check(python, folder, tmp_path / "out", "sentiment"), tmp_path / "out")
    assert status == 1, output[-3000:]
    checks = [c for part in results["parts"] for c in part["checks"]]
    needing = [c for c in checks if c["status"] != "passed"]
    assert needing, output[-3000:]
    for check in needing:
        assert check["status"] == "skipped", check
        assert f"the grader's environment lacks transformers: run `pip install 'transformers=={LOCKED_TRANSFORMERS}'`" \
            in check["message"]
        assert "your code" not in check["message"].split("(a problem of")[0]
        assert check["details"]["environment"]["missing"] == "transformers"


def test_a_missing_package_of_the_grading_process_is_reported_with_its_fix(simulated, tmp_path):
    python, site = simulated
    configure(site, hidden_everywhere=["hypothesis"])
    folder = homework(tmp_path, "correct", REFERENCE_DIR)
    grade = subprocess.run([str(python), "-P", "-c", "from graders.cli import run; run()", "check"], cwd=folder,
                           capture_output=True, text=True, timeout=TIMEOUT_S)
    status, output = grade.returncode, grade.stdout + grade.stderr
    assert status == 2, output[-3000:]
    assert "grade: the grader's environment lacks hypothesis: run `pip install 'hypothesis==" in output
    assert "Traceback" not in output


INSTRUCTOR_GRADE = """
import json, sys
from graders.grading import INSTRUCTOR, grade
results = grade(sys.argv[1], mode=INSTRUCTOR, unsafe=True, only_parts=["sentiment"])
print(json.dumps({"status": results["status"], "reason": results["reason"],
                  "checks": [(c["status"], c["message"]) for p in results["parts"] for c in p["checks"]]}))
"""


def test_an_instructor_grade_without_transformers_is_an_infrastructure_error(simulated, tmp_path):
    """Also when the student's own module imports it: the grade is not handed back, and a batch
    grades it again (`--redo-errors`)."""
    python, site = simulated
    configure(site, hidden_everywhere=["transformers"], elsewhere=False)
    folder = homework(tmp_path, "imports-transformers", REFERENCE_DIR)
    sentiment = folder / "sentiment.py"
    sentiment.write_text("import transformers\n" + sentiment.read_text())
    run = subprocess.run([str(python), "-P", "-c", INSTRUCTOR_GRADE, str(folder)], capture_output=True, text=True,
                         timeout=TIMEOUT_S, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    outcome = json.loads(run.stdout.splitlines()[-1])
    assert outcome["status"] == "error" and "lacks transformers" in outcome["reason"], outcome
    assert outcome["checks"] and all(status == "skipped" and "lacks transformers: run `pip install" in message
                                     for status, message in outcome["checks"]), outcome["checks"]
