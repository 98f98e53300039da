"""The Slurm backend: the unfinished submissions as one job array, through submitit.

Each array task runs `run_task`: the very job the local backend runs (a `run_one` subprocess
under the hard wall-clock limit, retried for lost infrastructure), inside the task's own time
budget, publishing its result folder atomically into the shared DIR. submitit only submits: the
driver never waits on submitit's result pickles. It learns each task's state from Slurm itself
(`squeue` for the live tasks, then `sacct` where accounting exists, `scontrol` for the ended tasks
the controller still remembers, and last the task's own log), and the result of a submission is
its result folder, read as JSON.

Every submission sent to Slurm ends with exactly one result folder:

- the task published one (graded, rejected, or an error the task itself wrote: the hard time
  limit, the task's time budget, a grader bug): that is the result;
- the task was cancelled (`scancel`, pending or running): a final error result saying so; it is
  never resubmitted (`--redo-errors` grades it again);
- Slurm cannot ever run it as asked (a pending reason such as PartitionConfig): the array is
  cancelled and each such task gets a final error result with the reason;
- the node could not grade (no isolation, a missing dependency, a CUDA error; the task wrote a
  not-final error result naming the node), or the task was lost (node failure, preemption, out of
  memory, killed, ended without a result): submitted again in the next round, away from nodes
  that could not grade while others remain, up to `retries` more rounds; then a not-final error
  result saying what happened each time, which the next run grades again;
- the driver is interrupted (SIGINT, SIGTERM): the array is cancelled, and what has no result
  gets a not-final error result saying so; the interrupt then goes on up (exit status 1).

The array is capped by `slurm_array_parallelism` (`#SBATCH --array=0-N%P`); a GPU job asks for
`gpus_per_node` GPUs per task (Slurm then sets CUDA_VISIBLE_DEVICES for it). DIR, the
submissions and the virtual environment must be on a file system the nodes share.

`--slurm-time` is the task's own work (minutes, fractions allowed); Slurm is asked for that plus
submitit's warning signal (USR2 90 s before the end, after which submitit ends a task that cannot
checkpoint) and a margin, rounded up to whole minutes.

`cluster` "local" or "debug" runs the same array with submitit's LocalExecutor (subprocesses on
this machine) or DebugExecutor (in this process): the Slurm path without Slurm, for tests. There
the tasks' states come from submitit's job objects, whose results are not read either.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from graders.batch import store
from graders.batch.supervise import Finished, Interrupted, publish_error, run_job

DEFAULTS = {"partition": None, "time_min": None, "mem_gb": 6, "gpus_per_job": 0, "cpus_per_task": 2,
            "parallelism": 64, "cluster": "slurm", "account": None, "qos": None, "setup": [], "wait": True,
            "constraint": None}
PENDING = "slurm-pending.json"
SIGNAL_DELAY_S = 90  # submitit's --signal=USR2@90: a task that cannot checkpoint ends when it arrives
MARGIN_S = 30  # the task's own start (Python, submitit) and its end (publishing, Slurm's epilogue)
POLL_S = 2.0
COMMAND_TIMEOUT_S = 30
# Pending reasons after which a task can never start as it was asked for: the array is cancelled.
NEVER = {
    "PartitionConfig": "the partition cannot run it as asked (CPUs, memory, GPUs or time per task beyond its nodes' or its limits)",
    "BadConstraints": "no node has the features, CPUs, memory or GPUs asked for",
    "PartitionNodeLimit": "it asks for more nodes than the partition allows",
    "PartitionTimeLimit": "its time limit is beyond the partition's",
    "InvalidAccount": "the account is not valid",
    "InvalidQOS": "the QOS is not valid",
    "QOSMaxWallDurationPerJobLimit": "its time limit is beyond the QOS's",
    "AccountNotAllowed": "the account may not use this partition",
    "QOSNotAllowed": "the QOS may not be used on this partition",
}
WAITING = {
    "Resources": "no node has the CPUs, memory or GPUs free yet",
    "Priority": "other jobs have priority",
    "JobArrayTaskLimit": "the array's --slurm-parallelism cap",
    "ReqNodeNotAvail": "the nodes it may run on are down, drained or reserved",
    "Dependency": "a dependency",
    "BeginTime": "its begin time",
    "JobHeldUser": "held by a user (scontrol release)",
    "JobHeldAdmin": "held by an administrator",
    "Reservation": "a reservation",
    "NodeDown": "a node that is down",
    "launch failed requeued held": "a launch failure, held (scontrol release)",
}
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT")


@dataclass
class SlurmOutcome:
    finished: list[Finished] = field(default_factory=list)
    submitted: int = 0
    job_id: str | None = None
    note: str = ""


@dataclass
class TaskState:
    """What Slurm says of one array task. `state` is Slurm's (PENDING, RUNNING, CANCELLED, ...);
    `source` where it came from (squeue, sacct, scontrol, log, none)."""
    state: str
    reason: str = ""
    node: str = ""
    by: str = ""  # who cancelled it
    exit_code: str = ""
    source: str = ""

    @property
    def ended(self) -> bool:
        return self.source == "none" or (self.state.split() or [""])[0] in TERMINAL


def work_minutes(options: dict, config) -> float:
    """The task's own budget (--slurm-time), by default every attempt's hard timeout."""
    return float(options["time_min"] or math.ceil(config.hard_timeout * (config.retries + 1) / 60))


def requested_minutes(work_min: float) -> int:
    """What Slurm is asked for: the work, submitit's warning signal and a margin, in whole minutes."""
    return math.ceil((work_min * 60 + SIGNAL_DELAY_S + MARGIN_S) / 60)


def _executor(out: Path, config, options: dict, count: int, exclude: list[str] | None = None):
    import submitit

    folder = out / store.STATE / "submitit"
    executor = submitit.AutoExecutor(folder=folder, cluster=options["cluster"])
    parameters = {"name": "grade-batch", "timeout_min": requested_minutes(work_minutes(options, config)),
                  "cpus_per_task": options["cpus_per_task"], "mem_gb": options["mem_gb"],
                  "slurm_array_parallelism": min(options["parallelism"], max(count, 1))}
    if options["cluster"] == "slurm":
        parameters["slurm_signal_delay_s"] = SIGNAL_DELAY_S
        if exclude:
            parameters["slurm_exclude"] = ",".join(sorted(exclude))
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


def run_task(spec: dict, state_dir: str, hard_timeout_s: float, retries: int, budget_s: float,
             budget_min: float) -> dict:
    """The body of one array task: the local backend's job, within the task's time budget."""
    reason = (f"the Slurm task's time ran out (--slurm-time {budget_min:g} min for every attempt); "
              "give more with --slurm-time")
    return run_job(spec, state_dir, min(hard_timeout_s, budget_s), retries, budget_s=budget_s, budget_reason=reason)


# ------------------------------------------------------------------------------ asking Slurm


def _command(argv: list[str]) -> str | None:
    """The output of a Slurm command, or None when it is missing or fails."""
    program = shutil.which(argv[0])
    if program is None:
        return None
    try:
        done = subprocess.run([program, *argv[1:]], capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def accounting_enabled() -> bool:
    """Whether this cluster keeps job accounting (slurmdbd): `sacct` then knows every task."""
    config = _command(["scontrol", "show", "config"]) or ""
    found = re.search(r"^AccountingStorageType\s*=\s*(\S+)", config, re.M)
    return bool(found) and found.group(1) != "accounting_storage/none"


def _user(uid: str) -> str:
    try:
        return pwd.getpwuid(int(uid)).pw_name
    except (ValueError, KeyError):
        return uid


def _from_squeue(job_id: str) -> dict[int, TaskState] | None:
    listed = _command(["squeue", "-h", "-r", "-j", job_id, "-o", "%K|%T|%r|%N"])
    if listed is None:
        return None
    states = {}
    for line in listed.splitlines():
        index, state, reason, node = (line.split("|") + ["", "", "", ""])[:4]
        index = index.strip() if index.strip().isdigit() else "0"  # N/A: an array of one is a plain job
        states[int(index)] = TaskState(state.strip(), reason.strip(), node.strip(), source="squeue")
    return states


def _from_sacct(job_id: str) -> dict[int, TaskState]:
    listed = _command(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobID,State,ExitCode,NodeList,Reason"]) or ""
    states = {}
    for line in listed.splitlines():
        fields = (line.split("|") + [""] * 5)[:5]
        task = fields[0].split("_")
        if task[0] != job_id:
            continue
        if len(task) == 1 or task[1].isdigit():  # "123": an array of one is a plain job
            state = fields[1].strip()
            by = state.split(" by ", 1)[1] if " by " in state else ""
            states[int(task[1]) if len(task) == 2 else 0] = TaskState(state.split()[0] if state else "", fields[4].strip(), fields[3].strip(),
                                             _user(by) if by else "", fields[2].strip(), "sacct")
    return states


def _from_scontrol(job_id: str) -> dict[int, TaskState]:
    listed = _command(["scontrol", "-o", "show", "job", job_id]) or ""
    states = {}
    for line in listed.splitlines():
        values = dict(re.findall(r"(\w+)=(\S*)", line))
        task = values.get("ArrayTaskId", "0" if values.get("JobId") == job_id else "")
        if task.isdigit():
            node = values.get("BatchHost") or values.get("NodeList", "")
            states[int(task)] = TaskState(values.get("JobState", ""), values.get("Reason", ""),
                                                           "" if node == "(null)" else node, "",
                                                           values.get("ExitCode", ""), "scontrol")
    return states


LOG_ENDINGS = (("DUE TO TIME LIMIT", "TIMEOUT"), ("DUE TO NODE FAILURE", "NODE_FAIL"),
               ("DUE TO PREEMPTION", "PREEMPTED"), ("CANCELLED AT", "CANCELLED"),
               ("oom-kill", "OUT_OF_MEMORY"), ("Out Of Memory", "OUT_OF_MEMORY"))


def _task_logs(out: Path, job_id: str, index: int) -> list[Path]:
    """The task's submitit logs that exist (an array of one is a plain job: `JOB_0_log.*`)."""
    folder = out / store.STATE / "submitit"
    names = [f"{job_id}_{index}_0_log", *([f"{job_id}_0_log"] if index == 0 else [])]
    return [folder / f"{name}.{kind}" for name in names for kind in ("err", "out") if (folder / f"{name}.{kind}").exists()]


def _from_log(out: Path, job_id: str, index: int) -> TaskState | None:
    """What slurmstepd wrote in the task's stderr when it ended it."""
    errors = [p for p in _task_logs(out, job_id, index) if p.suffix == ".err"]
    if not errors:
        return None
    path = errors[0]
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - 20000))
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        if "slurmstepd" in line or "oom" in line.lower():
            for words, state in LOG_ENDINGS:
                if words in line:
                    node = re.search(r" ON (\S+) ", line)
                    return TaskState(state, node=node.group(1) if node else "", source="log")
    return None


def task_states(out: Path, job_id: str, indices: list[int], accounting: bool) -> dict[int, TaskState]:
    """The state of each task of the array: live ones from squeue; ended ones from sacct (with
    accounting), scontrol (ended not long ago), the task's log; `none` when Slurm knows nothing."""
    live = _from_squeue(job_id)
    if live is None:  # squeue failed (the controller restarting): nothing is decided on this poll
        return {i: TaskState("UNKNOWN", source="squeue-failed") for i in indices}
    ended: dict[int, TaskState] = {}
    missing = [i for i in indices if i not in live]
    if missing and accounting:
        ended.update({i: s for i, s in _from_sacct(job_id).items() if i in missing and s.ended})
    if [i for i in missing if i not in ended]:
        ended.update({i: s for i, s in _from_scontrol(job_id).items()
                      if i in missing and i not in ended and s.ended})
    states = {}
    for index in indices:
        if index in live:
            states[index] = live[index]
        elif index in ended:
            states[index] = ended[index]
        else:
            states[index] = _from_log(out, job_id, index) or TaskState("", source="none")
    return states


def scancel(job_id: str) -> None:
    _command(["scancel", job_id])


# ------------------------------------------------------------------------------ the driver


def still_running(out: Path) -> str | None:
    """The id of an array this folder submitted earlier that Slurm still runs, if any."""
    job_id = (_read_pending(out) or {}).get("job_id")
    if not job_id or not shutil.which("squeue"):
        return None
    listed = _command(["squeue", "-h", "-j", str(job_id)])
    return str(job_id) if listed and listed.strip() else None


def _read_pending(out: Path) -> dict | None:
    try:
        return json.loads((out / store.STATE / PENDING).read_text())
    except (OSError, ValueError):
        return None


def _write_pending(out: Path, job_id: str, tasks: dict[int, str], round_number: int) -> None:
    path = out / store.STATE / PENDING
    temporary = path.with_name(f".{PENDING}.{os.getpid()}")
    temporary.write_text(json.dumps({"job_id": job_id, "tasks": {str(i): s for i, s in tasks.items()},
                                     "round": round_number}))
    os.replace(temporary, path)


def say(text: str) -> None:
    print(f"grade batch: slurm: {text}", file=sys.stderr, flush=True)


def _node_failures(out: Path, todo: list[dict]) -> dict[str, str]:
    """student id -> the host of a not-final error result a task wrote (its node could not grade)."""
    hosts = {}
    for spec in todo:
        marker = store.read_marker(out, spec["student_id"])
        if marker and marker.get("key") == spec["key"] and not marker.get("final", True):
            try:
                results = json.loads((store.result_dir(out, spec["student_id"]) / "results.json").read_text())
                hosts[spec["student_id"]] = str((results.get("batch") or {}).get("host") or "")
            except (OSError, ValueError):
                hosts[spec["student_id"]] = ""
    return hosts


def _partition_nodes(partition: str | None) -> set[str]:
    listed = _command(["sinfo", "-h", "-N", "-o", "%N", *(["-p", partition] if partition else [])]) or ""
    return {line.strip() for line in listed.splitlines() if line.strip()}


def _published(out: Path, spec: dict) -> bool:
    marker = store.read_marker(out, spec["student_id"])
    return marker is not None and marker.get("key") == spec["key"]


def _cancelled_reason(state: TaskState, seen_running: bool) -> str:
    who = f" by {state.by}" if state.by else ""
    where = f" while it ran on {state.node}" if seen_running or (state.node and state.node != "None assigned") \
        else " before it started"
    return (f"its Slurm task was cancelled{who}{where} (scancel); not resubmitted: "
            "`grade batch ... --redo-errors` grades it again")


def _loss(state: TaskState, seen_running: bool, options: dict) -> str:
    node = f" on {state.node}" if state.node and state.node != "None assigned" else ""
    kind = state.state.split()[0] if state.state else ""
    if kind == "OUT_OF_MEMORY":
        return f"its Slurm task ran out of memory{node} (--slurm-mem-gb {options['mem_gb']})"
    if kind == "NODE_FAIL":
        return f"its node failed{node}"
    if kind == "PREEMPTED":
        return f"its Slurm task was preempted{node}"
    if kind in ("FAILED", "BOOT_FAIL"):
        return f"its Slurm task failed{node} (exit code {state.exit_code or '?'}; killed?)"
    if kind == "COMPLETED":
        return f"its Slurm task ended{node} without a result"
    return f"its Slurm task vanished{node} (no record of how it ended)" if seen_running \
        else "its Slurm task vanished before it started"


def settle(out: Path, spec: dict, state: TaskState, seen_running: bool, options: dict,
           seen_pending: bool = True) -> str | None:
    """After a task ended: None when its submission has its result (published by the task, or a
    final error written here for a cancel); else what was lost (it is submitted again). A task
    that left the queue without a trace after it was seen pending was cancelled (Slurm keeps no
    record of an array task cancelled before it started)."""
    if _published(out, spec):
        marker = store.read_marker(out, spec["student_id"]) or {}
        return None if marker.get("final", True) else "node"
    kind = state.state.split()[0] if state.state else ""
    if kind == "CANCELLED" or (state.source == "none" and seen_pending and not seen_running):
        publish_error(spec, _cancelled_reason(state, seen_running), final=True)
        store.log_event(out, "slurm-cancelled", spec["student_id"], by=state.by, node=state.node, source=state.source)
        return None
    if kind == "TIMEOUT":  # Slurm's own limit, before the task's budget ended its job: the same again would too
        node = f" on {state.node}" if state.node and state.node != "None assigned" else ""
        publish_error(spec, f"Slurm's time limit ended its task{node} (--slurm-time {options.get('work_min', '?')} "
                            "min of work asked); give more with --slurm-time", final=True)
        store.log_event(out, "slurm-timeout", spec["student_id"], node=state.node, source=state.source)
        return None
    loss = _loss(state, seen_running, options)
    store.log_event(out, "slurm-task-lost", spec["student_id"], state=state.state, node=state.node,
                    source=state.source, reason=loss)
    return loss


class _Signals:
    """SIGINT/SIGTERM raise Interrupted while the driver waits (main thread only)."""

    def __enter__(self):
        self.previous = {}
        if threading.current_thread() is threading.main_thread():
            def interrupted(signum, frame):
                raise Interrupted(signal.Signals(signum).name)
            self.previous = {s: signal.signal(s, interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc_info):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def _why(reason: str) -> str:
    if reason in ("", "None"):
        return "not scheduled yet"
    return f"{NEVER.get(reason) or WAITING.get(reason) or reason} ({reason})"


def _waiting_text(states: dict[int, TaskState]) -> str:
    reasons: dict[str, int] = {}
    for state in states.values():
        if state.state == "PENDING":
            reasons[state.reason] = reasons.get(state.reason, 0) + 1
    parts = [f"{n} waiting: {_why(r)}" for r, n in sorted(reasons.items())]
    running = sum(1 for s in states.values() if s.state in ("RUNNING", "COMPLETING", "CONFIGURING"))
    if any(s.source == "squeue-failed" for s in states.values()):
        return "Slurm does not answer (squeue failed); asking again"
    return "; ".join(([f"{running} running"] if running else []) + parts)


def _submitit_states(jobs) -> dict[int, TaskState]:
    """The local and debug executors: the task's state from submitit's job object."""
    states = {}
    for index, job in enumerate(jobs):
        try:
            done = job.done()
        except Exception:  # noqa: BLE001 - a job submitit cannot read counts as ended
            done = True
        states[index] = TaskState("COMPLETED" if done else "RUNNING", source="submitit")
    return states


def _wait(out: Path, job_id: str, jobs, specs: dict[int, dict], options: dict, accounting: bool,
          losses: dict[str, list[str]]) -> None:
    """Until every task of the array has ended: settle each as it ends, report pending reasons,
    cancel what Slurm can never run."""
    slurm = options["cluster"] == "slurm"
    open_tasks = dict(specs)
    seen_running: set[int] = set()
    seen_pending: set[int] = set()
    never_seen: dict[int, int] = {}
    last_text = ""
    while open_tasks:
        if slurm:
            states = task_states(out, job_id, sorted(open_tasks), accounting)
        else:
            states = {i: s for i, s in _submitit_states(jobs).items() if i in open_tasks}
        seen_running |= {i for i, s in states.items() if s.state in ("RUNNING", "COMPLETING")}
        seen_pending |= {i for i, s in states.items() if s.state == "PENDING"}
        text = _waiting_text(states)
        if text and text != last_text:
            say(f"array {job_id}: {text}")
            store.log_event(out, "slurm-wait", None, job_id=job_id, state=text)
            last_text = text
        for index, state in states.items():
            if state.state == "PENDING" and state.reason in NEVER:
                never_seen[index] = never_seen.get(index, 0) + 1
        hopeless = [i for i, n in never_seen.items() if n >= 2 and i in open_tasks]
        if hopeless:
            reason = states[hopeless[0]].reason
            say(f"array {job_id}: Slurm cannot run it as asked: {NEVER[reason]} ({reason}); cancelling it")
            scancel(job_id)
            for index in [i for i in open_tasks if states.get(i) and states[i].state == "PENDING"]:
                spec = open_tasks.pop(index)
                if not _published(out, spec):
                    publish_error(spec, f"Slurm cannot run its task as asked: {NEVER[reason]} (pending reason "
                                        f"{reason}); change the --slurm-* options", final=True)
            continue
        for index, state in states.items():
            if index in open_tasks and state.ended:
                spec = open_tasks.pop(index)
                loss = settle(out, spec, state, index in seen_running, options, index in seen_pending)
                if loss is not None:
                    losses.setdefault(spec["student_id"], []).append(loss)
        if open_tasks:
            time.sleep(POLL_S if slurm else 0.2)


def _interrupted(out: Path, job_id: str | None, todo: list[dict], signal_name: str, slurm: bool,
                 jobs=()) -> None:
    """The driver was interrupted: cancel the array; what has no result gets a not-final error."""
    for job in () if slurm else jobs:  # submitit's local processes
        try:
            job.cancel(check=False)
        except Exception:  # noqa: BLE001 - already ended
            pass
    if job_id and slurm:
        scancel(job_id)
        deadline = time.monotonic() + 20  # the tasks' SIGTERM, then KillWait; not longer than that
        while time.monotonic() < deadline and still_running(out):
            time.sleep(0.5)
        say(f"array {job_id} cancelled (scancel {job_id})")
    for spec in todo:
        if not _published(out, spec):
            publish_error(spec, f"grading was interrupted ({signal_name} to the driver); the Slurm array was "
                                "cancelled; run the same command again to grade it", final=False)
    store.log_event(out, "slurm-interrupted", None, job_id=job_id, signal=signal_name)


def submit(todo: list[dict], out: Path, config) -> SlurmOutcome:
    options = {**DEFAULTS, **(config.slurm or {})}
    outcome = SlurmOutcome()
    if not todo:
        return outcome
    running = still_running(out)
    if running:
        raise RuntimeError(f"the Slurm array {running} of an earlier run on {out} is still queued or running; "
                           f"wait for it (or scancel it) and run again")
    slurm = options["cluster"] == "slurm"
    accounting = slurm and accounting_enabled()
    options["work_min"] = f"{work_minutes(options, config):g}"
    everyone = list(todo)
    todo = _collect_earlier(out, todo, options, accounting) if slurm else todo
    state = str(out / store.STATE)
    rounds = config.retries + 1 if options["wait"] else 1
    budget_min = work_minutes(options, config)
    losses: dict[str, list[str]] = {}
    bad_nodes: set[str] = set()
    job_id = None
    jobs: list = []
    with _Signals():
        try:
            for round_number in range(rounds):
                if not todo:
                    break
                exclude = None
                if bad_nodes and slurm:
                    nodes = _partition_nodes(options["partition"])
                    if nodes - bad_nodes:
                        exclude = sorted(bad_nodes & nodes)
                executor = _executor(out, config, options, len(todo), exclude)
                count = len(todo)
                try:
                    jobs = executor.map_array(run_task, todo, [state] * count, [config.hard_timeout] * count,
                                              [config.retries] * count, [budget_min * 60] * count, [budget_min] * count)
                except Exception as error:  # sbatch refused: the message is Slurm's; each submission says so
                    message = f"Slurm refused the array: {' '.join(str(error).split())[-600:]}"
                    for spec in todo:
                        if not store.is_done(out, spec["student_id"], spec["key"]):
                            publish_error(spec, f"{message}; change the --slurm-* options and run again",
                                          final=False)
                    raise RuntimeError(message) from None
                job_id = str(jobs[0].job_id).split("_")[0] if jobs else None
                outcome.submitted += len(jobs)
                outcome.job_id = job_id
                tasks = dict(enumerate(todo))
                store.log_event(out, "slurm-submit", None, job_id=job_id, tasks=len(jobs), round=round_number + 1,
                                accounting=accounting, exclude=exclude, time_min=requested_minutes(budget_min))
                _write_pending(out, str(job_id), {i: s["student_id"] for i, s in tasks.items()}, round_number + 1)
                if not options["wait"]:
                    return outcome
                say(f"array {job_id}: {len(jobs)} task(s), round {round_number + 1} of {rounds}"
                    + ("" if accounting or not slurm else " (no Slurm accounting: states from squeue and scontrol)"))
                _wait(out, str(job_id), jobs, tasks, options, accounting, losses)
                bad_nodes |= {h for h in _node_failures(out, todo).values() if h}
                todo = [s for s in todo if not store.is_done(out, s["student_id"], s["key"])]
        except Interrupted as interrupt:
            if threading.current_thread() is threading.main_thread():  # a second Ctrl-C waits for this
                for s in (signal.SIGINT, signal.SIGTERM):
                    signal.signal(s, signal.SIG_IGN)
            _interrupted(out, job_id, [s for s in everyone if not store.is_done(out, s["student_id"], s["key"])],
                         str(interrupt), slurm, jobs)
            (out / store.STATE / PENDING).unlink(missing_ok=True)
            raise
    node_failed = _node_failures(out, todo)
    for spec in todo:  # lost in every round; a node's own error result (it names the node) stays
        if spec["student_id"] not in node_failed:
            lost = losses.get(spec["student_id"]) or ["it ended without a result"]
            publish_error(spec, f"its Slurm task was lost {len(lost)} time(s): {'; '.join(lost)}; the next run "
                                "grades it again", final=False, attempts=len(lost))
    (out / store.STATE / PENDING).unlink(missing_ok=True)
    outcome.finished = [_finished(out, spec) for spec in everyone]
    return outcome


def _collect_earlier(out: Path, todo: list[dict], options: dict, accounting: bool) -> list[dict]:
    """A `--no-wait` array that ended since: its cancelled tasks get their rows (not resubmitted);
    the rest of `todo` is submitted."""
    earlier = _read_pending(out)
    if not earlier or not earlier.get("job_id"):
        return todo
    tasks = {int(i): sid for i, sid in (earlier.get("tasks") or {}).items()}
    by_id = {s["student_id"]: s for s in todo}
    indices = [i for i, sid in tasks.items() if sid in by_id]
    if indices:
        states = task_states(out, str(earlier["job_id"]), indices, accounting)
        for index in indices:
            state, spec = states[index], by_id[tasks[index]]
            if _published(out, spec) or not state.ended:
                continue
            started = bool(_task_logs(out, str(earlier["job_id"]), index))
            # no record and no log: it left the queue without ever starting (a cancel)
            if state.state.split()[0:1] == ["CANCELLED"] or (state.source == "none" and not started):
                settle(out, spec, state, started, options, seen_pending=True)
    (out / store.STATE / PENDING).unlink(missing_ok=True)
    return [s for s in todo if not store.is_done(out, s["student_id"], s["key"])]


def _finished(out: Path, spec: dict) -> Finished:
    marker = store.read_marker(out, spec["student_id"]) or {}
    if marker.get("key") != spec["key"]:
        return Finished(spec["student_id"], store.ERROR, "no result", attempts=0)
    reason = ""
    if marker.get("outcome") != store.GRADED:
        try:
            results = json.loads((store.result_dir(out, spec["student_id"]) / "results.json").read_text())
            reason = str(results.get("reason") or "")
        except (OSError, ValueError):
            pass
    return Finished(spec["student_id"], marker.get("outcome", store.ERROR), reason,
                    attempts=int(marker.get("attempt") or 1))
