"""How many submissions `grade batch` grades at a time on this machine, and on which GPUs.

Each job is a submission's whole grade: its CPU parts run on the cores while its fine-tuning trains
on a GPU, so with several jobs one submission's CPU parts overlap another's training. The cores
bound the jobs (as before GPUs were counted), and each GPU takes as many jobs as its memory holds
at GPU_MIB_PER_JOB each. `--jobs` and `--gpus` override either choice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

# A grade's peak on the GPU with the worker's expandable segments: 7.2 GiB for one grade on an
# H100 and 58.8 GiB for 8 at once on an H200 (docs/finetune.md), with a margin for a student's
# larger model.
GPU_MIB_PER_JOB = 8 * 1024


@dataclass(frozen=True)
class Concurrency:
    jobs: int
    gpus: list[str] | None  # None leaves CUDA_VISIBLE_DEVICES as the driver's environment has it
    reason: str


def usable_cores(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The cores this process may run on, not the machine's: its affinity (a Slurm allocation's,
    a container's cpuset), bounded by its cgroup's CPU quota (a container given 2 CPUs of a
    64-core host sees 64 in its affinity)."""
    try:
        cores = len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # macOS has no affinity
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root)
    return max(1, min(cores, int(quota))) if quota is not None else cores


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs' worth of time this process's cgroup may use, or None (no quota, or not Linux):
    cgroup v2's cpu.max (`quota period`), else v1's cpu.cfs_quota_us over cpu.cfs_period_us."""
    def read(name):
        try:
            with open(os.path.join(root, name)) as file:
                return file.read().split()
        except (OSError, ValueError):
            return None

    v2 = read("cpu.max")
    if v2 and len(v2) == 2 and v2[0] != "max":
        quota, period = v2
    else:
        quota, period = (read("cpu/cpu.cfs_quota_us") or [None])[0], (read("cpu/cpu.cfs_period_us") or [None])[0]
    try:
        quota, period = int(quota), int(period)
    except (TypeError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def gpu_memory_mib() -> dict[str, int]:
    """Total memory of each GPU by nvidia-smi's index (PCI bus order); empty without nvidia-smi.
    Asked of nvidia-smi so that the driver process never starts CUDA itself."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    memory = {}
    for line in done.stdout.splitlines() if done.returncode == 0 else []:
        index, _, total = (field.strip() for field in line.partition(","))
        if index.isdigit() and total.isdigit():
            memory[index] = int(total)
    return memory


def choose(jobs: int, gpus: list[str] | None, *, cores: int, gpu_memory: dict[str, int],
           visible_devices: str | None) -> Concurrency:
    """`jobs` (0: choose) and `gpus` (None: choose) as given on the command line.

    GPUs: those given; else, when the environment names none (CUDA_VISIBLE_DEVICES unset), every
    GPU nvidia-smi lists; else none (the environment's choice stands). Jobs: those given; else one
    per core, and no more than the chosen GPUs' memory holds at GPU_MIB_PER_JOB each (a GPU whose
    memory is unknown, a UUID or a MIG instance, does not bound them)."""
    if gpus is None and visible_devices is None and gpu_memory:
        gpus = sorted(gpu_memory, key=int)
    if jobs > 0:
        return Concurrency(jobs, gpus, "--jobs")
    reasons = [f"{cores} cores"]
    held = [gpu_memory[gpu] // GPU_MIB_PER_JOB for gpu in gpus or [] if gpu in gpu_memory]
    chosen = cores
    if held and len(held) == len(gpus):
        chosen = min(cores, max(sum(held), 1))
        reasons.append(f"{len(gpus)} GPU(s) holding {sum(held)} jobs of {GPU_MIB_PER_JOB // 1024} GiB")
    return Concurrency(max(chosen, 1), gpus, ", ".join(reasons))


def for_this_machine(jobs: int, gpus: list[str] | None) -> Concurrency:
    return choose(jobs, gpus, cores=usable_cores(), gpu_memory=gpu_memory_mib(),
                  visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))
