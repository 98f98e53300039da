"""The GPU runner's rehearsal: the real fine-tuning path, end to end, on synthetic IMDB.

    python benchmarks/bench_gpu_rehearsal.py --device cuda                 # IMDB's scale, bert-base size
    python benchmarks/bench_gpu_rehearsal.py --device cpu --scale 0.02 --encoder-size small   # reduced, on CPU
    python benchmarks/bench_gpu_rehearsal.py --device cuda --steps course --course 32          # a course's rate

Everything goes through the commands an instructor runs, as subprocesses of this script:
  data      synthetic reviews in aclImdb's layout (25,000 + 25,000 times --scale), with IMDB's
            length distribution (log-normal words per review, median ~175, mean ~230, long tail)
            and sentiment words that carry the label, so a model can learn from them
  encoder   a random-weight BERT (bert-base's shape, or a small one) and a WordPiece tokenizer,
            saved with save_pretrained: loaded the way a real one is
  build     python -m graders.packs.bert.finetune --imdb ... --encoder ...   (cold cache), and again (warm)
  grade     grade reference/bert/ --parts finetune ... with the warm cache, through the sandbox
  batch     grade batch over --submissions copies of the reference sharing the device and the cache
  course    with --course N: grade batch of N submissions (the reference and the seed-004 student in
            turn), every part, at the concurrency grade batch chooses (or --course-jobs): the time
            per submission and its extrapolation to a course of 400
Prints a table; --json writes the figures after every step. Each step's CPU time is measured:
`cpu_s`, user + system of every process it waited for (the grading processes: not the sandboxed
workers, which they do not reap), and `machine_cpu_s`, every CPU's busy time meanwhile (the
workers too, and on a shared machine others' work), each with its mean number of busy cores; on
CUDA the peak memory of the GPU is sampled with nvidia-smi while each step runs. Interrupted (SIGINT: the GPU
runner's time is up), the step running keeps what it measured (a course, the submissions that
finished) and no later step runs. A course also says where its time went outside training, stage
by stage, from each submission's results.json and the batch's ledger (`stages`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMDB_REVIEWS = 25_000
POSITIVE = ["great", "wonderful", "superb", "moving", "brilliant", "loved", "best", "touching"]
NEGATIVE = ["awful", "boring", "worst", "dull", "terrible", "hated", "waste", "mess"]
ENCODER_SIZES = {  # hidden, layers, heads, intermediate
    "base": (768, 12, 12, 3072),
    "small": (256, 4, 4, 1024),
    "tiny": (32, 1, 2, 64),  # the test's: the path's plumbing, not its speed
}
STEPS = ("cache_build", "cache_warm", "grade", "batch", "course")
COURSE = 400
SEED004 = REPO / "fixtures" / "bert" / "submissions" / "seed004_student"


def write_synthetic_imdb(root: Path, n_per_split: int, seed: int = 0) -> None:
    """Words per review log-normal as IMDB's (median ~175, mean ~230), clipped to 10..2,500;
    4% of the words are cues of the review's label."""
    import numpy as np

    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{i}" for i in range(5000)], dtype=object)
    for split in ("train", "test"):
        for polarity, cue in (("neg", NEGATIVE), ("pos", POSITIVE)):
            folder = root / "aclImdb" / split / polarity
            folder.mkdir(parents=True, exist_ok=True)
            lengths = np.clip(np.rint(rng.lognormal(math.log(175), 0.75, n_per_split // 2)), 10, 2500).astype(int)
            words = vocabulary[rng.integers(0, len(vocabulary), lengths.sum())]
            cues = rng.random(len(words)) < 0.04
            words[cues] = np.array(cue, dtype=object)[rng.integers(0, len(cue), cues.sum())]
            for i, review in enumerate(np.split(words, np.cumsum(lengths)[:-1])):
                (folder / f"{i}_{8 if polarity == 'pos' else 2}.txt").write_text(" ".join(review) + ".")


def write_encoder(folder: Path, size: str) -> None:
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from graders.packs.bert.finetune.encoder import _wordpiece_vocab

    texts = [" ".join(POSITIVE + NEGATIVE + [f"w{i}" for i in range(5000)])]
    tokenizer = BertTokenizerFast(vocab=_wordpiece_vocab(texts))
    hidden, layers, heads, intermediate = ENCODER_SIZES[size]
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers,
                                 num_attention_heads=heads, intermediate_size=intermediate))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


class GpuMemory:
    """Peak memory in use on the GPU while a step runs, sampled by nvidia-smi (None without it)."""

    def __init__(self, device: str):
        self.enabled = device == "cuda" and shutil.which("nvidia-smi") is not None
        self.peak_mib: int | None = None

    def __enter__(self):
        self.running = True
        self.thread = threading.Thread(target=self._sample, daemon=True)
        if self.enabled:
            self.thread.start()
        return self

    def _sample(self):
        while self.running:
            done = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True)
            values = [int(v) for v in done.stdout.split() if v.strip().isdigit()]
            if values:
                self.peak_mib = max(self.peak_mib or 0, max(values))
            time.sleep(0.5)

    def __exit__(self, *exc):
        self.running = False
        if self.enabled:
            self.thread.join()


def machine_busy_s() -> float:
    """Seconds every CPU of the machine spent busy since boot (/proc/stat: all but idle and iowait).
    The sandboxed workers are no children this process waits for, so their CPU time shows only
    here: on a machine of its own (a GPU runner), the step's; on a shared one, others' work too."""
    try:
        fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def timed(name: str, command: list[str], figures: dict, device: str, env: dict,
          save: Path | None) -> subprocess.CompletedProcess:
    print(f"{name}: {' '.join(command)}", file=sys.stderr, flush=True)
    started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    machine_before = machine_busy_s()
    interrupted = False
    with GpuMemory(device) as memory:
        try:
            done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env=env)
        except KeyboardInterrupt:  # the runner's time is up (gpu-runner.sh): what this step did still counts
            done, interrupted = subprocess.CompletedProcess(command, -signal.SIGINT, "", ""), True
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    machine = machine_busy_s() - machine_before
    figures[name] = {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "busy_cores": round(cpu / wall, 2),
                     "machine_cpu_s": round(machine, 1), "machine_busy_cores": round(machine / wall, 2),
                     "gpu_peak_mib": memory.peak_mib, "exit": done.returncode,
                     **({"interrupted": True} if interrupted else {})}
    if done.returncode != 0:
        print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
    if save:  # after every step: a run stopped part-way keeps what it measured
        save.write_text(json.dumps(figures, indent=2))
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of IMDB's 25,000 + 25,000 reviews")
    parser.add_argument("--encoder-size", choices=sorted(ENCODER_SIZES), default="base")
    parser.add_argument("--submissions", type=int, default=4, help="copies of the reference in the batch")
    parser.add_argument("--budget", type=float, default=600, help="--finetune-budget of each grade")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS[:4]),
                        help="the steps to run (default: all but course, which --course adds)")
    parser.add_argument("--course", type=int, default=0, metavar="N",
                        help="also grade a course of N submissions, every part, and extrapolate to 400")
    parser.add_argument("--course-jobs", type=int, default=0, help="--jobs of the course (default: grade batch's choice)")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary folder, removed after")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--isolation", choices=("full", "container"), default="full",
                        help="what each grade requires (grade --isolation); container where namespaces are refused")
    args = parser.parse_args()
    steps = set(args.steps) | ({"course"} if args.course else set())
    if "course" in steps and args.course < 1:
        parser.error("the course step needs --course N")

    work = args.workdir or Path(tempfile.mkdtemp(prefix="rehearsal-"))
    work.mkdir(parents=True, exist_ok=True)
    work.chmod(0o755)  # the sandbox user reads the encoder and the cache below it
    cache = work / "cache"
    env = {**os.environ, "TRANSFORMER_GRADER_CACHE": str(cache)}
    n = max(2, round(IMDB_REVIEWS * args.scale))
    figures: dict = {"device": args.device, "reviews_per_split": n, "encoder_size": args.encoder_size,
                     "submissions": args.submissions, "cores": len(os.sched_getaffinity(0)),
                     "load_average": os.getloadavg()[0], "isolation": args.isolation}
    try:
        started = time.perf_counter()
        write_synthetic_imdb(work, n)
        write_encoder(work / "encoder", args.encoder_size)
        for path in work.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        figures["make_data_s"] = round(time.perf_counter() - started, 1)
        finetune = ["--imdb", str(work / "aclImdb"), "--encoder", str(work / "encoder"), "--device", args.device]
        build = [sys.executable, "-m", "graders.packs.bert.finetune", *finetune]
        grade = [sys.executable, "-m", "graders.cli"]
        graded = (grade, [*finetune, "--isolation", args.isolation], work, args, figures, env)
        run_step = {"cache_build": lambda: timed("cache_build", build, figures, args.device, env, args.json),
                    "cache_warm": lambda: timed("cache_warm", build, figures, args.device, env, args.json),
                    "grade": lambda: grade_one(*graded), "batch": lambda: batch(*graded),
                    "course": lambda: course(*graded)}
        for step in STEPS:
            if step in steps:
                run_step[step]()
                if figures[step].get("interrupted"):  # no later step: the runner's time is up
                    break
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    report(figures, args, n)


def fresh(*folders: Path) -> Path:
    """The step's folders, emptied: a rerun in the same --workdir (a warm runner, its cache kept)
    grades everything again instead of resuming the batch it graded before."""
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    return folders[0]


def grade_one(grade: list[str], finetune: list[str], work: Path, args, figures: dict, env: dict) -> None:
    done = timed("grade", [*grade, "reference/bert", "--parts", "finetune", "--out", str(work / "one"),
                           "--finetune-budget", str(args.budget), *finetune], figures, args.device, env, args.json)
    if done.returncode == 0:
        check = json.loads((work / "one" / "results.json").read_text())["parts"][0]["checks"][0]
        curve = check.get("details", {}).get("training_curve", {})
        numbers = check.get("details", {}).get("numbers", {})
        figures["grade"].update(training_s=numbers.get("seconds"), predict_s=numbers.get("predict_seconds"),
                                worker_gpu_peak_mib=numbers.get("gpu_peak_mib"),
                                check_s=json.loads((work / "one" / "results.json").read_text())
                                .get("timings", {}).get("checks", {}).get("finetune.accuracy"),
                                epochs=len(curve.get("epoch", [])),
                                valid_acc=curve.get("valid_acc"), message=check.get("message"),
                                status=check.get("status"), stages=check.get("details", {}).get("timings"))


def batch(grade: list[str], finetune: list[str], work: Path, args, figures: dict, env: dict) -> None:
    subs = fresh(work / "subs", work / "batch")
    for i in range(args.submissions):
        shutil.copytree(REPO / "reference" / "bert", subs / f"student{i:02d}", ignore=shutil.ignore_patterns("__pycache__"))
    gpus = ["--gpus", "0"] if args.device == "cuda" else []
    timed("batch", [*grade, "batch", str(subs), "--assignment", "bert", "--out", str(work / "batch"), "--parts", "finetune",
                           "--jobs", str(args.submissions), *gpus, "--finetune-budget", str(args.budget),
                           "--no-progress", *finetune], figures, args.device, env, args.json)
    logs = "".join(p.read_text(errors="replace") for p in (work / "batch" / ".batch" / "logs").glob("*.log"))
    figures["batch"]["encoded_again"] = "encod" in logs.lower()


def course(grade: list[str], finetune: list[str], work: Path, args, figures: dict, env: dict) -> None:
    """Every part of N submissions in one batch. The extrapolation assumes the batch ran at its
    steady rate: it holds when N is at least a few times the jobs at a time."""
    subs = fresh(work / "course", work / "course-out")
    for i in range(args.course):
        source = REPO / "reference" / "bert" if i % 2 == 0 else SEED004
        shutil.copytree(source, subs / f"student{i:03d}", ignore=shutil.ignore_patterns("__pycache__"))
    jobs = ["--jobs", str(args.course_jobs)] if args.course_jobs else []
    done = timed("course", [*grade, "batch", str(subs), "--assignment", "bert", "--out", str(work / "course-out"),
                            *jobs, "--finetune-budget", str(args.budget), "--no-progress", *finetune],
                 figures, args.device, env, args.json)
    step = figures["course"]
    chosen = next((line for line in done.stderr.splitlines() if line.startswith("grading ")), None)
    graded = [json.loads(path.read_text()) for path in sorted((work / "course-out" / "submissions").glob("*/results.json"))]
    ledger = read_ledger(work / "course-out")
    # a course stopped part-way: the rate of those finished (an upper bound: the work of those in flight is lost)
    per_submission = step["wall_s"] / max(len(graded) if step.get("interrupted") else args.course, 1)
    step.update(submissions=args.course, graded=len(graded), concurrency=chosen,
                per_submission_s=round(per_submission, 1), course_400_h=round(per_submission * COURSE / 3600, 2),
                scores=sorted({result["score"] for result in graded}),
                # a grade in error (a check skipped for want of a dependency) is no figure of a course
                statuses=dict(sorted(Counter(result["status"] for result in graded).items())),
                skipped_checks=sum(check["status"] == "skipped" for result in graded
                                   for part in result.get("parts", []) for check in part["checks"]))
    step["stages"] = course_stages(graded, ledger, step["wall_s"])
    jobs = jobs_at_a_time(ledger)
    step.update(cpu_per_submission_s=round(step["machine_cpu_s"] / max(len(graded), 1), 1),
                gpu_peak_per_job_mib=None if step["gpu_peak_mib"] is None else round(step["gpu_peak_mib"] / jobs))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


def read_ledger(out: Path) -> list[dict]:
    path = out / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def jobs_at_a_time(ledger: list[dict]) -> int:
    """The jobs the batch ran at a time, from its ledger's run event."""
    return next((event["jobs"] for event in ledger if event.get("event") == "run" and event.get("jobs")), 1)


def course_stages(graded: list[dict], ledger: list[dict], wall_s: float) -> dict:
    """Where a course's time went outside training, as each submission's results.json and the
    batch's ledger say it: the means over the submissions of each stage (the fine-tuning check's
    `details.timings`, the grade's `timings`), each job's time outside its training (its whole
    process, imports and reports included), and the batch's time per submission beyond the
    training its jobs did side by side (`outside_training_per_submission_s`: the course's wall
    time less the training over the jobs at a time, per submission)."""
    def mean(values):
        values = [v for v in values if isinstance(v, (int, float))]
        return round(sum(values) / len(values), 3) if values else None

    def finetune_timings(result):
        return next((check.get("details", {}).get("timings", {}) for part in result.get("parts", [])
                     for check in part["checks"] if check["id"] == "finetune.accuracy"), {})

    checks = {result["batch"]["student_id"]: finetune_timings(result) for result in graded}
    process = {event["student_id"]: event.get("process_s") for event in ledger if event.get("event") == "done"}
    outside = [process[s] - timings["training_s"] for s, timings in checks.items()
               if process.get(s) is not None and timings.get("training_s") is not None]
    jobs = jobs_at_a_time(ledger)
    trained = mean(timings.get("training_s") for timings in checks.values())
    prepared = [event for event in ledger if event.get("event") == "prepared"]
    return {
        "batch_preparation_s": prepared[-1]["seconds"] if prepared else None,
        "prepared_by": sorted({timings.get("prepared_by", "this grade") for timings in checks.values()}),
        **{key: mean(timings.get(key) for timings in checks.values())
           for key in ("preparation_s", "encoder_load_s", "features_s", "probe_s", "start_s", "training_s")},
        **{key: mean(result.get("timings", {}).get(key) for result in graded)
           for key in ("setup_s", "worker_start_s", "own_worker_start_s", "close_s", "total_s")},
        "cpu_parts_s": mean(sum(v for k, v in result.get("timings", {}).get("parts", {}).items() if k != "finetune")
                            for result in graded),
        "process_s": mean(process.values()),
        "outside_training_per_job_s": mean(outside),
        "outside_training_per_submission_s": None if trained is None else
        round((wall_s - trained * len(graded) / jobs) / max(len(graded), 1), 2),
    }


def report(figures: dict, args, n: int) -> None:
    print(f"\nrehearsal on {args.device}: {n} + {n} reviews, {args.encoder_size} encoder, "
          f"{args.submissions} submissions in the batch, {figures['cores']} cores, load {figures['load_average']:.1f}")
    for name in STEPS:
        step = figures.get(name)
        if step is None:
            continue
        extra = "" if step.get("gpu_peak_mib") is None else f", GPU peak {step['gpu_peak_mib']} MiB"
        print(f"  {name:12} {step['wall_s']:>8} s  ({step['machine_busy_cores']} cores busy on the machine, "
              f"exit {step['exit']}{extra})")
    if "per_submission_s" in figures.get("course", {}):
        c = figures["course"]
        stopped = f" (stopped: {c['graded']} of {c['submissions']} finished)" if c.get("interrupted") else ""
        print(f"  a course of {c['submissions']}{stopped}, every part: {c['per_submission_s']} s per submission, "
              f"{c['course_400_h']} h for {COURSE} ({c['concurrency']}); statuses {c['statuses']}, "
              f"{c['skipped_checks']} checks skipped")
        stages = c["stages"]
        print(f"  outside training: {stages['outside_training_per_job_s']} s per job, "
              f"{stages['outside_training_per_submission_s']} s per submission of the course; the data prepared by "
              f"{', '.join(stages['prepared_by'])} (the batch: {stages['batch_preparation_s']} s); per submission "
              + ", ".join(f"{key} {stages[key]}" for key in ("preparation_s", "probe_s", "own_worker_start_s",
                                                             "setup_s", "close_s", "training_s", "cpu_parts_s",
                                                             "process_s")))
    if "training_s" in figures.get("grade", {}):
        g = figures["grade"]
        print(f"  one grade's fine-tuning check: {g['check_s']} s, of which training {g['training_s']} s over "
              f"{g['epochs']} epochs ({g['predict_s']} s predicting validation and test), the worker's GPU tensors "
              f"at most {g['worker_gpu_peak_mib']} MiB; {g['message']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
