"""A batch run: discover, skip what is done, grade the rest on a backend, rebuild the gradebook."""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from graders.atomic import private_output_folder
from graders.batch import concurrency, store
from graders.batch.discover import Submission, discover
from graders.batch.gradebook import rebuild
from graders.batch.supervise import Finished, Job, run_pool
from graders.sandbox import Limits


@dataclass
class BatchConfig:
    jobs: int = 0  # 0: chosen from the cores and the GPUs' memory (graders.batch.concurrency)
    gpus: list[str] | None = None  # round-robin over jobs; None: every GPU, unless CUDA_VISIBLE_DEVICES names some
    parts: list[str] | None = None
    seed: int | None = None
    limits: Limits = field(default_factory=Limits)
    hard_timeout_s: float | None = None  # None: 1.5 x limits.submission_budget_s + 120
    retries: int = 2  # per submission, for lost infrastructure only
    options: dict | None = None  # fine-tuning options (graders.options.GradingOptions.check_options)
    names: str = "plain"
    manifest: Path | None = None
    regrade: bool = False  # grade everything again, whatever is done
    redo_errors: bool = False  # grade again the submissions whose outcome was an error
    backend: str = "local"  # local | slurm
    slurm: dict = field(default_factory=dict)  # see graders.batch.slurm.submit
    progress: bool | None = None  # None: a bar when stderr is a terminal
    unsafe: bool = False  # grade without full isolation (--unsafe-no-sandbox); every output says so
    isolation: str = "full"  # the isolation grading requires: full, or container (graders/sandbox/isolation.py)

    @property
    def hard_timeout(self) -> float:
        if self.hard_timeout_s is not None:
            return float(self.hard_timeout_s)
        return 1.5 * self.limits.submission_budget_s + 120.0

    def grading_config(self) -> dict:
        """What of this configuration changes a grade (part of the resume key)."""
        options = {k: (str(v) if v is not None else None) for k, v in (self.options or {}).items()
                   if k != "feature_cache"}
        return {"parts": sorted(self.parts) if self.parts else None, "seed": self.seed, "options": options,
                **({"unsafe": True} if self.unsafe else {}),
                **({"isolation": self.isolation} if self.isolation != "full" else {})}


@dataclass
class BatchSummary:
    total: int
    skipped: int  # already done under the same key
    finished: list[Finished]
    gradebook: Path
    summary: Path
    submitted: int = 0  # Slurm: array tasks submitted (not waited for)
    slurm_job: str | None = None

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for result in self.finished:
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
        return counts


def secrets_for(out: Path, submissions: list[Submission]) -> list[str]:
    """What a student's worker must not read besides the defaults: other students' inputs and
    results, the gradebook, the ledger, the hand grades, the batch's own state."""
    out = Path(out).resolve()
    paths = {str(out / name) for name in (store.SUBMISSIONS, store.STATE, store.LEDGER, "gradebook.csv",
                                           "summary.html", "manual.json", store.REVIEW)}
    paths |= {str(Path(s.path).resolve().parent) for s in submissions}
    return sorted(paths)


def job_specs(assignment, submissions: list[Submission], out: Path, config: BatchConfig) -> list[dict]:
    """One job per submission; each names the pack's folder, which the job's process loads."""
    grader = store.grader_key(config.grading_config(), assignment.rubric.sha256)
    secrets = secrets_for(out, submissions)
    options = {k: (str(v) if isinstance(v, Path) else v) for k, v in (config.options or {}).items()}
    return [{
        "out": str(Path(out).resolve()), "student_id": s.student_id, "source": str(Path(s.path).resolve()),
        "name": s.name, "late": s.late, "input_sha256": s.sha256, "key": store.result_key(s.sha256, grader), "grader": grader,
        "parts": config.parts, "seed": config.seed, "limits": config.limits.to_json(), "options": options,
        "extra_secrets": secrets, "unsafe": config.unsafe, "isolation": config.isolation,
        "assignment": str(assignment.folder), "rejected": s.rejected,
    } for s in submissions]


def plan(assignment, folder: Path | None, out: Path, config: BatchConfig) -> tuple[list[dict], list[dict]]:
    """(all specs, specs still to grade) of a batch of `assignment`."""
    submissions = discover(folder, manifest=config.manifest, names=config.names, exclude=(out,),
                           staging=Path(out) / store.STATE / "intake")
    specs = job_specs(assignment, submissions, out, config)
    todo = [s for s in specs if config.regrade
            or not store.is_done(out, s["student_id"], s["key"], redo_errors=config.redo_errors)]
    return specs, todo


def run_batch(assignment, folder: Path | None, out: Path, config: BatchConfig | None = None) -> BatchSummary:
    """Grade the submissions in `folder` (or the config's manifest) as hand-ins of `assignment` into `out`."""
    config = config or BatchConfig()
    # Private before any worker starts: no student's worker may open another's results.
    out = private_output_folder(out, untrusted_uids=config.limits.sandbox_uids)
    with store.RunLock(out):
        store.clean_temporaries(out, older_than_s=0 if config.backend == "local" else config.hard_timeout * 2)
        specs, todo = plan(assignment, folder, out, config)
        if config.backend == "local":
            chosen = concurrency.for_this_machine(config.jobs, config.gpus)
            config = replace(config, jobs=chosen.jobs, gpus=chosen.gpus)
            print(f"grading {chosen.jobs} at a time ({chosen.reason})"
                  + (f" on GPU(s) {','.join(chosen.gpus)}" if chosen.gpus else ""), file=sys.stderr)
        store.log_event(out, "run", None, total=len(specs), todo=len(todo), backend=config.backend,
                        jobs=config.jobs, gpus=config.gpus)
        if config.backend == "local":
            prepare_once(assignment, todo, out, config)
        skipped = len(specs) - len(todo)
        finished: list[Finished] = []
        submitted, slurm_job = 0, None
        try:
            if config.backend == "local":
                finished = _run_local(todo, out, config, total=len(specs), skipped=skipped)
            elif config.backend == "slurm":
                from graders.batch import slurm

                outcome = slurm.submit(todo, out, config)
                finished, submitted, slurm_job = outcome.finished, outcome.submitted, outcome.job_id
            else:
                raise ValueError(f"unknown backend {config.backend!r} (local or slurm)")
        finally:  # an interrupt too: the gradebook and summary show every result finished so far
            gradebook, summary = rebuild(out, assignment)
    return BatchSummary(len(specs), skipped, finished, gradebook, summary, submitted, slurm_job)


def prepare_once(assignment, todo: list[dict], out: Path, config: BatchConfig) -> None:
    """What every job would prepare alike, prepared once before they start, where the
    assignment's options module can (`prepare_batch`: the fine-tuning's data) and two jobs or more
    would each prepare it: the options it returns tell each job where it lies. They stay out of
    the resume key (a job that finds nothing there prepares its own), and what they name lies in
    the batch's state folder, which no worker may read (`secrets_for`)."""
    prepare = getattr(assignment.options_module(), "prepare_batch", None)
    if prepare is None or len(todo) < 2:
        return
    started = time.monotonic()
    shared = prepare(config.options or {}, Path(out) / store.STATE / "shared", parts=config.parts, gpus=config.gpus)
    store.log_event(out, "prepared", None, seconds=round(time.monotonic() - started, 3), options=sorted(shared))
    for spec in todo:
        spec["options"] = {**spec["options"], **shared}


def _run_local(todo: list[dict], out: Path, config: BatchConfig, *, total: int, skipped: int) -> list[Finished]:
    slots = config.jobs
    state = out / store.STATE
    jobs = [Job(spec, state, config.hard_timeout, config.retries) for spec in todo]
    show = sys.stderr.isatty() if config.progress is None else config.progress
    if not show:
        return run_pool(jobs, slots=slots, gpus=config.gpus)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    eta = Eta(remaining=len(todo), slots=slots)
    columns = [TextColumn("[bold]grading"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("ETA {task.fields[eta]}"), TextColumn("{task.fields[status]}")]
    with Progress(*columns, transient=False) as progress:
        task = progress.add_task("grading", total=total, completed=skipped, eta=eta.text(), status="")
        last = {"finished": "", "running": []}

        def show_status() -> None:
            running = ", ".join(last["running"][:4]) + (" ..." if len(last["running"]) > 4 else "")
            status = f"running: {running}" if running else ""
            progress.update(task, eta=eta.text(), status=f"{last['finished']}  {status}".strip())

        def finished(result: Finished) -> None:
            eta.finished(result.wall_s)
            last["finished"] = f"{result.student_id}: {result.outcome}"
            progress.update(task, advance=1)
            show_status()

        def running(ids: list[str]) -> None:
            last["running"] = ids
            show_status()

        return run_pool(jobs, slots=slots, gpus=config.gpus, on_finish=finished, on_running=running)


@dataclass
class Eta:
    """Time left, from the wall times of the submissions finished in this run: the mean time
    per submission times the submissions left, over the slots that grade them at once. Unknown
    until one finishes (a guess from nothing would read as a promise)."""
    remaining: int
    slots: int
    walls: list[float] = field(default_factory=list)

    def finished(self, wall_s: float) -> None:
        self.remaining = max(self.remaining - 1, 0)
        self.walls.append(wall_s)

    def seconds(self) -> float | None:
        if not self.walls:
            return None
        return statistics.fmean(self.walls) * self.remaining / max(min(self.slots, self.remaining), 1)

    def text(self) -> str:
        left = self.seconds()
        if left is None:
            return "-:--:--"
        minutes, seconds = divmod(round(left), 60)
        return f"{minutes // 60}:{minutes % 60:02d}:{seconds:02d}"


def replace(config: BatchConfig, **changes) -> BatchConfig:
    return dataclasses.replace(config, **changes)

