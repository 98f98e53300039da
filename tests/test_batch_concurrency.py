"""How many submissions `grade batch` grades at a time, and that neither the choice nor what its jobs
share changes any score."""

import json
import shutil
from pathlib import Path

import pytest

from graders.batch.cli import cmd_batch
from graders.batch.concurrency import GPU_MIB_PER_JOB, cgroup_cpu_quota, choose, usable_cores
from graders.grading import grade
from graders.sandbox import Limits
from tests.course import BERT, REFERENCE_DIR

REPO = Path(__file__).resolve().parent.parent
SEED004 = REPO / "fixtures" / "bert" / "submissions" / "seed004_student"
H200_MIB = 143_771


def test_a_cpu_machine_grades_one_submission_per_core_and_leaves_the_gpus_alone():
    chosen = choose(0, None, cores=2, gpu_memory={}, visible_devices=None)
    assert (chosen.jobs, chosen.gpus) == (2, None)


def test_a_gpu_runner_uses_every_gpu_and_as_many_jobs_as_cores_and_memory_allow():
    chosen = choose(0, None, cores=16, gpu_memory={"0": H200_MIB}, visible_devices=None)
    assert (chosen.jobs, chosen.gpus) == (16, ["0"])  # 17 jobs fit in the H200's memory: the cores bound them
    small = choose(0, None, cores=16, gpu_memory={"0": 2 * GPU_MIB_PER_JOB, "1": 3 * GPU_MIB_PER_JOB},
                   visible_devices=None)
    assert (small.jobs, small.gpus) == (5, ["0", "1"])
    tiny = choose(0, None, cores=16, gpu_memory={"0": GPU_MIB_PER_JOB // 2}, visible_devices=None)
    assert tiny.jobs == 1


def test_flags_and_the_environment_override_the_choice():
    memory = {"0": 2 * GPU_MIB_PER_JOB, "1": 2 * GPU_MIB_PER_JOB}
    assert choose(7, None, cores=16, gpu_memory=memory, visible_devices=None).jobs == 7
    only_one = choose(0, ["1"], cores=16, gpu_memory=memory, visible_devices=None)
    assert (only_one.jobs, only_one.gpus) == (2, ["1"])
    scheduled = choose(0, None, cores=16, gpu_memory=memory, visible_devices="1")  # e.g. Slurm's choice
    assert (scheduled.jobs, scheduled.gpus) == (16, None)
    unknown = choose(0, ["GPU-1234"], cores=16, gpu_memory=memory, visible_devices=None)
    assert unknown.jobs == 16  # a GPU named by UUID has no known memory: the cores alone bound the jobs


def _scores(out: Path) -> dict:
    scores = {}
    for path in sorted((out / "submissions").glob("*/results.json")):
        results = json.loads(path.read_text())
        scores[path.parent.name] = (results["score"], [(check["id"], check["score"], check["status"])
                                                       for part in results["parts"] for check in part["checks"]])
    return scores


@pytest.mark.parametrize("files, quota", [
    ({"cpu.max": "200000 100000\n"}, 2.0),  # cgroup v2: a container given 2 CPUs
    ({"cpu.max": "max 100000\n"}, None),  # v2, no quota
    ({"cpu/cpu.cfs_quota_us": "150000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1.5),  # cgroup v1
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no quota
    ({}, None),  # no cgroup file system
], ids=["v2", "v2-max", "v1", "v1-none", "none"])
def test_a_containers_cpu_quota_bounds_the_cores_it_counts(tmp_path, files, quota):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_quota(str(tmp_path)) == quota
    unbounded = usable_cores(str(tmp_path / "nothing"))
    assert usable_cores(str(tmp_path)) == (max(1, min(unbounded, int(quota))) if quota else unbounded)


@pytest.mark.slow
def test_concurrency_and_sharing_change_no_score(tmp_path):
    # The reference and the seed-004 student, fine-tuned on the smoke set (the shipped small set,
    # no --imdb): the part that shares a feature cache, a device and, since issue 45, the data the
    # batch prepares once for all its jobs. A fresh cache for each run, so the batch builds it. A
    # budget that never binds: a loaded machine stopped smoke mode's budget (then 120 s) after one
    # epoch, and a stop by time is the one way the machine's load may change a score. Each must
    # score as it does graded alone, which prepares its own data in a cache of its own.
    subs = tmp_path / "subs"
    shutil.copytree(REFERENCE_DIR, subs / "reference", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(SEED004, subs / "seed004", ignore=shutil.ignore_patterns("__pycache__"))
    scores = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        argv = [str(subs), "--out", str(out), "--jobs", str(jobs), "--parts", "finetune", "--no-progress",
                "--finetune-budget", "3600", "--feature-cache", str(tmp_path / f"cache{jobs}")]
        assert cmd_batch(argv, "bert") == 0
        scores[jobs] = _scores(out)
        assert _prepared_by(out) == {"the batch"}
    alone = {}
    limits = Limits(submission_budget_s=Limits().submission_budget_s + 3600)  # as the batch's --finetune-budget 3600
    for name in ("reference", "seed004"):
        results = grade(subs / name, only_parts=["finetune"], assignment=BERT, limits=limits,
                        options={"feature_cache": tmp_path / "alone", "time_budget_s": 3600})
        alone[name] = (results["score"], [(check["id"], check["score"], check["status"])
                                          for part in results["parts"] for check in part["checks"]])
    assert sorted(scores[1]) == ["reference", "seed004"]
    assert sum(score for _, score, _ in scores[1]["reference"][1]) > 0  # smoke mode's points are provisional
    assert scores[1] == scores[2] == alone


def _prepared_by(out: Path) -> set:
    return {check["details"]["timings"]["prepared_by"] for path in (out / "submissions").glob("*/results.json")
            for part in json.loads(path.read_text())["parts"] for check in part["checks"]}
