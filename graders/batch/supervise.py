"""Jobs: one submission graded by one `run_one` subprocess, supervised.

Why subprocesses and not a `multiprocessing`/`concurrent.futures` pool:

- a hard wall-clock limit needs a kill, and killing a pool's worker breaks the pool
  (BrokenProcessPool) and loses the other jobs in it; a job of its own is killed alone, by process
  group, and the driver goes on;
- `CUDA_VISIBLE_DEVICES` must be set before CUDA initialises in a process: a fresh process per
  submission gets its GPU in its environment, a reused pool process could not change GPUs;
- nothing leaks from one student to the next (memory, hypothesis state, torch globals);
- no stray process by construction: every job sets PR_SET_PDEATHSIG (it dies with the driver),
  its sandbox worker dies with the job in turn, and a job is killed by process group;
- the same job runs unchanged inside a Slurm array task (`run_job`), so both backends behave the same.

The cost is one Python start (imports of torch and the grader) per submission, a second or two
next to a grade's several seconds; docs/batch.md gives the measured overhead.

Retries are for lost infrastructure only: the job process killed by a signal the driver did not
send (the kernel's OOM killer, a SIGKILL from outside) or exiting with EXIT_INFRA (out of memory
in the grading process). A job exiting with EXIT_NODE (this machine cannot grade: no isolation, a
missing dependency, CUDA) is not retried here: it gets a not-final error result naming the
machine, which the next run (on Slurm, the next round, on another node) grades again. A student's failure, crash or timeout is a result written by the job; a
job that passes the hard wall-clock limit is killed and recorded as an error result, not retried.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from graders.batch import store
from graders.batch.run_one import EXIT_INFRA, EXIT_NODE, PARENT_ENV, read_node_failure

POLL_S = 0.1
LOG_TAIL_BYTES = 4000


@dataclass
class Finished:
    student_id: str
    outcome: str  # graded / rejected / error
    reason: str = ""
    attempts: int = 1
    wall_s: float = 0.0


@dataclass
class Job:
    spec: dict
    state_dir: Path
    hard_timeout_s: float
    retries: int = 2
    gpu: str | None = None
    process: subprocess.Popen | None = None
    started: float = 0.0
    first_started: float = 0.0
    attempt: int = 0
    killed_for_time: bool = False
    infra_losses: list = field(default_factory=list)
    deadline: float | None = None  # time.monotonic() by which the job must end (a Slurm task's budget)
    deadline_reason: str = ""  # the error result's reason when it does not
    killed_for_deadline: bool = False

    @property
    def student_id(self) -> str:
        return self.spec["student_id"]

    @property
    def out(self) -> Path:
        return Path(self.spec["out"])

    def start(self) -> None:
        self.attempt += 1
        spec = {**self.spec, "attempt": self.attempt}
        specs = self.state_dir / "specs"
        logs = self.state_dir / "logs"
        specs.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        spec_path = specs / f"{self.student_id}.json"
        spec_path.write_text(json.dumps(spec, indent=1, default=str))
        environment = dict(os.environ)
        environment[PARENT_ENV] = str(os.getpid())
        environment["PYTHONUNBUFFERED"] = "1"
        if self.gpu is not None:
            environment["CUDA_VISIBLE_DEVICES"] = self.gpu
        with open(logs / f"{self.student_id}.log", "ab") as log:
            log.write(f"--- attempt {self.attempt} at {time.ctime()} (gpu {self.gpu})\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command(spec_path),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=environment,
                start_new_session=True)
        self.started = time.monotonic()
        self.first_started = self.first_started or self.started
        self.killed_for_time = False
        self.killed_for_deadline = False

    def command(self, spec_path: Path) -> list[str]:
        return [sys.executable, "-m", "graders.batch.run_one", str(spec_path)]

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()

    def poll(self) -> Finished | None:
        """None while running (or restarted after a loss of infrastructure); else how it ended."""
        status = self.process.poll()
        if status is None:
            now = time.monotonic()
            if self.deadline is not None and now > self.deadline:
                self.killed_for_deadline = True
                self.kill()
                status = self.process.returncode
            elif now - self.started > self.hard_timeout_s:
                self.killed_for_time = True
                self.kill()
                status = self.process.returncode
            else:
                return None
        wall = round(time.monotonic() - self.first_started, 3)
        if self.killed_for_deadline:
            store.log_event(self.out, "timeout", self.student_id, attempt=self.attempt, deadline=True)
            return self._error(self.deadline_reason or "grading was stopped: its time ran out", final=True, wall=wall)
        if self.killed_for_time:
            reason = (f"grading was stopped after the hard wall-clock limit of {self.hard_timeout_s:g} s "
                      "per submission")
            store.log_event(self.out, "timeout", self.student_id, attempt=self.attempt, limit_s=self.hard_timeout_s)
            return self._error(reason, final=True, wall=wall)
        if status == 0:
            marker = store.read_marker(self.out, self.student_id)
            if marker is not None and marker.get("key") == self.spec["key"]:
                return Finished(self.student_id, marker.get("outcome", store.GRADED), attempts=self.attempt, wall_s=wall)
            return self._error("the grading process ended without publishing a result", final=True, wall=wall)
        if status == EXIT_NODE:  # this machine cannot grade: no retry here (another node may)
            note = read_node_failure(self.out, self.student_id) or {}
            host = note.get("host") or os.uname().nodename
            reason = f"the machine {host} cannot grade: {note.get('reason') or last_line(self.log_tail())}"
            store.log_event(self.out, "node-failure", self.student_id, attempt=self.attempt, host=host,
                            reason=reason[:300])
            return self._error(reason, final=False, wall=wall, host=host)
        if status < 0 or status == EXIT_INFRA:
            if self.deadline is not None and time.monotonic() > self.deadline:
                return self._error(self.deadline_reason or "grading was stopped: its time ran out", final=True,
                                   wall=wall)
            loss = describe_loss(status)
            self.infra_losses.append(loss)
            if len(self.infra_losses) <= self.retries:
                store.log_event(self.out, "retry", self.student_id, attempt=self.attempt, cause=loss)
                self.start()
                return None
            reason = f"the grading process was lost {len(self.infra_losses)} times ({'; '.join(self.infra_losses)})"
            return self._error(reason, final=False, wall=wall)
        return self._error(f"the grader failed (exit status {status}): {last_line(self.log_tail())} "
                           f"(log: {store.STATE}/logs/{self.student_id}.log)", final=True, wall=wall)

    def log_tail(self) -> str:
        path = self.state_dir / "logs" / f"{self.student_id}.log"
        try:
            with open(path, "rb") as handle:
                handle.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
                return handle.read().decode(errors="replace")
        except OSError:
            return ""

    def _error(self, reason: str, *, final: bool, wall: float, host: str | None = None) -> Finished:
        publish_error(self.spec, reason, final=final, attempts=self.attempt, host=host)
        return Finished(self.student_id, store.ERROR, reason, attempts=self.attempt, wall_s=wall)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:500] if lines else "no output"


def describe_loss(status: int) -> str:
    if status == EXIT_INFRA:
        return "out of memory in the grading process, or its driver vanished"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    return f"killed by {name}" + (" (out of memory?)" if -status == signal.SIGKILL else "")


def publish_error(spec: dict, reason: str, *, final: bool, attempts: int = 1, host: str | None = None) -> None:
    """Publish an error result for `spec`'s submission: `final` ones stay (a plain re-run skips
    them, `--redo-errors` grades them again), the others are graded again by the next run."""
    out = Path(spec["out"])
    results = error_result(spec, reason, attempts=attempts, host=host)
    marker = {"key": spec["key"], "student_id": spec["student_id"], "input_sha256": spec["input_sha256"],
              "source": str(spec["source"]), "grader": spec.get("grader"), "final": final, "attempt": attempts}
    store.publish(out, spec["student_id"], results, marker)
    store.log_event(out, "done", spec["student_id"], outcome=store.ERROR, reason=reason[:300], attempt=attempts,
                    final=final)


def error_result(spec: dict, reason: str, *, attempts: int = 1, host: str | None = None) -> dict:
    """A results.json (status "error") for a submission whose grading did not finish; the
    gradebook shows "error", the reports show the reason, and the next run grades it again."""
    from graders.assignment import load
    from graders.grading import SCHEMA_VERSION, assignment_json, versions

    assignment = load(spec["assignment"])  # the pack's folder: a job is told its pack
    max_score = assignment.rubric.points(spec.get("parts"))
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "error",
        "reason": f"not graded: {reason}",
        "mode": "instructor",
        "score": 0,
        "max_score": max_score,
        "submission": {"sha256": spec["input_sha256"], "name": Path(spec["source"]).name, "kind": "unknown", "notes": []},
        "assignment": assignment_json(assignment),
        "versions": versions(assignment),
        "timings": {},
        "parts": [],
        "batch": {"student_id": spec["student_id"], "name": spec.get("name", ""), "late": bool(spec.get("late")),
                  "outcome": store.ERROR, "attempt": attempts,
                  "input_sha256": spec["input_sha256"], "reason": reason, **({"host": host} if host else {})},
    }


class Interrupted(Exception):
    pass


def _raise_interrupted(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def run_pool(jobs: list[Job], *, slots: int, gpus: list[str] | None = None, on_finish=None,
             on_running=None) -> list[Finished]:
    """Run the jobs, `slots` at a time; GPU i % len(gpus) goes to slot i. SIGINT/SIGTERM kill
    every running job (by process group) and raise Interrupted; finished results stay.
    `on_finish(result)` follows each finished job, `on_running(student ids)` each change of the
    running set."""
    pending = list(reversed(jobs))
    running: dict[int, Job] = {}
    finished: list[Finished] = []
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while pending or running:
            changed = False
            for slot in range(slots):
                if slot not in running and pending:
                    job = pending.pop()
                    job.gpu = gpus[slot % len(gpus)] if gpus else None
                    job.start()
                    running[slot] = job
                    changed = True
            for slot, job in list(running.items()):
                result = job.poll()
                if result is not None:
                    del running[slot]
                    finished.append(result)
                    changed = True
                    if on_finish:
                        on_finish(result)
            if changed and on_running:
                on_running([job.student_id for _, job in sorted(running.items())])
            time.sleep(POLL_S)
    finally:
        for job in running.values():
            job.kill()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return finished


def run_job(spec: dict, state_dir: str, hard_timeout_s: float, retries: int, budget_s: float | None = None,
            budget_reason: str = "") -> dict:
    """One job, start to end, in this process: the body of a Slurm array task. `budget_s`: the
    task's whole time (every attempt); a job still running then is killed and gets a final error
    result with `budget_reason`."""
    job = Job(spec, Path(state_dir), hard_timeout_s, retries, gpu=None)
    if budget_s is not None:
        job.deadline = time.monotonic() + budget_s
        job.deadline_reason = budget_reason
    (result,) = run_pool([job], slots=1)
    return {"student_id": result.student_id, "outcome": result.outcome, "reason": result.reason,
            "attempts": result.attempts, "wall_s": result.wall_s}
