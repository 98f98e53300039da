"""Batch grading, the parts that need no grading: ids, the store, the supervisor's retry and
timeout rules (with a stand-in for run_one), the gradebook, manual merges, the Slurm script."""

import csv
import json
import os
import signal
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from graders.batch import store
from graders.batch.cli import cmd_batch, cmd_merge
from graders.batch.discover import DiscoveryError, discover, id_from_entry
from graders.batch.gradebook import rebuild
from graders.batch.merge import merge_manual
from graders.batch.run import Eta
from graders.batch.supervise import Job, run_pool
from tests.course import HOMEWORK


# ----------------------------------------------------------------------------------- discovery


@pytest.mark.parametrize("entry, scheme, expected", [
    ("alice.zip", "plain", ("alice", "")),
    ("alice.ipynb", "plain", ("alice", "")),
    ("alice", "plain", ("alice", "")),
    ("al ice$.zip", "plain", ("al_ice_", "")),
    ("..", "plain", ("___", "")),
    ("doejane_12345_67890_hw3.zip", "canvas", ("12345", "doejane")),
    ("doejane_LATE_12345_67890_hw3-1.zip", "canvas", ("12345", "doejane")),
    ("notcanvas.zip", "canvas", ("notcanvas", "")),
    ("Jane Doe_4567_assignsubmission_file_", "moodle", ("4567", "Jane Doe")),
    ("Jane Doe_4567_assignsubmission_file_hw.zip", "moodle", ("4567", "Jane Doe")),
])
def test_student_ids_from_entry_names(entry, scheme, expected):
    assert id_from_entry(entry, scheme) == expected


def test_discover_skips_hidden_entries_and_refuses_duplicate_ids(tmp_path):
    (tmp_path / "alice.zip").write_bytes(b"x")
    (tmp_path / "bob").mkdir()
    (tmp_path / ".DS_Store").write_bytes(b"")
    (tmp_path / "__MACOSX").mkdir()
    found = discover(tmp_path)
    assert [s.student_id for s in found] == ["alice", "bob"]
    assert all(len(s.sha256) == 64 for s in found)
    (tmp_path / "grades").mkdir()  # the output folder, inside the submissions folder
    assert [s.student_id for s in discover(tmp_path, exclude=(tmp_path / "grades",))] == ["alice", "bob"]
    (tmp_path / "alice.ipynb").write_text("{}")
    with pytest.raises(DiscoveryError, match="alice"):
        discover(tmp_path)


def test_manifest_names_exactly_the_graded_entries(tmp_path):
    (tmp_path / "a.zip").write_bytes(b"1")
    (tmp_path / "b.zip").write_bytes(b"2")
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("student_id,path\ns-001,a.zip\n")
    found = discover(tmp_path, manifest=manifest)
    assert [(s.student_id, s.path.name) for s in found] == [("s-001", "a.zip")]


# ----------------------------------------------------------------------------------- the store


def fake_results(score=8.0, status="graded", checks=None, reason=None):
    checks = checks if checks is not None else [
        {"id": "attention.matches_reference", "title": "matches", "status": "passed" if score else "failed",
         "score": score, "max_score": 8.0, "visibility": "public", "message": "",
         "diagnosis": None if score else {"id": "no_scaling", "text": "attention is not scaled by 1/sqrt(d_k)"}},
    ]
    parts = [] if status == "rejected" else [{"id": "attention", "title": "Attention", "score": score, "max_score": 8.0,
                                              "checks": checks}]
    return {"schema_version": 1, "status": status, "reason": reason, "mode": "instructor", "score": score,
            "max_score": 8.0, "submission": {"sha256": "0" * 64, "name": "x.zip", "kind": "zip", "notes": []},
            "versions": {"grader": "0.1.0"}, "timings": {"total_s": 1.0}, "parts": parts,
            "batch": {"input_sha256": "0" * 64, "wall_s": 1.5}}


def test_publish_is_atomic_and_replaces_a_stale_result(tmp_path):
    folder = store.publish(tmp_path, "alice", fake_results(8.0), {"key": "k1"})
    assert sorted(p.name for p in folder.iterdir()) == ["done.json", "feedback.html", "gradescope.json", "report.html", "results.json"]
    assert store.is_done(tmp_path, "alice", "k1") and not store.is_done(tmp_path, "alice", "k2")
    store.publish(tmp_path, "alice", fake_results(0.0), {"key": "k2"})
    assert store.read_marker(tmp_path, "alice")["score"] == 0.0
    # nothing half-written or set aside is left next to the result folders
    assert [p.name for p in (tmp_path / "submissions").iterdir()] == ["alice"]


def test_a_marker_that_is_not_final_is_graded_again(tmp_path):
    store.publish(tmp_path, "bob", fake_results(0.0), {"key": "k", "final": False})
    assert not store.is_done(tmp_path, "bob", "k")


def test_clean_temporaries_removes_leftovers_of_a_killed_job(tmp_path):
    leftover = tmp_path / "submissions" / ".tmp-alice-1234"
    leftover.mkdir(parents=True)
    (leftover / "results.json").write_text("{")
    assert store.clean_temporaries(tmp_path) == 1 and not leftover.exists()


def test_only_one_driver_per_output_folder(tmp_path):
    with store.RunLock(tmp_path):
        with pytest.raises(RuntimeError, match="another batch"):
            with store.RunLock(tmp_path):
                pass
    with store.RunLock(tmp_path):  # released
        pass


# ----------------------------------------------------------------------------- the supervisor

STAND_IN = textwrap.dedent("""
    import json, os, signal, sys, time
    spec = json.load(open(sys.argv[1]))
    sid, attempt = spec["student_id"], spec["attempt"]
    folder = os.path.join(spec["out"], "submissions", sid)
    def publish():
        os.makedirs(folder, exist_ok=True)
        json.dump({"key": spec["key"], "outcome": "graded", "final": True,
                   "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}, open(os.path.join(folder, "done.json"), "w"))
        print("published", sid, attempt)
    if sid.startswith("ok"):
        publish()
    elif sid == "flaky":  # the job process is SIGKILLed (OOM killer) on its first attempt
        if attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        publish()
    elif sid == "oom":
        sys.exit(75)
    elif sid == "crash":
        raise RuntimeError("a bug in the grader")
    elif sid == "hang":
        time.sleep(600)
""")


class StandInJob(Job):
    script: Path

    def command(self, spec_path):
        return [sys.executable, str(self.script), str(spec_path)]


def stand_in_jobs(tmp_path, ids, *, hard_timeout=30.0, retries=2):
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    jobs = []
    for sid in ids:
        spec = {"out": str(tmp_path / "out"), "student_id": sid, "source": str(tmp_path / f"{sid}.zip"),
                "input_sha256": "1" * 64, "key": f"key-{sid}", "parts": ["attention"], "assignment": str(HOMEWORK.folder)}
        job = StandInJob(spec, tmp_path / "out" / store.STATE, hard_timeout, retries)
        job.script = script
        jobs.append(job)
    return jobs


def events(out, kind):
    return [e["student_id"] for e in store.read_ledger(out) if e["event"] == kind]


def test_retries_only_for_lost_infrastructure(tmp_path):
    jobs = stand_in_jobs(tmp_path, ["ok", "flaky", "oom", "crash"], retries=2)
    finished = {f.student_id: f for f in run_pool(jobs, slots=2)}
    out = tmp_path / "out"
    assert finished["ok"].outcome == "graded" and finished["ok"].attempts == 1
    assert finished["flaky"].outcome == "graded" and finished["flaky"].attempts == 2
    # lost every time: an error, marked not final so that the next run tries again
    assert finished["oom"].outcome == "error" and finished["oom"].attempts == 3
    assert not store.read_marker(out, "oom")["final"]
    # a grader failure is not retried; it becomes an error result with the cause
    assert finished["crash"].outcome == "error" and finished["crash"].attempts == 1
    assert "a bug in the grader" in finished["crash"].reason
    assert store.read_marker(out, "crash")["final"]
    assert sorted(events(out, "retry")) == ["flaky", "oom", "oom"]


def test_hard_timeout_kills_the_job_and_is_a_result_not_a_retry(tmp_path):
    (job,) = stand_in_jobs(tmp_path, ["hang"], hard_timeout=1.5)
    started = time.monotonic()
    (result,) = run_pool([job], slots=1)
    assert time.monotonic() - started < 20
    assert result.outcome == "error" and result.attempts == 1 and "hard wall-clock limit" in result.reason
    assert job.process.returncode == -signal.SIGKILL
    results = json.loads((tmp_path / "out" / "submissions" / "hang" / "results.json").read_text())
    assert results["batch"]["outcome"] == "error" and results["score"] == 0
    assert events(tmp_path / "out", "retry") == []


def test_gpus_are_handed_out_round_robin_per_slot(tmp_path):
    jobs = stand_in_jobs(tmp_path, ["ok1", "ok2", "ok3"])
    run_pool(jobs, slots=2, gpus=["0", "1"])
    assert [job.gpu for job in jobs[:2]] == ["0", "1"] and jobs[2].gpu in ("0", "1")
    for job in jobs:  # what the job process saw
        assert store.read_marker(tmp_path / "out", job.student_id)["gpu"] == job.gpu


def test_the_running_submissions_are_reported_as_they_change(tmp_path):
    jobs = stand_in_jobs(tmp_path, ["ok1", "ok2", "ok3"])
    seen = []
    run_pool(jobs, slots=2, on_running=lambda ids: seen.append(list(ids)))
    assert seen[0] == ["ok1", "ok2"]
    assert seen[-1] == []
    assert any("ok3" in ids for ids in seen)


def test_the_eta_comes_from_measured_times():
    eta = Eta(remaining=10, slots=2)
    assert eta.seconds() is None and eta.text() == "-:--:--"
    eta.finished(30.0)
    eta.finished(50.0)
    assert eta.seconds() == pytest.approx(40.0 * 8 / 2)
    assert eta.text() == "0:02:40"
    for _ in range(7):
        eta.finished(40.0)
    assert eta.seconds() == pytest.approx(40.0)  # one left: it takes one submission's time, not half
    eta.finished(40.0)
    assert eta.seconds() == 0


def test_an_interrupted_batch_still_rebuilds_its_gradebook(tmp_path, monkeypatch):
    import graders.batch.run as batch_run
    from graders.batch.supervise import Interrupted

    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ("a", "b"):
        (subs / f"{name}.zip").write_bytes(name.encode())
    out = tmp_path / "out"

    def graded_one_then_interrupted(todo, out, config, **_):
        store.publish(out, todo[0]["student_id"], fake_results(6.0), {"key": todo[0]["key"]})
        raise Interrupted("SIGINT")

    monkeypatch.setattr(batch_run, "_run_local", graded_one_then_interrupted)
    with pytest.raises(Interrupted):
        batch_run.run_batch(HOMEWORK, subs, out, batch_run.BatchConfig(parts=["attention"], progress=False))
    with (out / "gradebook.csv").open() as handle:
        rows = {row["student_id"]: row for row in csv.DictReader(handle)}
    assert rows["a"]["total"] == "6"
    assert (out / "summary.html").is_file()


# ------------------------------------------------------------------------- gradebook, summary


def test_gradebook_and_summary_follow_the_results(tmp_path):
    store.publish(tmp_path, "alice", fake_results(8.0), {"key": "a"})
    store.publish(tmp_path, "bob", fake_results(0.0), {"key": "b"})
    hostile = fake_results(0.0, status="rejected", reason="=HYPERLINK(\"http://x\") <script>alert(1)</script>")
    store.publish(tmp_path, "mallory", hostile, {"key": "m"})
    gradebook, summary = rebuild(tmp_path)
    rows = list(csv.DictReader(gradebook.read_text().splitlines()))
    assert [(r["student_id"], r["total"], r["status"], r["attention"]) for r in rows] == [
        ("alice", "8", "graded", "8"), ("bob", "0", "graded", "0"), ("mallory", "0", "rejected", "")]
    assert rows[0]["report"] == "submissions/alice/report.html"
    assert rows[2]["reason"].startswith("'=")  # no formula for a spreadsheet to run
    html = summary.read_text()
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert "attention is not scaled" in html and "<svg" in html
    assert "http" not in (html.replace('xmlns="http://www.w3.org/2000/svg"', "").replace("http://x", "")
                          .replace('<meta http-equiv="Content-Security-Policy"', ""))


# ------------------------------------------------------------------------------- manual merge


def written_results(answer_status="pending_manual"):
    checks = [
        {"id": "answers.base_parameters", "title": "n", "status": "passed", "score": 6.0, "max_score": 6.0},
        {"id": "answers.layer_norm", "title": "LN", "status": answer_status, "score": 0.0, "max_score": 5.0,
         "details": {"answer": "it normalises"}},
        {"id": "answers.scaling_factor", "title": "scale", "status": answer_status, "score": 0.0, "max_score": 5.0},
    ]
    results = fake_results(6.0, checks=checks)
    results["parts"][0].update(id="answers", max_score=16.0, score=6.0)
    results["max_score"] = 16.0
    return results


def test_merge_sets_scores_clamps_reports_unknowns_and_is_idempotent(tmp_path):
    store.publish(tmp_path, "alice", written_results(), {"key": "a"})
    manual = tmp_path / "manual.csv"
    manual.write_text("student_id,check_id,score,comment\n"
                      "alice,answers.layer_norm,4,good but short\n"
                      "alice,scaling_factor,9,\n"  # prefix optional; 9 > 5 is clamped
                      "alice,answers.base_parameters,1,\n"  # automatic: refused
                      "alice,answers.nope,1,\n"
                      "zed,answers.layer_norm,1,\n")
    report = merge_manual(manual, tmp_path)
    assert report.unknown_students == ["zed"] and len(report.unknown_checks) == 1
    assert any("automatically" in p for p in report.problems)
    assert report.clamped == ["alice: answers.scaling_factor: 9 -> 5"]
    results = json.loads((tmp_path / "submissions" / "alice" / "results.json").read_text())
    checks = {c["id"]: c for c in results["parts"][0]["checks"]}
    assert checks["answers.layer_norm"]["status"] == "passed" and checks["answers.layer_norm"]["score"] == 4
    assert checks["answers.layer_norm"]["details"]["comment"] == "good but short"
    assert checks["answers.base_parameters"]["score"] == 6.0
    assert results["score"] == 15.0 and results["parts"][0]["score"] == 15.0
    assert "graded by hand" in (tmp_path / "submissions" / "alice" / "report.html").read_text()
    assert "15" in (tmp_path / "gradebook.csv").read_text()
    before = (tmp_path / "submissions" / "alice" / "results.json").read_bytes()
    again = merge_manual(manual, tmp_path)
    assert again.applied == [] and len(again.unchanged) == 2
    assert (tmp_path / "submissions" / "alice" / "results.json").read_bytes() == before
    # the command reports the unknown rows and exits 1; the known ones are merged
    assert cmd_merge([str(manual), "--out", str(tmp_path)]) == 1


def test_merged_scores_come_back_after_a_regrade_of_the_same_input(tmp_path):
    from graders.batch.merge import apply_stored_manual

    store.publish(tmp_path, "alice", written_results(), {"key": "a"})
    manual = tmp_path / "manual.csv"
    manual.write_text("student_id,check_id,score\nalice,answers.layer_norm,5\n")
    merge_manual(manual, tmp_path)
    fresh = written_results()
    assert apply_stored_manual(tmp_path, "alice", fresh) == 1 and fresh["score"] == 11.0
    other_input = written_results()
    other_input["batch"]["input_sha256"] = "f" * 64
    assert apply_stored_manual(tmp_path, "alice", other_input) == 0


# ------------------------------------------------------------------------------- Slurm script


def fake_sbatch(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "sbatch-calls"
    record.mkdir()
    script = bin_dir / "sbatch"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        n=$(ls {record} | wc -l)
        echo "$@" > {record}/args-$n
        cp "$1" {record}/script-$n
        echo "Submitted batch job 1234"
        """))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    srun = bin_dir / "srun"  # submitit looks for it to decide that this is a Slurm cluster
    srun.write_text("#!/bin/sh\nexit 0\n")
    srun.chmod(0o755)
    return bin_dir, record


@pytest.mark.slow
def test_slurm_backend_submits_one_capped_array_of_the_unfinished(tmp_path, monkeypatch):
    bin_dir, record = fake_sbatch(tmp_path)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    subs = tmp_path / "subs"
    subs.mkdir()
    for name in ["a", "b", "c", "d", "e"]:
        (subs / f"{name}.zip").write_bytes(name.encode())
    out = tmp_path / "out"
    # one is finished under the current key already: it must not be submitted
    from graders.batch.cli import _batch_parser, config_from_args
    from graders.batch.run import plan

    args = ["--out", str(out), "--parts", "attention", "--backend", "slurm", "--no-wait",
            "--slurm-partition", "gpu", "--slurm-gpus-per-job", "1", "--slurm-parallelism", "3",
            "--slurm-time", "30", "--slurm-setup", "module load cuda"]
    parser = _batch_parser(HOMEWORK)
    config = config_from_args(parser.parse_args([str(subs), *args]), parser, HOMEWORK)
    specs, _ = plan(HOMEWORK, subs, out, config)
    done = next(s for s in specs if s["student_id"] == "a")
    store.publish(out, "a", fake_results(8.0), {"key": done["key"]})

    assert cmd_batch([str(subs), *args], "bert") == 1  # submitted, not collected yet
    script = (record / "script-0").read_text()
    assert "#SBATCH --array=0-3%3" in script
    assert "#SBATCH --gpus-per-node=1" in script
    assert "#SBATCH --partition=gpu" in script
    assert "#SBATCH --time=32" in script  # 30 min of work, USR2 90 s before the end, a margin
    assert "module load cuda" in script
    assert (record / "args-0").read_text().split()[0].endswith(".sh")
    submitted = [e for e in store.read_ledger(out) if e["event"] == "slurm-submit"]
    assert submitted[-1]["tasks"] == 4 and submitted[-1]["job_id"] == "1234"


# ------------------------------------------------------------- Slurm: states, budgets, node failures


def test_a_machine_that_cannot_isolate_is_a_node_failure_not_a_grade(tmp_path, monkeypatch):
    """The real run_one, on a machine without bubblewrap: it says so at once (before torch), the
    job is not retried there, and the error row names the machine and the whole refusal."""
    monkeypatch.setenv("TRANSFORMER_GRADER_BWRAP", "")  # bubblewrap is nowhere
    spec = {"out": str(tmp_path / "out"), "student_id": "alice", "source": str(tmp_path / "alice.zip"),
            "input_sha256": "1" * 64, "key": "key-alice", "parts": ["attention"], "assignment": str(HOMEWORK.folder)}
    (result,) = run_pool([Job(spec, tmp_path / "out" / store.STATE, 60.0, retries=2)], slots=1)
    assert result.outcome == "error" and result.attempts == 1
    assert f"the machine {os.uname().nodename} cannot grade: it cannot isolate student code" in result.reason
    assert "\n" not in result.reason and "bubblewrap" in result.reason.lower()
    assert store.read_marker(tmp_path / "out", "alice")["final"] is False  # the next run (or node) tries again
    assert events(tmp_path / "out", "retry") == [] and events(tmp_path / "out", "node-failure") == ["alice"]
    rebuild(tmp_path / "out")
    with (tmp_path / "out" / "gradebook.csv").open() as handle:
        (row,) = csv.DictReader(handle)
    assert row["status"] == "error" and row["isolation"] == "" and "cannot isolate" in row["reason"]


def test_a_task_budget_ends_the_job_with_a_final_error_that_says_why(tmp_path):
    (job,) = stand_in_jobs(tmp_path, ["hang"], hard_timeout=60)
    job.deadline = time.monotonic() + 1.5
    job.deadline_reason = "the Slurm task's time ran out (--slurm-time 0.025 min for every attempt)"
    (result,) = run_pool([job], slots=1)
    assert result.outcome == "error" and "time ran out" in result.reason
    assert store.read_marker(tmp_path / "out", "hang")["final"] is True


def test_slurm_asks_for_the_work_plus_submitits_warning_signal():
    from graders.batch.slurm import requested_minutes

    assert requested_minutes(30) == 32
    assert requested_minutes(0.25) == 3
    assert requested_minutes(1) == 3


def test_task_states_come_from_squeue_then_sacct_then_scontrol_then_the_log(tmp_path, monkeypatch):
    from graders.batch import slurm

    outputs = {
        "squeue": "0|RUNNING|None|node1\n1|PENDING|JobArrayTaskLimit|\n",
        "sacct": "7_2|CANCELLED by 0|0:0|node1|None\n7_3|RUNNING|0:0|node1|None\n7_4|FAILED|0:9|node2|None\n",
        "scontrol": "JobId=12 ArrayJobId=7 ArrayTaskId=3 JobState=TIMEOUT Reason=TimeLimit BatchHost=node1 ExitCode=0:15\n",
    }
    monkeypatch.setattr(slurm, "_command", lambda argv: outputs.get(argv[0]))
    log = tmp_path / store.STATE / "submitit" / "7_5_0_log.err"
    log.parent.mkdir(parents=True)
    log.write_text("slurmstepd: error: *** JOB 14 ON node3 CANCELLED AT 2026-01-01T00:00:00 ***\n")
    states = slurm.task_states(tmp_path, "7", [0, 1, 2, 3, 4, 5, 6], accounting=True)
    assert (states[0].state, states[0].node) == ("RUNNING", "node1")
    assert (states[1].state, states[1].reason) == ("PENDING", "JobArrayTaskLimit")
    assert (states[2].state, states[2].by, states[2].source) == ("CANCELLED", "root", "sacct")
    assert (states[3].state, states[3].source) == ("TIMEOUT", "scontrol")  # sacct's RUNNING is stale
    assert (states[4].state, states[4].exit_code) == ("FAILED", "0:9")
    assert (states[5].state, states[5].node, states[5].source) == ("CANCELLED", "node3", "log")
    assert states[6].source == "none" and states[6].ended
    # without accounting, sacct is never asked
    asked = []
    monkeypatch.setattr(slurm, "_command", lambda argv: asked.append(argv[0]) or outputs.get(argv[0]))
    slurm.task_states(tmp_path, "7", [2], accounting=False)
    assert "sacct" not in asked


def test_an_ended_task_is_settled_once_cancels_are_never_resubmitted(tmp_path):
    from graders.batch.slurm import TaskState, settle

    out = tmp_path / "out"
    options = {"mem_gb": 6}

    def spec(sid):
        return {"out": str(out), "student_id": sid, "source": str(tmp_path / f"{sid}.zip"), "input_sha256": "1" * 64,
                "key": f"key-{sid}", "parts": ["attention"], "assignment": str(HOMEWORK.folder)}

    assert settle(out, spec("a"), TaskState("CANCELLED", node="n1", by="alice", source="sacct"), True, options) is None
    assert "cancelled by alice while it ran on n1" in json.loads((out / "submissions/a/results.json").read_text())["reason"]
    assert store.read_marker(out, "a")["final"] is True
    # pending, then gone without a trace: cancelled before it started
    assert settle(out, spec("b"), TaskState("", source="none"), False, options, seen_pending=True) is None
    assert "before it started" in json.loads((out / "submissions/b/results.json").read_text())["reason"]
    # lost: submitted again, nothing published yet
    assert "failed on n2" in settle(out, spec("c"), TaskState("FAILED", node="n2", exit_code="0:9"), True, options)
    assert "out of memory" in settle(out, spec("d"), TaskState("OUT_OF_MEMORY", node="n2"), True, options)
    assert settle(out, spec("e"), TaskState("", source="none"), False, options, seen_pending=False) is not None
    assert store.read_marker(out, "c") is None and store.read_marker(out, "e") is None
    # Slurm's own time limit: the same request would end the same way; a final row, not resubmitted
    options["work_min"] = "30"
    assert settle(out, spec("f"), TaskState("TIMEOUT", node="n1", source="sacct"), True, options) is None
    reason = json.loads((out / "submissions/f/results.json").read_text())["reason"]
    assert "Slurm's time limit ended its task on n1 (--slurm-time 30 min" in reason
    assert store.read_marker(out, "f")["final"] is True


def test_a_slurm_task_imports_no_torch():
    """An array task runs the supervisor only; its run_one process is the one that grades."""
    import subprocess

    code = "import sys, graders.batch.slurm, graders.batch.supervise; print(sorted({'torch', 'graders.grading'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_pending_reasons_are_said_in_words_and_a_silent_slurm_too(monkeypatch, tmp_path):
    from graders.batch import slurm

    states = {0: slurm.TaskState("RUNNING"), 1: slurm.TaskState("PENDING", "JobArrayTaskLimit"),
              2: slurm.TaskState("PENDING", "Resources")}
    text = slurm._waiting_text(states)
    assert text == ("1 running; 1 waiting: the array's --slurm-parallelism cap (JobArrayTaskLimit); "
                    "1 waiting: no node has the CPUs, memory or GPUs free yet (Resources)")
    monkeypatch.setattr(slurm, "_command", lambda argv: None)  # the controller does not answer
    unknown = slurm.task_states(tmp_path, "7", [0, 1], accounting=True)
    assert not any(s.ended for s in unknown.values()), "nothing is decided while Slurm is silent"
    assert "Slurm does not answer" in slurm._waiting_text(unknown)


class Graded(Exception):
    """The batch went past its checks and would have graded."""


def test_a_container_batch_whose_workers_get_the_gpu_grades_one_at_a_time_or_refuses(monkeypatch, tmp_path, capsys):
    """At container isolation a worker given the GPU keeps the machine's file system: two graded
    at once could pass files to each other through /tmp."""
    from graders.batch import cli, run

    def graded(*args, **kwargs):
        raise Graded

    monkeypatch.setattr(cli, "refuse_unless_isolated", lambda *args, **kwargs: None)  # this machine's layers apart
    monkeypatch.setattr(run, "run_batch", graded)
    (tmp_path / "course" / "alice").mkdir(parents=True)
    batch = [str(tmp_path / "course"), "--out", str(tmp_path / "out"), "--no-progress", "--isolation", "container"]
    assert cli.cmd_batch([*batch, "--device", "cuda", "--jobs", "2"], "bert") == 3
    refusal = capsys.readouterr().err
    assert "could pass files to each other" in refusal and "fix: --jobs 1" in refusal
    for holds in (["--device", "cuda", "--jobs", "1"], ["--device", "cpu", "--jobs", "2"],
                  ["--device", "cuda", "--jobs", "2", "--parts", "attention"]):  # no worker of its own gets the GPU
        with pytest.raises(Graded):
            cli.cmd_batch([*batch, *holds], "bert")
