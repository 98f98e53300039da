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
