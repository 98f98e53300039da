"""The Slurm backend: the unfinished submissions as one job array, through submitit.

Each array task runs `supervise.run_job(spec, ...)`: the very job the local backend runs (a
`run_one` subprocess under the hard wall-clock limit, retried for lost infrastructure), which
publishes its result folder atomically into the shared DIR. Resume and retry logic stays ours:
only submissions without a done-marker of the current key are submitted, and after the array
ends, the ones still without a result (a node lost, a task killed whole) are submitted again, up
to `retries` more rounds. Then the gradebook is rebuilt from the result folders, exactly as after
a local run.

The array is capped by `slurm_array_parallelism` (`#SBATCH --array=0-N%P`); a GPU job asks for
`gpus_per_node` GPUs per task (Slurm then sets CUDA_VISIBLE_DEVICES for it). DIR, the
submissions and the virtual environment must be on a file system the nodes share.

`cluster` "local" or "debug" runs the same array with submitit's LocalExecutor (subprocesses on
this machine) or DebugExecutor (in this process): the Slurm path without Slurm, for tests.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from graders.batch import store
from graders.batch.supervise import Finished, run_job

DEFAULTS = {"partition": None, "time_min": None, "mem_gb": 16, "gpus_per_job": 0, "cpus_per_task": 2,
            "parallelism": 64, "cluster": "slurm", "account": None, "qos": None, "setup": [], "wait": True,
            "constraint": None}
PENDING = "slurm-pending.json"


@dataclass
class SlurmOutcome:
    finished: list[Finished] = field(default_factory=list)
    submitted: int = 0
    job_id: str | None = None


def _executor(out: Path, config, options: dict, count: int):
    import submitit

    folder = out / store.STATE / "submitit"
    executor = submitit.AutoExecutor(folder=folder, cluster=options["cluster"])
    time_min = options["time_min"] or math.ceil(config.hard_timeout * (config.retries + 1) / 60) + 5
    parameters = {"name": "grade-batch", "timeout_min": int(time_min), "cpus_per_task": options["cpus_per_task"],
                  "mem_gb": options["mem_gb"], "slurm_array_parallelism": min(options["parallelism"], max(count, 1))}
    if options["gpus_per_job"]:
        parameters["gpus_per_node"] = options["gpus_per_job"]
    for ours, theirs in (("partition", "slurm_partition"), ("account", "slurm_account"), ("qos", "slurm_qos"),
                         ("constraint", "slurm_constraint")):
        if options[ours]:
            parameters[theirs] = options[ours]
    if options["setup"]:
        parameters["slurm_setup"] = list(options["setup"])
    executor.update_parameters(**parameters)
    return executor


def still_running(out: Path) -> str | None:
    """The id of an array this folder submitted earlier that Slurm still runs, if any."""
    try:
        job_id = json.loads((out / store.STATE / PENDING).read_text())["job_id"]
    except (OSError, ValueError, KeyError):
        return None
    squeue = shutil.which("squeue")
    if not squeue or not job_id:
        return None
    try:
        listed = subprocess.run([squeue, "-h", "-j", str(job_id)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return str(job_id) if listed.returncode == 0 and listed.stdout.strip() else None


def submit(todo: list[dict], out: Path, config) -> SlurmOutcome:
    options = {**DEFAULTS, **(config.slurm or {})}
    outcome = SlurmOutcome()
    if not todo:
        return outcome
    running = still_running(out)
    if running:
        raise RuntimeError(f"the Slurm array {running} of an earlier run on {out} is still queued or running; "
                           f"wait for it (or scancel it) and run again")
    state = str(out / store.STATE)
    rounds = config.retries + 1 if options["wait"] else 1
    for round_number in range(rounds):
        executor = _executor(out, config, options, len(todo))
        jobs = executor.map_array(run_job, todo, [state] * len(todo), [config.hard_timeout] * len(todo),
                                  [config.retries] * len(todo))
        outcome.submitted += len(jobs)
        outcome.job_id = str(jobs[0].job_id).split("_")[0] if jobs else None
        store.log_event(out, "slurm-submit", None, job_id=outcome.job_id, tasks=len(jobs), round=round_number + 1)
        (out / store.STATE / PENDING).write_text(json.dumps({"job_id": outcome.job_id, "tasks": len(jobs)}))
        if not options["wait"]:
            return outcome
        for spec, job in zip(todo, jobs):
            try:
                result = job.result()
                outcome.finished.append(Finished(result["student_id"], result["outcome"], result["reason"],
                                                 result["attempts"], result["wall_s"]))
            except Exception as error:  # the task itself was lost: resubmitted below
                store.log_event(out, "slurm-task-lost", spec["student_id"], error=str(error)[:300])
        todo = [s for s in todo if not store.is_done(out, s["student_id"], s["key"])]
        if not todo:
            break
    (out / store.STATE / PENDING).unlink(missing_ok=True)
    return outcome
