"""The fine-tuning benchmark runs end to end (tiny settings: this checks the script, not the speed)."""

import json
import os
import subprocess
import sys
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
    assert course["concurrency"].startswith("grading ")
    assert len(course["scores"]) == 2  # the reference and the seed-004 student differ: every part was graded
    assert course["statuses"] == {"graded": 2} and course["skipped_checks"] == 0, course
    assert "per submission" in done.stdout and "for 400" in done.stdout
