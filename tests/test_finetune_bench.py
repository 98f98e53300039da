"""The fine-tuning benchmark runs end to end (tiny settings: this checks the script, not the speed)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_finetune.py"


@pytest.mark.slow
def test_benchmark_reports_both_paths(tmp_path):
    out = tmp_path / "bench.json"
    command = [sys.executable, str(BENCH), "--threads", "1", "--reviews", "32", "--epochs", "1", "--hidden-dim", "8",
               "--n-layers", "1", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TRANSFORMER_GRADER_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["reviews"] == 32 and result["tokens"] > 32
    for key in ("cached_epoch_s", "naive_epoch_s", "cache_build_s", "speedup"):
        assert result[key]["wall"] > 0 and result[key]["cpu"] > 0
    assert set(result["peak_memory_mb"]) == {"build", "cached", "naive"}
    assert "naive / cached" in done.stdout


REHEARSAL = BENCH.parent / "bench_gpu_rehearsal.py"


@pytest.mark.slow
def test_the_rehearsals_course_mode_grades_every_part_and_extrapolates(tmp_path):
    # A course of 2 (the reference and the seed-004 student) over 20 + 20 synthetic reviews and a
    # one-layer encoder, on CPU: the mode's plumbing, not its speed.
    out = tmp_path / "rehearsal.json"
    command = [sys.executable, str(REHEARSAL), "--device", "cpu", "--scale", "0.0008", "--encoder-size", "tiny",
               "--steps", "course", "--course", "2", "--budget", "120", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    course = figures["course"]
    assert course["exit"] == 0 and course["graded"] == 2, course
    assert course["per_submission_s"] > 0 and course["course_400_h"] == pytest.approx(
        course["per_submission_s"] * 400 / 3600, abs=0.01)
    assert course["cpu_s"] > 0 and course["busy_cores"] > 0 and course["gpu_peak_mib"] is None  # CPU: no nvidia-smi sample
    # the sandboxed workers' CPU is no child's of the rehearsal: the machine's busy time holds it
    assert course["machine_cpu_s"] > course["cpu_s"] and course["cpu_per_submission_s"] > 0
    assert course["concurrency"].startswith("grading ")
    assert len(course["scores"]) == 2  # the reference and the seed-004 student differ: every part was graded
    assert course["statuses"] == {"graded": 2} and course["skipped_checks"] == 0, course
    assert "per submission" in done.stdout and "for 400" in done.stdout
    # Issue 45: where the time outside training went, stage by stage; the data prepared once by the batch
    stages = course["stages"]
    assert stages["prepared_by"] == ["the batch"] and stages["batch_preparation_s"] > 0, stages
    assert 0 <= stages["preparation_s"] < stages["batch_preparation_s"], stages
    assert 0 < stages["training_s"] < stages["process_s"] and stages["cpu_parts_s"] > 0, stages
    assert stages["outside_training_per_job_s"] == pytest.approx(stages["process_s"] - stages["training_s"], abs=0.01)
    assert all(stages[key] > 0 for key in ("probe_s", "setup_s", "worker_start_s", "own_worker_start_s", "close_s"))
    assert "outside training:" in done.stdout


def test_a_step_stopped_by_the_runners_time_keeps_what_it_measured(tmp_path):
    """gpu-runner.sh stops the rehearsal with SIGINT when its time is up: the step running then
    is recorded as interrupted, with its time so far, and saved (a course then counts the
    submissions that finished), instead of losing the step."""
    spec = importlib.util.spec_from_file_location("rehearsal", REHEARSAL)
    rehearsal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rehearsal)
    figures, saved = {}, tmp_path / "figures.json"
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    done = rehearsal.timed("course", [sys.executable, "-c", "import time; time.sleep(60)"], figures, "cpu",
                           dict(os.environ), saved)
    assert done.returncode == -signal.SIGINT
    assert figures["course"]["interrupted"] and 0.5 < figures["course"]["wall_s"] < 30, figures
    assert json.loads(saved.read_text()) == figures
