"""Fail closed, and each layer of the sandbox on its own.

Any one layer can be missing on some machine, so each is shown to hold without the others:
the refusal without bubblewrap or root (and the unsafe flag's warning in every output), the OS
permissions on secrets (no namespace, no worker), a uid per worker with its leftover processes
killed (no namespace), the size-limited writable space (a real worker), and per-student process
limits (two real workers at once).
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from graders.build import REPO_ROOT
from graders.grading import grade
from graders.sandbox import Limits, Worker, isolation, uids
from graders.sandbox.isolation import IsolationUnavailable

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

AS_ROOT = os.geteuid() == 0
FULL = AS_ROOT and isolation.find_bwrap() is not None and isolation.bwrap_works(isolation.find_bwrap(), True)
needs_root = pytest.mark.skipif(not AS_ROOT, reason="the sandbox user exists only when the grader is root")
needs_full = pytest.mark.skipif(not FULL, reason="needs bubblewrap and root (bash setup.sh as root installs it)")

EXAMPLE = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"
GRADE = [sys.executable, "-m", "graders.cli"]
NOT_ISOLATED = "NOT ISOLATED"


# ------------------------------------------------------------------------------ fail closed

def test_grading_refuses_without_bubblewrap_and_says_how_to_fix_it(monkeypatch):
    monkeypatch.setenv(isolation.BWRAP_ENVIRONMENT, "")
    with pytest.raises(IsolationUnavailable, match="apt-get install bubblewrap"):
        grade(EXAMPLE, only_parts=["attention"])


def test_grading_refuses_when_the_worker_could_not_change_user(monkeypatch):
    monkeypatch.setattr(isolation.os, "geteuid", lambda: 1000)
    with pytest.raises(IsolationUnavailable, match="not root"):
        isolation.require_isolation()


def test_a_worker_refuses_by_default_without_bubblewrap(monkeypatch, tmp_path):
    monkeypatch.setenv(isolation.BWRAP_ENVIRONMENT, "")
    with pytest.raises(IsolationUnavailable):
        Worker(tmp_path)
    with pytest.raises(ValueError, match="require_isolation=False"):
        Worker(tmp_path, use_bwrap=False)


def _grade_cli(arguments, out, **environment):
    return subprocess.run([*GRADE, str(EXAMPLE), "--out", str(out), "--parts", "attention", *arguments],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                          env={**os.environ, **environment})


def test_the_cli_refuses_with_exit_3_and_writes_nothing(tmp_path):
    refused = _grade_cli([], tmp_path / "out", **{isolation.BWRAP_ENVIRONMENT: ""})
    assert refused.returncode == 3, refused.stderr
    assert "bubblewrap is not installed" in refused.stderr and "fix:" in refused.stderr
    assert "--unsafe-no-sandbox" in refused.stderr
    assert not (tmp_path / "out").exists()


def test_an_unsafe_grade_says_so_in_every_output(tmp_path):
    out = tmp_path / "out"
    graded = _grade_cli(["--unsafe-no-sandbox"], out, **{isolation.BWRAP_ENVIRONMENT: ""})
    assert graded.returncode == 0, graded.stderr
    results = json.loads((out / "results.json").read_text())
    assert results["sandbox"]["unsafe"] is True and not results["sandbox"]["full_isolation"]
    assert NOT_ISOLATED in graded.stdout
    assert NOT_ISOLATED in (out / "report.html").read_text()
    assert NOT_ISOLATED in json.loads((out / "gradescope.json").read_text())["output"]
    assert "] grading attention" in graded.stderr and "grading" not in graded.stdout  # progress, apart from the summary


@needs_full
def test_an_isolated_grade_says_nothing_of_the_kind(tmp_path):
    results = grade(EXAMPLE, only_parts=["attention"])
    assert results["sandbox"]["full_isolation"] and results["sandbox"]["unsafe"] is False
    from graders.reports import render_html, to_gradescope
    assert NOT_ISOLATED not in render_html(results) + json.dumps(to_gradescope(results))


@needs_full
def test_doctor_reports_every_layer_from_a_real_worker():
    from graders.sandbox.doctor import diagnose, full_isolation
    findings = diagnose()
    layers = {finding.layer: finding for finding in findings}
    assert full_isolation(findings), [f for f in findings if f.ok is False]
    assert "uid 1970" in layers["worker runs unprivileged"].detail
    assert layers["no network"].detail == "interfaces: lo"
    space = layers["writable space limited (folder, /dev/shm; /tmp not writable)"]
    assert "workdir 256 MiB / 4096 files" in space.detail and "tmp 64 MiB, not writable" in space.detail


@pytest.mark.slow
def test_doctor_says_when_the_worker_cannot_import_what_the_checks_need():
    """On a GPU runner the worker could not import transformers' BERT (its audit hook refused a
    library the grader itself loads): the doctor said "full isolation", and every grade of a
    batch would have ended in status error. It now imports the assignment's preloaded modules in
    a worker. Positive control: modules the worker imports pass."""
    from graders.sandbox.doctor import IMPORTS_LAYER, diagnose, full_isolation, ready_to_grade, render

    findings = diagnose(modules=["json", "a_module_this_environment_lacks"])
    (imports,) = [f for f in findings if f.layer == IMPORTS_LAYER]
    assert imports.ok is False and imports.detail.startswith("a_module_this_environment_lacks: ModuleNotFoundError")
    assert "json" not in imports.detail and "pip check" in imports.fix
    assert full_isolation(findings) and not ready_to_grade(findings)  # the sandbox is whole; grading is not
    assert "the worker cannot import what the checks need" in render(findings)
    findings = diagnose(modules=["json", "transformers.models.bert.modeling_bert"])
    assert ready_to_grade(findings), render(findings)
    assert "cannot import" not in render(findings)


def test_doctor_fails_and_names_the_fix_without_bubblewrap(tmp_path):
    doctor = subprocess.run([*GRADE, "doctor"], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                            env={**os.environ, isolation.BWRAP_ENVIRONMENT: ""})
    assert doctor.returncode == 1
    assert "[FAIL] bubblewrap installed" in doctor.stdout and "apt-get install bubblewrap" in doctor.stdout
    assert "NOT isolated" in doctor.stdout


# ------------------------------------------------------------------------------ each layer alone

def _as_user(uid, command):
    return subprocess.run(command, user=uid, group=uid, extra_groups=[], capture_output=True, text=True,
                          cwd="/", timeout=30)


@pytest.fixture
def open_folder():
    """A folder every user may enter (pytest's own tmp_path is private to its user)."""
    import tempfile
    folder = Path(tempfile.mkdtemp(prefix="isolation-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


@needs_root
def test_os_permissions_alone_deny_secrets_to_the_sandbox_user(open_folder):
    """No namespace, no worker: a process of the sandbox uid is refused by the kernel."""
    tmp_path = open_folder
    secret_folder = tmp_path / "reference"
    secret_folder.mkdir(mode=0o755)
    (secret_folder / "attention.py").write_text("the solution")
    secret_file = tmp_path / "labels.csv"
    secret_file.write_text("1,0,1")
    uid = Limits().sandbox_uid + 200
    secrets = [str(secret_folder), str(secret_file)]
    assert isolation.readable_by(uid, uid, secrets) == secrets
    assert _as_user(uid, ["/bin/cat", str(secret_folder / "attention.py")]).returncode == 0

    assert isolation.deny_to_sandbox_user(secrets, uid=uid, gid=uid) == []
    refused = _as_user(uid, ["/bin/cat", str(secret_folder / "attention.py"), str(secret_file)])
    assert refused.returncode != 0 and refused.stderr.count("Permission denied") == 2
    assert (secret_folder / "attention.py").read_text() == "the solution"  # the owner still reads it


@needs_root
def test_each_worker_gets_its_own_uid_and_its_leftovers_are_killed(tmp_path):
    """No namespace: a process that left the worker's session (setsid) dies by its uid."""
    limits = Limits()
    base = limits.sandbox_uid + 240  # a corner of the pool that no test's worker reaches
    first = uids.lease(pool=tmp_path, base_uid=base, base_gid=base, slots=4)
    second = uids.lease(pool=tmp_path, base_uid=base, base_gid=base, slots=4)
    try:
        assert first.uid != second.uid and first.gid != second.gid
        stray = subprocess.Popen(["/bin/sleep", "1000"], user=second.uid, group=second.gid, extra_groups=[],
                                 start_new_session=True, cwd="/")
        assert uids.processes_of(second.uid) == [stray.pid]
        assert uids.kill_processes_of(second.uid) == 1
        assert stray.wait(timeout=10) == -9
        assert uids.processes_of(second.uid) == [] and uids.processes_of(first.uid) == []
    finally:
        first.release()
        second.release()
    again = uids.lease(pool=tmp_path, base_uid=base, base_gid=base, slots=4)
    assert again.uid == first.uid  # a released slot is free again
    again.release()


def _submission(tmp_path, code):
    folder = tmp_path / "submission"
    folder.mkdir(parents=True)
    (folder / "probe.py").write_text(textwrap.dedent(code))
    return folder


FILL = """
    import os

    def fill(folder):
        written = 0
        try:
            with open(os.path.join(folder, "big"), "wb") as handle:
                while written < (256 << 20):
                    handle.write(b"x" * (1 << 20))
                    handle.flush()
                    written += 1 << 20
        except OSError as error:
            return written, error.errno
        return written, 0

    def writable(folder):
        return os.access(folder, os.W_OK)

    def capacity(folder):
        usage = os.statvfs(folder)
        return usage.f_blocks * usage.f_frsize, usage.f_files

    def many(folder):
        made = 0
        try:
            os.makedirs(os.path.join(folder, "many"), exist_ok=True)
            while made < 100_000:
                open(os.path.join(folder, "many", str(made)), "w").close()
                made += 1
        except OSError as error:
            return made, error.errno
        return made, 0
"""


@needs_full
def test_the_writable_space_is_limited_in_bytes_and_files(tmp_path):
    limits = Limits(call_timeout_s=30, workdir_bytes=8 << 20, workdir_files=64, tmp_bytes=4 << 20,
                    shm_bytes=4 << 20, shm_files=32)
    with Worker(_submission(tmp_path, FILL), limits=limits) as worker:
        host_folder = worker._workdir  # where the worker's folder is on the host: the tmpfs's mount point
        before = sum(1 for _ in host_folder.rglob("*"))
        written, error = worker.call("probe", "fill", ".")
        assert written <= 8 << 20 and error == 28, (written, error)  # ENOSPC
        made, error = worker.call("probe", "many", ".")
        assert made <= 64 and error == 28, (made, error)
        # The audit hook refuses writes there from Python; C-level writes meet these mounts.
        assert worker.call("probe", "capacity", "/tmp")[0] == 4 << 20
        assert worker.call("probe", "writable", "/tmp") is False  # root's
        assert worker.call("probe", "capacity", "/dev/shm") == (4 << 20, 32)
        after = sum(1 for _ in host_folder.rglob("*"))
        assert after == before  # the host holds the submission's copy, nothing the student wrote


SPAWN_MANY = """
    import glob, importlib.machinery, importlib.util, os, sys, time

    def _spawner():
        library = [p for folder in sys.path for p in glob.glob(os.path.join(folder, "_posixsubprocess*.so"))][0]
        name = "again._posixsubprocess"
        spec = importlib.util.spec_from_file_location(
            name, library, loader=importlib.machinery.ExtensionFileLoader(name, library))
        return importlib.util.module_from_spec(spec)

    def hold_every_slot(count):
        spawner, started = _spawner(), 0
        for _ in range(count):
            error_read, error_write = os.pipe()
            try:
                spawner.fork_exec([b"/bin/sleep", b"1000"], [b"/bin/sleep"], True, (error_write,), None, None,
                                  -1, -1, -1, -1, -1, -1, error_read, error_write, True, True, -1,
                                  None, None, None, -1, None, False)
                started += 1
            except OSError:
                break
        return started
"""


@needs_full
def test_one_student_holding_every_process_slot_leaves_the_next_unharmed(tmp_path):
    limits = Limits(call_timeout_s=30, max_processes=24)
    greedy = Worker(_submission(tmp_path / "a", SPAWN_MANY), limits=limits)
    try:
        started = greedy.call("probe", "hold_every_slot", 100)
        assert 0 < started < 24  # RLIMIT_NPROC stopped it (the worker's own threads count too)
        greedy_uid = greedy.layers.sandbox_uid
        assert len(uids.processes_of(greedy_uid)) > started
        with Worker(_submission(tmp_path / "b", "def ok():\n    return 1\n"), limits=limits) as neighbour:
            assert neighbour.layers.sandbox_uid != greedy_uid
            assert neighbour.call("probe", "ok") == 1
    finally:
        greedy.close()
    assert uids.processes_of(greedy_uid) == []



def test_a_batch_refuses_before_reading_anything(monkeypatch, tmp_path):
    from graders.batch.cli import cmd_batch
    monkeypatch.setenv(isolation.BWRAP_ENVIRONMENT, "")
    (tmp_path / "course" / "alice").mkdir(parents=True)
    assert cmd_batch([str(tmp_path / "course"), "--out", str(tmp_path / "out"), "--no-progress"], "bert") == 3
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ a worker's GPUs

# Four GPUs as nvidia-smi lists them (index, uuid, minor number): the minor numbers follow
# another order than the indices, as on machines whose PCI order differs from the slots'.
FOUR_GPUS = [("0", "GPU-aaaa1111", "2"), ("1", "GPU-bbbb2222", "0"), ("2", "GPU-cccc3333", "3"),
             ("3", "GPU-dddd4444", "1")]
DEVICE_NODES = ["/dev/nvidia-caps", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1",
                "/dev/nvidia2", "/dev/nvidia3", "/dev/nvidiactl"]
SHARED_NODES = ["/dev/nvidia-caps", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidiactl"]


@pytest.mark.parametrize("visible, own_nodes, uuids", [
    ("1", ["/dev/nvidia0"], "GPU-bbbb2222"),
    ("2,0", ["/dev/nvidia3", "/dev/nvidia2"], "GPU-cccc3333,GPU-aaaa1111"),
    ("GPU-dddd", ["/dev/nvidia1"], "GPU-dddd4444"),
])
def test_a_worker_gets_the_node_of_its_own_gpu_and_no_other(visible, own_nodes, uuids):
    view = isolation.gpu_view(visible, FOUR_GPUS, DEVICE_NODES)
    assert view.nodes == [*SHARED_NODES, *own_nodes] and view.visible == uuids and not view.note


@pytest.mark.parametrize("visible", ["", "-1"])
def test_a_worker_told_no_gpu_gets_no_device_node(visible):
    assert isolation.gpu_view(visible, FOUR_GPUS, DEVICE_NODES).nodes == []


@pytest.mark.parametrize("visible, gpus", [("7", FOUR_GPUS), ("MIG-1234", FOUR_GPUS), ("0", [])])
def test_a_gpu_that_cannot_be_mapped_shows_every_node_and_says_so(visible, gpus):
    view = isolation.gpu_view(visible, gpus, DEVICE_NODES)
    assert view.nodes == DEVICE_NODES and view.visible == visible and "every GPU" in view.note


def test_without_cuda_visible_devices_a_worker_sees_every_gpu():
    view = isolation.gpu_view(None, FOUR_GPUS, DEVICE_NODES)
    assert view.nodes == DEVICE_NODES and view.visible is None


def test_the_gpus_are_read_from_the_driver_in_pci_order(tmp_path):
    for address, uuid, minor in (("0000:c1:00.0", "GPU-cccc3333", 3), ("0000:01:00.0", "GPU-aaaa1111", 2),
                                 ("0000:41:00.0", "GPU-bbbb2222", 0)):
        (tmp_path / address).mkdir()
        (tmp_path / address / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t {uuid}\nBus Location: \t {address}\n"
            f"Device Minor: \t {minor}\nGPU Excluded:\t No\n")
    assert isolation._driver_gpus(str(tmp_path)) == [("0", "GPU-aaaa1111", "2"), ("1", "GPU-bbbb2222", "0"),
                                                      ("2", "GPU-cccc3333", "3")]
