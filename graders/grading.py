"""Grade one submission: ingest it, start its worker, run every part's checks, build results.json.

The grading process never imports the submission. Scores are computed here from what the worker
returns; a crash, hang or exit in student code fails the check it happened in and grading goes on.
"""

import contextlib
import functools
import hashlib
import json
import platform
import tempfile
import time
import tomllib
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

import graders
from graders.answers_file import UnreadableAnswers, read_answers_file
from graders.atomic import write_atomically
from graders.assignment import for_submission, installed as installed_packs, load as load_pack
from graders.checks.contract import ForwardingStudent
from graders.consistency import validate_assignment
from graders.checks.framework import (ERROR, FAILED, HIDDEN, SKIPPED, CheckResult, Context, check_seed,
                                      environment_result, run_check)
from graders.integrity import results_section, scan_folder
from graders.ingest import Rejected, ingest
from graders.jsonable import jsonable
from graders.oracles import GoldenOracle, ReferenceOracle
from graders.redact import redact_results, solution_lines
from graders.sandbox import (BudgetExhausted, Handle, Limits, MissingDependency, ProtocolError, SandboxError,
                             StudentError, Worker, WorkerCrashed, WorkerTimeout)
from graders.sandbox.isolation import FULL, require_isolation
from graders.scoring import part_score, preload_of, totals

INSTRUCTOR, SELF_CHECK = "instructor", "self-check"
# After this many checks of one part in a row kill or hang the worker, the rest of the part is
# not run: each would cost a restart or a full timeout and end the same way.
MAX_WORKER_FAILURES_PER_PART = 2
# After this many failed starts of the worker in a row, no further start is tried: the machine,
# not the submission, is at fault (no student code runs before the worker has started).
MAX_START_FAILURES = 2
# Examples per property: a self-check must answer in seconds; an instructor's grade looks harder.
MAX_EXAMPLES = {INSTRUCTOR: 20, SELF_CHECK: 5}
SCHEMA_VERSION = 1


def secret_paths(assignment, extra=()):
    """What the worker must never read: the solution and its mutants (edits of it) of the graded
    assignment and of every installed one (another pack's solution may share lines with this
    one's, and its mutants lie in the grader package the worker imports from), the assignment's
    secrets (hidden fixtures), and whatever the caller adds (the output folder, other
    submissions, held-out data)."""
    packs = [assignment, *(load_pack(name) for name in installed_packs() if name != assignment.name)]
    solutions = [path for pack in packs for path in (pack.reference_dir, pack.mutants_path) if path is not None]
    return [*solutions, *assignment.secrets, *map(Path, extra)]


def assignment_paths(assignment, options, kind):
    """The paths the assignment's options module gives for these check options: `kind` is
    "readable_paths" (what the worker of a long part may read) or "held_out_paths" (what no
    worker may read); none without such a module or function (graders/options.py)."""
    function = getattr(assignment.options_module(), kind, None)
    return list(function(options)) if function is not None else []


def versions(assignment):
    """What graded: the grader, its libraries and the hash of the assignment's manifest (which
    holds the rubric; none where no assignment was known)."""
    import hypothesis  # already imported by graders.checks, without its plugins

    return {
        "grader": graders.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hypothesis": hypothesis.__version__,
        **({"rubric_sha256": assignment.rubric.sha256} if assignment is not None else {}),
    }


def read_answers(root, answers_file):
    """The submission's questions file parsed here (TOML is data, never code), or None where it
    is missing or unreadable."""
    return submitted_answers(root, answers_file)[0]


def submitted_answers(root, answers_file):
    """(the questions file parsed, None), or (None, why it cannot be used, as `_blocked_result`
    takes it: the submission's error, said to the student); (None, None) where there is none
    (each question says so)."""
    if answers_file is None:
        return None, None
    try:
        return read_answers_file(Path(root) / answers_file), None
    except UnreadableAnswers as error:
        return None, (f"{error}; fix the file: none of its answers can be graded as it is", None)


# What a failing check keeps of the student's printed output: its end, as a traceback's.
PRINTED_LIMIT = 4000


class TrackedStudent(ForwardingStudent):
    """The worker as a check sees it: every handle a check receives is freed when the check ends,
    so objects do not pile up in the worker over a whole grade."""

    def __init__(self, worker):
        super().__init__(worker)
        self._handles = []
        self.printed = ""  # what the student's code printed during the check, its tail

    def forward(self, op, *args, **kwargs):
        try:
            result = super().forward(op, *args, **kwargs)
        finally:
            if output := getattr(self.student, "last_output", ""):
                self.printed = (self.printed + output)[-PRINTED_LIMIT:]
        self._collect(result)
        return result

    def _collect(self, value):
        if isinstance(value, Handle):
            self._handles.append(value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                self._collect(item)
        elif isinstance(value, dict):
            for item in value.values():
                self._collect(item)

    def release(self):
        handles, self._handles = self._handles, []
        try:
            self.student.free(*handles)
        except SandboxError:
            pass  # a dead worker took its objects with it


class _ModuleGate:
    """Imports each student module once in the worker, and remembers why one could not be used."""

    def __init__(self, worker, ingested):
        self.worker = worker
        self.missing = {name.removesuffix(".py") for name in ingested.missing}
        self.missing_reasons = {name.removesuffix(".py"): reason for name, reason in ingested.missing_reasons.items()}
        # A module Python cannot read (its encoding): the reason is known before any import.
        self.unreadable = {name.removesuffix(".py"): (reason, None) for name, reason in ingested.unreadable.items()}
        self.problems = dict(self.unreadable)

    def problem(self, module):
        if module.endswith(".toml"):
            return None
        if module in self.missing:
            return self.missing_reasons.get(module) or f"{module}.py is missing from the submission"
        if module not in self.problems:
            try:
                self.worker.import_module(module)
                self.problems[module] = None
            except StudentError as error:
                unreadable = "".join(f"; {other}.py, which it may import, cannot be read: {reason}"
                                     for other, (reason, _) in self.unreadable.items())
                self.problems[module] = (f"{module}.py could not be imported: {error.exc_type}: {error.message}"
                                         f"{unreadable}", error)
            except MissingDependency as error:  # the part is skipped, nobody's code is blamed
                self.problems[module] = error
            except BudgetExhausted as error:
                self.problems[module] = (f"{module}.py was not imported: {error}", None)
            except ProtocolError as error:
                self.problems[module] = (f"importing {module}.py made the worker send a malformed reply ({error}); "
                                         "does your code write to files or pipes it did not open itself?", None)
            except (WorkerCrashed, WorkerTimeout) as error:
                self.problems[module] = (f"importing {module}.py killed the worker: {error}", None)
            except SandboxError as error:
                self.problems[module] = (f"{module}.py could not be imported: {error}", None)
            except Exception as error:  # noqa: BLE001 - whatever happens here fails this part only
                self.problems[module] = (f"{module}.py could not be imported: the grader failed "
                                         f"({type(error).__name__}: {error})", None)
        return self.problems[module]


class _Starter:
    """Starts the worker before a check when it is not running, so that a worker that cannot
    start fails the checks with that reason, not as a crash of the grade; after
    MAX_START_FAILURES failures in a row it stops trying."""

    def __init__(self, worker):
        self.worker = worker
        self.started_once = False
        self.failures = 0
        self.error = None  # the last start failure

    def ensure_running(self):
        """None when the worker runs (or a check will say why not), else why it cannot start."""
        if self.failures >= MAX_START_FAILURES:
            return self.error
        if self.worker.running:
            return None
        try:
            self.worker.start()
        except BudgetExhausted:
            return None  # the checks report it, each without starting anything
        except Exception as error:  # noqa: BLE001 - WorkerCrashed, WorkerTimeout, OSError from the launch...
            self.failures += 1
            self.error = error
            return error
        self.started_once = True
        self.failures = 0
        return None


def _not_started_result(chk, error):
    return CheckResult(chk, ERROR, 0.0, f"your code was not run: the worker that runs it could not start ({error}); "
                       "this is a problem of the grading machine, not of your code")


class _Lane:
    """One worker and what goes with it: its starter, its module gate, and where each of its
    audit-hook denials happened."""

    def __init__(self, worker, ingested):
        self.worker = worker
        self.starter = _Starter(worker)
        self.denials = _DenialPlaces(worker)
        self.gate = _ModuleGate(worker, ingested)
        self.stopped = False  # the grade was abandoned (an error, Ctrl-C): run no further check

    def stop(self):
        """From the grade's thread: the check in flight fails now and no other one starts."""
        self.stopped = True
        self.worker.abort()

    def start(self):
        self.starter.ensure_running()
        self.denials.mark("the worker's start")


class _DenialPlaces:
    """Where each audit-hook denial the worker reported happened: the worker's start, a module's
    import or a check (`mark` labels those recorded since the previous mark)."""

    def __init__(self, worker):
        self.worker = worker
        self.places = []

    def mark(self, where):
        new = len(self.worker.audit_denials) - len(self.places)
        self.places.extend([where] * new)

    def pairs(self):
        return list(zip(self.worker.audit_denials, self.places))


def _blocked_result(chk, problem):
    if isinstance(problem, MissingDependency):
        return environment_result(chk, problem)
    if isinstance(problem, str):
        return CheckResult(chk, SKIPPED, 0.0, problem)
    message, error = problem
    details = {"traceback": error.traceback} if error is not None and error.traceback else {}
    return CheckResult(chk, ERROR, 0.0, message, details=details)


@contextlib.contextmanager
def torch_threads(count):
    """The grader's own tensor work (the references, the replays of a training step) on as many
    threads as the worker's: its figures do not depend on the machine's cores, and a batch of one
    grade per core does not spin every core's OpenMP threads against each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def grade(source, *, mode=INSTRUCTOR, seed=None, only_parts=None, limits=None, options=None,
          golden_dir=None, oracle=None, extra_secrets=(), progress=None, unsafe=False, assignment=None,
          isolation=FULL, rehearse=(), observe=None, leave_out=()):
    """Grade the submission at `source` (zip, folder or .ipynb) as a hand-in of `assignment` (by
    default the one being graded, or the one whose files it holds: `assignment.for_submission`)
    and return the results dict.
    `oracle` replaces the mode's own (`grade build` records the golden answers this way).
    `rehearse` (a self-check's parts): their hidden checks that would be provisional here (the
    fine-tuning's smoke mode) run too, as a rehearsal of the student's code: their results go to
    the results' "rehearsals", never into a part or a total.
    `observe(student, check_id)` (`grade coverage`) wraps the student's code as each check sees it;
    the checks in `leave_out` are not run.

    Instructor mode fails closed: without every layer of the sandbox at `isolation` (`full`, or
    `container` in a one-shot container: graders/sandbox/isolation.py) it raises
    `IsolationUnavailable` before anything of the submission is touched, unless `unsafe` (code
    the caller trusts), which every output of the grade then shows. Self-check mode runs the
    student's own code on their machine: it takes the isolation the machine has."""
    isolated = mode == INSTRUCTOR and not unsafe
    if isolated:
        require_isolation(isolation)
    started = time.perf_counter()
    assignment = assignment or for_submission(source)
    rubric = assignment.rubric
    if mode == INSTRUCTOR:  # a self-check grades with what `grade build` validated
        validate_assignment(assignment)
    registry = assignment.registry()
    seed = rubric.seed if seed is None else seed
    limits = limits or Limits()
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch, torch_threads(limits.threads):
        try:
            ingested = ingest(Path(source), Path(scratch) / "submission", assignment=assignment)
        except Rejected as rejected:
            return rejected_result(source, str(rejected), assignment, mode, started, only_parts, options)
        if oracle is None:
            oracle = ReferenceOracle(assignment) if mode == INSTRUCTOR else GoldenOracle(golden_dir or assignment.golden_dir)
        reference_answers = tomllib.loads((assignment.reference_dir / assignment.answers_file).read_text()) \
            if mode == INSTRUCTOR and assignment.answers_file else {}
        answers, unreadable_answers = submitted_answers(ingested.root, assignment.answers_file)
        code_flags, flags_dropped = scan_folder(ingested.root)  # text only: nothing is imported
        timings = {"parts": {}, "checks": {}}
        options = options or {}
        held_out = assignment_paths(assignment, options, "held_out_paths")
        allow_gpu = options.get("device") == "cuda" or (options.get("device") is None and torch.cuda.is_available())
        selected = [part for part in rubric.parts if not only_parts or part.id in only_parts]
        rehearsed = {part.id: [c for c in registry.get(part.id, []) if mode == SELF_CHECK and part.id in rehearse
                               and c.visibility == HIDDEN and c.provisional and c.provisional(options)]
                     for part in selected}
        checks_of = {part.id: [c for c in registry.get(part.id, []) if (mode == INSTRUCTOR or c.visibility != HIDDEN)
                               and c.id not in leave_out] + rehearsed[part.id] for part in selected}
        rehearsals = {}
        # Some parts run in a worker of their own, beside the others, when there are others: in
        # an instructor's grade a long part (minutes of training that only wait on the worker);
        # in a self-check a part whose worker imports for seconds first (a large library).
        apart = [part for part in selected if checks_of[part.id]
                 and (part.own_worker if mode == INSTRUCTOR else part.preload)]
        if not any(checks_of[part.id] for part in selected if part not in apart):
            apart = []

        def new_lane(parts):
            """The worker for `parts`: the GPU and the assignment's data only for a long part."""
            long_part = any(part.own_worker and (mode == INSTRUCTOR or rehearsed[part.id]) for part in parts)
            packages = {} if assignment.installed else {assignment.package: assignment.folder}
            return _Lane(Worker(ingested.root, limits=limits,
                                secret_paths=secret_paths(assignment, [*extra_secrets, *held_out]),
                                allow_gpu=allow_gpu and long_part, task_modules=assignment.task_modules,
                                packages=packages,
                                readable_paths=[*(assignment_paths(assignment, options, "readable_paths") if long_part else ()),
                                                *packages.values()],
                                require_isolation=isolated, isolation_level=isolation, containment_only=mode == SELF_CHECK,
                                preload=preload_of(parts) if mode == SELF_CHECK else ()), ingested)

        def grade_part(part, lane):
            part_started = time.perf_counter()
            results = []
            failures_in_a_row = 0
            runs_code = part.module != assignment.answers_file  # the questions file is read here, never run
            for chk in checks_of[part.id]:
                if lane.stopped:
                    break
                if progress:
                    progress(chk)
                if failures_in_a_row >= MAX_WORKER_FAILURES_PER_PART:
                    problem = (f"not run: your code killed or hung the worker in the {failures_in_a_row} "
                               "previous checks of this part; fix that first", None)
                elif (not_started := lane.starter.ensure_running() if runs_code else None) is not None:
                    results.append(_not_started_result(chk, not_started))
                    continue
                else:
                    problem = lane.gate.problem(part.module) if runs_code else unreadable_answers
                    lane.denials.mark(f"importing {part.module}")
                if problem:
                    results.append(_blocked_result(chk, problem))
                    continue
                student = TrackedStudent(lane.worker)
                seen = observe(student, chk.id) if observe else student
                ctx = Context(seen, oracle, check_seed(seed, chk.id), max_examples=MAX_EXAMPLES[mode], answers=answers,
                              reference_answers=reference_answers, options=options,
                              note=getattr(progress, "note", None))
                result = run_check(chk, ctx, before=functools.partial(lane.worker.seed, ctx.seed) if runs_code else None)
                student.release()
                if result.status in (FAILED, ERROR) and student.printed and "output" not in result.details:
                    # A check that failed on a wrong value says what the code printed, as one that raised does.
                    result.details = {**result.details, "output": student.printed}
                lane.denials.mark(f"check {chk.id}")
                failures_in_a_row = failures_in_a_row + 1 if result.worker_failed else 0
                results.append(result)
                timings["checks"][chk.id] = round(result.elapsed_s, 3)
            for result in results:  # run, blocked or not started alike
                result.provisional_note = result.check.provisional(options) if result.check.provisional else None
            timings["parts"][part.id] = round(time.perf_counter() - part_started, 3)
            rehearsal = [r for r in results if r.check in rehearsed[part.id]]
            if rehearsal:
                rehearsals[part.id] = part_json(part, rehearsal, registry)["checks"]
            return part_json(part, [r for r in results if r not in rehearsal], registry)

        def grade_apart(lane):
            worker_started = time.perf_counter()
            lane.start()
            timings["own_worker_start_s"] = round(time.perf_counter() - worker_started, 3)
            return {part.id: grade_part(part, lane) for part in apart}

        together = [part for part in selected if part not in apart]
        timings["setup_s"] = round(time.perf_counter() - started, 3)  # before any worker starts
        lanes, aside = [], None
        beside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grading-apart")
        try:
            lane = new_lane(together)
            lanes.append(lane)
            if apart:
                aside = new_lane(apart)
                lanes.append(aside)
                graded_apart = beside.submit(grade_apart, aside)
            worker_started = time.perf_counter()
            lane.start()
            timings["worker_start_s"] = round(time.perf_counter() - worker_started, 3)
            graded = {part.id: grade_part(part, lane) for part in together}
            if aside is not None:
                graded.update(graded_apart.result())
            parts = [graded[part.id] for part in selected]
            sandbox = {**lane.worker.layers.to_json(), "unsafe": mode == INSTRUCTOR and unsafe}
            integrity = results_section(code_flags, [pair for each in lanes for pair in each.denials.pairs()],
                                        flags_dropped + sum(each.worker.audit_denials_dropped for each in lanes))
        finally:
            if aside is not None:  # still running if this grade failed: its request in flight fails now
                aside.stop()
            beside.shutdown(wait=True)
            closing = time.perf_counter()
            for each in lanes:
                try:
                    each.worker.close()
                except Exception as error:  # noqa: BLE001 - the results are made; say so and go on
                    warnings.warn(f"grading: the worker could not be closed cleanly: {error}", RuntimeWarning,
                                  stacklevel=2)
            timings["close_s"] = round(time.perf_counter() - closing, 3)
    status, reason = "graded", None
    failed_start = next((each.starter.error for each in lanes
                         if not each.starter.started_once and each.starter.error is not None), None)
    if failed_start is not None:
        # Student code did not run at all: an infrastructure failure, graded again by the next batch run.
        status, reason = "error", f"the sandbox worker could not start: {failed_start}"
    elif mode == INSTRUCTOR and (missing := _missing_dependencies(parts)):
        # Checks were skipped for want of a package of the grader's: not a grade to hand back
        # (a self-check shows the skipped checks and their fix to the student instead).
        status, reason = "error", (f"the grader's environment lacks {', '.join(missing)} or cannot import it, so some checks "
                                   "could not run; the skipped checks say how to fix it, then grade again "
                                   "(`grade batch --redo-errors`)")
    if mode == INSTRUCTOR:
        parts, removed = redact_results(parts, solution_lines(assignment.reference_dir))
        if removed:
            integrity["flags"].append({
                "source": "grader", "kind": "solution-text", "where": "results",
                "reason": f"{removed} lines of the reference solution in what the student's code returned, "
                          "raised or printed were removed from every output"})
    timings["total_s"] = round(time.perf_counter() - started, 3)
    count_provisional = bool((options or {}).get("count_provisional"))
    return jsonable({  # a check's details may hold any number derived from the student's values
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "reason": reason,
        "mode": mode,
        "seed": seed,
        **totals(parts, count_provisional),
        "submission": {"sha256": ingested.sha256, "name": Path(source).name, "kind": ingested.kind,
                       "notes": list(ingested.notes), **({"origin": ingested.origin} if ingested.origin else {})},
        "assignment": assignment_json(assignment),
        "versions": versions(assignment),
        "sandbox": sandbox,
        "integrity": integrity,  # for a person to review; no points depend on it
        "timings": timings,
        "parts": parts,
        **({"rehearsals": rehearsals} if rehearsals else {}),
    })


def _missing_dependencies(parts):
    """The packages of the grader's whose absence skipped a check (graders/dependencies.py)."""
    return sorted({check["details"]["environment"]["missing"] for part in parts for check in part["checks"]
                   if "environment" in (check.get("details") or {})})


def part_json(part, results, registry):
    # Every check is worth its share of the part among all the part's checks, hidden ones
    # included: the points the instructor's grade gives it, also in a self-check, which runs
    # the public checks only (a written answer is worth 5 points there too, not 6).
    every_check = [c.id for c in registry.get(part.id, [])]
    ran = [r.check.id for r in results]
    points = part.check_points(every_check if set(ran) <= set(every_check) else ran)
    provisional = [r.provisional_note for r in results if r.provisional_note]
    return {
        "id": part.id,
        "title": part.title,
        "score": part_score(part, results, every_check),
        "max_score": (0.0 if not results else part.points if set(ran) >= set(every_check)
                      else round(sum(points[c] for c in ran), 4)),
        "provisional": bool(provisional),
        "note": provisional[0] if provisional else None,
        "checks": [r.to_json(points[r.check.id]) for r in results],
    }


def input_sha256(source):
    """A hash of a rejected input as it is, without following links (it may be hostile)."""
    source = Path(source)
    digest = hashlib.sha256()
    if source.is_file() and not source.is_symlink():
        with source.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    elif source.is_dir() and not source.is_symlink():
        for path in sorted(source.rglob("*")):
            digest.update(str(path.relative_to(source)).encode("utf-8", "surrogateescape"))
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= 64 << 20:
                digest.update(path.read_bytes())
    else:
        digest.update(str(source).encode("utf-8", "surrogateescape"))
    return digest.hexdigest()


def assignment_json(assignment):
    """Which assignment a result is of: its pack's name, and the title reports show."""
    return {"name": assignment.name, "title": assignment.title}


def counted_points(assignment, only_parts=None, options=None):
    """What a grade of the parts is out of under `options`: their points, less those of a part
    whose checks would be provisional (the smoke-mode fine-tuning), which the totals leave out
    unless `count_provisional`. A rejection is out of as much as the grades beside it."""
    options = options or {}
    if options.get("count_provisional"):
        return assignment.rubric.points(only_parts)
    registry = assignment.registry()
    return sum(part.points for part in assignment.rubric.parts
               if (not only_parts or part.id in only_parts)
               and not any(chk.provisional and chk.provisional(options) for chk in registry.get(part.id, [])))


def rejected_result(source, reason, assignment, mode, started, only_parts=None, options=None):
    """A rejection scores 0 out of what the parts that were to be graded count for; out of 0,
    and of no assignment, where the hand-in showed no installed assignment's files
    (`assignment.UnrecognisedSubmission`) and none was given."""
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "rejected",
        "reason": reason,
        "mode": mode,
        "score": 0,
        "max_score": counted_points(assignment, only_parts, options) if assignment is not None else 0,
        "submission": {"sha256": input_sha256(source), "name": Path(source).name, "kind": "unknown", "notes": []},
        **({"assignment": assignment_json(assignment)} if assignment is not None else {}),
        "versions": versions(assignment),
        "timings": {"total_s": round(time.perf_counter() - started, 3)},
        "parts": [],
    }


def error_result(source, reason, *, assignment=None, mode=INSTRUCTOR, only_parts=None, started=None):
    """The results of a grade of `assignment` (None: not known) that failed unexpectedly (a bug of
    the grader, a broken machine): status "error", no points, and the reason. Built defensively:
    whatever broke the grade may also break the rubric or the hashing of the input."""
    try:
        max_score = assignment.rubric.points(only_parts)
        version_info, which = versions(assignment), {"assignment": assignment_json(assignment)}
    except Exception:  # noqa: BLE001
        max_score, version_info, which = 0, {"grader": graders.__version__, "python": platform.python_version()}, {}
    try:
        sha256 = input_sha256(source)
    except Exception:  # noqa: BLE001
        sha256 = hashlib.sha256(str(source).encode("utf-8", "surrogateescape")).hexdigest()
    return {
        "schema_version": SCHEMA_VERSION,
        "status": "error",
        "reason": reason,
        "mode": mode,
        "score": 0,
        "max_score": max_score,
        "submission": {"sha256": sha256, "name": Path(source).name, "kind": "unknown", "notes": []},
        **which,
        "versions": version_info,
        "timings": {"total_s": round(time.perf_counter() - started, 3)} if started is not None else {},
        "parts": [],
    }


def write_results(results, out_dir):
    """Write out_dir/results.json atomically (temp file, then rename), as strict JSON whatever
    the results hold."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return write_atomically(out_dir / "results.json", json.dumps(jsonable(results), indent=2, allow_nan=False))
