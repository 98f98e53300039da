"""`grade batch --backend slurm` on a real Slurm: the single-node cluster of scripts/slurm-cluster.sh.

Every test runs twice: with slurmdbd accounting (task states from sacct) and without (squeue and
scontrol only); the cluster is switched between the two by the script (a restart of slurmctld
and slurmd, a few seconds). Each test drives `grade batch` as a user would, as its own process,
under a timeout, and ends with one gradebook row per submission and the documented exit status.
Skipped where `sinfo` does not answer (`.ci/run` starts the cluster; `scripts/slurm-cluster.sh
start --accounting` does it by hand, as root).

The submissions are the smallest real ones: copies of the reference graded on the attention part
only; a slow one loops in every call (the hostile fixture), a sleeper sleeps 3 s at import (so
that it is still running when the test kills it) and then passes.
"""

import contextlib
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.course import REFERENCE_DIR

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "slurm-cluster.sh"
LOOP = REPO / "fixtures" / "bert" / "submissions" / "hostile" / "infinite_loop" / "attention.py"
PARTS = ["attention"]


def _sinfo_answers() -> bool:
    if not shutil.which("sinfo"):
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# slow: each waits on a real cluster for seconds to minutes (left out of the inner loop; CI runs them)
pytestmark = [pytest.mark.slurm, pytest.mark.slow,
              pytest.mark.skipif(not _sinfo_answers(), reason="no Slurm here (sinfo does not answer)")]


@pytest.fixture(scope="module", params=["accounting", "no-accounting"])
def cluster(request):
    """The cluster in one mode; the script switches it (root only)."""
    wanted = ["--accounting"] if request.param == "accounting" else []
    if os.geteuid() != 0:
        pytest.skip("switching the test cluster's accounting needs root")
    started = subprocess.run(["bash", str(SCRIPT), "start", *wanted], capture_output=True, text=True, timeout=300)
    if started.returncode != 0:
        pytest.skip(f"the test cluster did not start in mode {request.param}: {started.stderr[-500:]}")
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30).stdout
    accounting = re.search(r"^AccountingStorageType\s*=\s*accounting_storage/slurmdbd", config, re.M) is not None
    assert accounting == (request.param == "accounting")
    partition = subprocess.run(["sinfo", "-h", "-o", "%R"], capture_output=True, text=True, timeout=30).stdout.split()[0]
    return {"mode": request.param, "partition": partition}


def copy_reference(dest: Path) -> Path:
    shutil.copytree(REFERENCE_DIR, dest, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    return dest


def make_subs(root: Path, kinds: dict[str, str]) -> Path:
    """kinds: student id -> good, bug, slow (loops in every call), sleeper (3 s at import), notazip."""
    subs = root / "subs"
    subs.mkdir(parents=True)
    for sid, kind in kinds.items():
        if kind == "notazip":
            (subs / f"{sid}.zip").write_bytes(b"not a zip\n")
            continue
        folder = copy_reference(subs / sid)
        attention = folder / "attention.py"
        if kind == "bug":
            attention.write_text(attention.read_text().replace("/ math.sqrt(d_k)", ""))
        elif kind == "slow":
            shutil.copy(LOOP, attention)
        elif kind == "sleeper":
            attention.write_text("import time\ntime.sleep(3)\n" + attention.read_text())
    return subs


def batch_command(subs: Path, out: Path, cluster: dict, *extra: str) -> list[str]:
    return [sys.executable, "-m", "graders.cli", "batch", str(subs), "--out", str(out), "--assignment", "bert",
            "--parts", *PARTS, "--timeout", "60", "--no-progress", "--backend", "slurm",
            "--slurm-partition", cluster["partition"], "--slurm-cpus-per-task", "1", "--slurm-mem-gb", "2", *extra]


def start_driver(command: list[str], log: Path) -> subprocess.Popen:
    handle = open(log, "wb")
    return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)


def cancel_all(out: Path) -> None:
    """A failed test leaves no array behind."""
    for line in (out / "ledger.jsonl").read_text().splitlines() if (out / "ledger.jsonl").exists() else []:
        event = json.loads(line)
        if event.get("event") == "slurm-submit" and event.get("job_id"):
            subprocess.run(["scancel", str(event["job_id"])], timeout=30)


@contextlib.contextmanager
def ended_on_failure(driver: subprocess.Popen, out: Path):
    """Whatever fails while a test acts on the running array, the driver and the array end with it."""
    try:
        yield
    except BaseException:
        os.killpg(driver.pid, signal.SIGKILL)
        cancel_all(out)
        raise


def finish(process: subprocess.Popen, log: Path, timeout: float, out: Path | None = None) -> tuple[int, str]:
    try:
        status = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        if out is not None:
            cancel_all(out)
        pytest.fail(f"the driver hung (> {timeout:g} s):\n{log.read_text()[-3000:]}")
    return status, log.read_text()


def run_driver(command: list[str], log: Path, timeout: float = 150) -> tuple[int, str]:
    out = Path(command[command.index("--out") + 1])
    return finish(start_driver(command, log), log, timeout, out)


def gradebook(out: Path) -> dict[str, dict]:
    return {row["student_id"]: row for row in csv.DictReader((out / "gradebook.csv").read_text().splitlines())}


def array_id(out: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    path = out / ".batch" / "slurm-pending.json"
    while time.monotonic() < deadline:
        try:
            return str(json.loads(path.read_text())["job_id"])
        except (OSError, ValueError, KeyError):
            time.sleep(0.2)
    pytest.fail("no array was submitted")


def tasks(job_id: str) -> dict[int, str]:
    listed = subprocess.run(["squeue", "-h", "-r", "-j", job_id, "-o", "%K|%T"], capture_output=True, text=True,
                            timeout=30).stdout
    return {int(i): s for i, s in (line.split("|") for line in listed.splitlines()) if i.isdigit()}


def wait_for_tasks(job_id: str, wanted, timeout: float = 90) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    seen: dict[int, str] = {}
    while time.monotonic() < deadline:
        seen = tasks(job_id)
        if wanted(seen):
            return seen
        time.sleep(0.2)
    pytest.fail(f"the array's tasks never got there: {seen}")


def array_gone(job_id: str, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not tasks(job_id):
            return True
        time.sleep(0.5)
    return False


def one_row_each(out: Path, ids) -> dict[str, dict]:
    book = gradebook(out)
    assert sorted(book) == sorted(ids), "one row per submission, no more, no less"
    return book


@pytest.fixture(scope="module")
def local_gradebook(tmp_path_factory):
    """The local backend's gradebook of the happy path's submissions."""
    root = tmp_path_factory.mktemp("local")
    subs = make_subs(root, {"good": "good", "bug": "bug", "notazip": "notazip"})
    command = [sys.executable, "-m", "graders.cli", "batch", str(subs), "--out", str(root / "out"), "--assignment",
               "bert", "--parts", *PARTS, "--timeout", "60", "--no-progress", "--jobs", "2"]
    status, output = run_driver(command, root / "log")
    assert status == 0, output
    return gradebook(root / "out")


def test_the_happy_path_gives_the_local_gradebook(cluster, local_gradebook, tmp_path):
    subs = make_subs(tmp_path, {"good": "good", "bug": "bug", "notazip": "notazip"})
    out = tmp_path / "out"
    status, output = run_driver(batch_command(subs, out, cluster), tmp_path / "log")
    assert status == 0, output
    assert gradebook(out) == local_gradebook
    assert "this run: 2 graded, 1 rejected" in output
    assert "Bypassing" not in output
    if cluster["mode"] == "no-accounting":
        return
    # a run with nothing left submits nothing and says so (once: no Slurm state is read)
    status, output = run_driver(batch_command(subs, out, cluster, "--no-wait"), tmp_path / "log2")
    assert status == 0 and "nothing left to submit" in output and "None" not in output, output


def test_a_task_out_of_time_is_an_error_row_that_says_so(cluster, tmp_path):
    subs = make_subs(tmp_path, {"slow": "slow"})
    out = tmp_path / "out"
    status, output = run_driver(batch_command(subs, out, cluster, "--slurm-time", "0.2"), tmp_path / "log")
    assert status == 0, output
    row = one_row_each(out, ["slow"])["slow"]
    assert row["status"] == "error"
    assert "the Slurm task's time ran out (--slurm-time 0.2 min" in row["reason"]
    assert "1 error" in output


def test_scancel_and_sigkill_of_tasks_each_end_in_one_row(cluster, tmp_path):
    """Four tasks, two at a time: the pending third is cancelled, the running first is cancelled,
    the running second is killed outright (SIGKILL to every process of the task) and is submitted
    again, the fourth runs as usual."""
    kinds = {"a_slow": "slow", "b_sleeper": "sleeper", "c_good": "good", "d_good": "good"}
    subs = make_subs(tmp_path, kinds)
    out = tmp_path / "out"
    log = tmp_path / "log"
    driver = start_driver(batch_command(subs, out, cluster, "--slurm-parallelism", "2", "--retries", "1",
                                        "--slurm-time", "1.5"), log)
    with ended_on_failure(driver, out):
        job = array_id(out)
        wait_for_tasks(job, lambda t: t.get(0) == "RUNNING" and t.get(1) == "RUNNING" and t.get(2) == "PENDING")
        subprocess.run(["scancel", f"{job}_2"], check=True, timeout=30)
        raw = subprocess.run(["squeue", "-h", "-j", f"{job}_1", "-o", "%A"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
        pids = subprocess.run(["scontrol", "listpids", raw], capture_output=True, text=True, timeout=30).stdout
        killed = 0
        for line in pids.splitlines()[1:]:
            pid = line.split()[0]
            if pid.isdigit():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    killed += 1
                except ProcessLookupError:
                    pass
        assert killed, pids
        subprocess.run(["scancel", f"{job}_0"], check=True, timeout=30)
    status, output = finish(driver, log, timeout=150, out=out)
    assert status == 0, output
    book = one_row_each(out, kinds)
    assert book["a_slow"]["status"] == "error"
    assert "cancelled" in book["a_slow"]["reason"] and "while it ran" in book["a_slow"]["reason"]
    assert book["c_good"]["status"] == "error"
    assert "cancelled" in book["c_good"]["reason"] and "before it started" in book["c_good"]["reason"]
    assert book["b_sleeper"]["status"] == "graded" and book["b_sleeper"]["total"] == "8", book["b_sleeper"]
    assert book["d_good"]["status"] == "graded" and book["d_good"]["total"] == "8"
    assert "2 error, 2 graded" in output
    events = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    rounds = [e for e in events if e["event"] == "slurm-submit"]
    assert [r["tasks"] for r in rounds] == [4, 1], "only the killed task is submitted again; a cancel is respected"
    lost = [e for e in events if e["event"] == "slurm-task-lost"]
    assert [e["student_id"] for e in lost] == ["b_sleeper"]


def test_a_node_that_cannot_isolate_is_an_infrastructure_error_naming_it(cluster, tmp_path):
    """The node's environment has no bubblewrap (TRANSFORMER_GRADER_BWRAP empty): each round
    fails there at once, and the row names the node and the whole reason, never `full`."""
    subs = make_subs(tmp_path, {"good": "good"})
    out = tmp_path / "out"
    status, output = run_driver(batch_command(subs, out, cluster, "--retries", "1", "--slurm-setup",
                                              "export TRANSFORMER_GRADER_BWRAP="), tmp_path / "log")
    assert status == 0, output
    row = one_row_each(out, ["good"])["good"]
    node = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=30).stdout.split()[0]
    assert row["status"] == "error" and row["isolation"] == ""
    assert f"the machine {node} cannot grade: it cannot isolate student code" in row["reason"]
    assert "bubblewrap" in row["reason"].lower()
    submits = [json.loads(line) for line in (out / "ledger.jsonl").read_text().splitlines()]
    assert len([e for e in submits if e["event"] == "slurm-submit"]) == 2, "retried a bounded number of times"
    marker = json.loads((out / "submissions" / "good" / "done.json").read_text())
    assert marker["final"] is False, "the next run grades it again"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_driver_ends_the_array_and_writes_the_gradebook(cluster, tmp_path, signum):
    kinds = {"a_slow": "slow", "b_slow": "slow", "c_good": "good"}
    subs = make_subs(tmp_path, kinds)
    out = tmp_path / "out"
    log = tmp_path / "log"
    driver = start_driver(batch_command(subs, out, cluster, "--slurm-parallelism", "2"), log)
    with ended_on_failure(driver, out):
        job = array_id(out)
        wait_for_tasks(job, lambda t: t.get(0) == "RUNNING" and t.get(1) == "RUNNING")
        driver.send_signal(signum)
    status, output = finish(driver, log, timeout=60, out=out)
    assert status == 1, output
    assert f"interrupted ({signal.Signals(signum).name})" in output and "Traceback" not in output, output
    book = one_row_each(out, kinds)
    for sid in kinds:
        assert book[sid]["status"] == "error" and "interrupted" in book[sid]["reason"], book[sid]
    assert array_gone(job), "the array was cancelled"
    for sid in kinds:
        assert json.loads((out / "submissions" / sid / "done.json").read_text())["final"] is False


def test_a_request_slurm_can_never_run_is_cancelled_and_each_row_says_why(cluster, tmp_path):
    """The partition's time limit (1 minute here) is below the tasks': Slurm accepts the array
    and leaves it pending (PartitionConfig or PartitionTimeLimit) for ever; the driver cancels it and says why."""
    subs = make_subs(tmp_path, {"notazip": "notazip", "other": "notazip"})
    out = tmp_path / "out"
    partition = cluster["partition"]
    subprocess.run(["scontrol", "update", f"partitionname={partition}", "MaxTime=1"], check=True, timeout=30)
    try:
        status, output = run_driver(batch_command(subs, out, cluster, "--slurm-time", "5"), tmp_path / "log",
                                    timeout=60)
    finally:
        subprocess.run(["scontrol", "update", f"partitionname={partition}", "MaxTime=INFINITE"], check=True, timeout=30)
    assert status == 0, output
    assert "waiting: the partition cannot run it as asked" in output
    for row in one_row_each(out, ["notazip", "other"]).values():
        assert row["status"] == "error" and "Slurm cannot run its task as asked" in row["reason"]
        assert "(pending reason Partition" in row["reason"]  # PartitionConfig or PartitionTimeLimit


def test_a_no_wait_array_is_collected_later_and_its_cancelled_task_is_not_resubmitted(cluster, tmp_path):
    kinds = {"a_good": "good", "b_good": "good"}
    subs = make_subs(tmp_path, kinds)
    out = tmp_path / "out"
    command = batch_command(subs, out, cluster, "--slurm-parallelism", "1")
    status, output = run_driver([*command, "--no-wait"], tmp_path / "log1", timeout=60)
    assert status == 1 and "submitted 2 array task(s) as Slurm job" in output, output
    job = array_id(out)
    try:
        wait_for_tasks(job, lambda t: t.get(1) == "PENDING")
        subprocess.run(["scancel", f"{job}_1"], check=True, timeout=30)
        assert array_gone(job, timeout=90), "the array ends"
    except BaseException:
        cancel_all(out)
        raise
    status, output = run_driver(command, tmp_path / "log2")
    assert status == 0, output
    book = one_row_each(out, kinds)
    assert book["a_good"]["status"] == "graded" and book["a_good"]["total"] == "8"
    # "cancelled by root before it started" once accounting has recorded who cancelled it (a race)
    assert book["b_good"]["status"] == "error" and re.search(r"cancelled( by \S+)? before it started",
                                                             book["b_good"]["reason"]), book["b_good"]["reason"]
    submits = [e for e in map(json.loads, (out / "ledger.jsonl").read_text().splitlines()) if e["event"] == "slurm-submit"]
    assert len(submits) == 1, "the collection submits nothing again"
