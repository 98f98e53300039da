"""How long `grade similarity` takes on a class, and how it ranks the test corpus against copydetect.

    .venv/bin/python benchmarks/bench_similarity.py [--count 400]
    .venv/bin/python benchmarks/bench_similarity.py --copydetect /path/to/venv/bin/python

The class: `--count` synthetic hand-ins of the bert homework (fixtures/similarity/make_corpus.py:
each module from one of the corpus's hands, disguised at random, with numbers changed and
statements left out), a third each handed in as folders, zips and notebooks, published as a
graded batch through the batch's store (not timed). Then `grade similarity BATCH` runs twice in
a fresh process each: its wall time and CPU time (user + system), the phases it prints, and
whether the two reports are the same bytes. Run it on a 2-core machine for the docs' figure.

`--copydetect PYTHON` (a Python with copydetect installed, kept out of the lock) compares the
two tools on the corpus of make_corpus.py instead (and times copydetect on the class of `--count`), same hand-ins, same planted pairs: copydetect
with each hand-in as one file (its modules together; a notebook as the student handed it in, and
as the modules this grader's intake reads from it), the template as its boilerplate; its score
of a pair is the larger of its two similarities, as ours is. For each: the lowest planted pair,
the highest independent pair, how many independent pairs outrank a planted one, and its time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "fixtures" / "similarity"))

import make_corpus  # noqa: E402


def build_class(root: Path, count: int) -> Path:
    from graders.assignment import load

    assignment = load("bert")
    submissions = root / "submissions"
    kinds = ("folder", "zip", "notebook")
    for index, (student_id, files) in enumerate(make_corpus.synthetic_class(count).items()):
        files = {**files, "answers.toml": (make_corpus.TEMPLATE / "answers.toml").read_text()}
        entry = make_corpus.write_hand_in(student_id, files, kinds[index % 3], submissions)
        make_corpus.publish_graded(root / "batch", student_id, entry, assignment)
    return root / "batch"


def timed_run(batch: Path, out: Path) -> dict:
    """`grade similarity` in a fresh process: wall and CPU seconds, and the lines it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "graders.cli", "similarity", str(batch), "--out", str(out)],
                         capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if run.returncode != 0:
        raise SystemExit(run.stdout + run.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "printed": (run.stderr + run.stdout).strip().splitlines()}


def folder_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def bench_class(count: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        started = time.perf_counter()
        batch = build_class(root, count)
        print(f"built and published {count} hand-ins in {time.perf_counter() - started:.0f} s (not timed)")
        print(f"load average before: {os.getloadavg()[0]:.1f}; cores: {os.cpu_count()}")
        runs = [timed_run(batch, root / f"report-{n}") for n in (1, 2)]
        for n, run in enumerate(runs, 1):
            print(f"run {n}: wall {run['wall_s']} s, CPU {run['cpu_s']} s")
            for line in run["printed"]:
                print(f"    {line}")
        same = folder_digest(root / "report-1") == folder_digest(root / "report-2")
        print(f"load average after: {os.getloadavg()[0]:.1f}; the two reports are {'byte-identical' if same else 'DIFFERENT'}")
        size = sum(p.stat().st_size for p in (root / "report-1").rglob("*") if p.is_file())
        print(f"report: {len(list((root / 'report-1' / 'pairs').iterdir()))} pair pages, {size / 2 ** 20:.1f} MiB in all")


# --------------------------------------------------------------------------- copydetect

COPYDETECT = r"""
import json, sys, time
from copydetect import CopyDetector
test_dir, boilerplate_dir = sys.argv[1], sys.argv[2]
started = time.perf_counter()
detector = CopyDetector(test_dirs=[test_dir], boilerplate_dirs=[boilerplate_dir], extensions=["py", "ipynb"],
                        display_t=0.0, autoopen=False, silent=True)
detector.run()
scores = {}
files = [str(f) for f in detector.test_files]
for i, first in enumerate(files):
    for j, second in enumerate(files):
        if i < j:
            scores[f"{first}|{second}"] = float(max(detector.similarity_matrix[i, j, 0], detector.similarity_matrix[i, j, 1]))
print(json.dumps({"seconds": time.perf_counter() - started, "scores": scores}))
"""


def one_file(files: dict[str, str]) -> str:
    return "\n\n".join(files[module] for module in make_corpus.MODULES)


def copydetect_scores(python: str, hand_ins: dict[str, str], template: str, suffix: dict[str, str]) -> tuple[dict, float]:
    with tempfile.TemporaryDirectory() as scratch:
        tests, boilerplate = Path(scratch, "tests"), Path(scratch, "boilerplate")
        tests.mkdir()
        boilerplate.mkdir()
        (boilerplate / "template.py").write_text(template)
        for name, text in hand_ins.items():
            (tests / f"{name}.{suffix.get(name, 'py')}").write_text(text)
        run = subprocess.run([python, "-c", COPYDETECT, str(tests), str(boilerplate)], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(run.stderr)
        found = json.loads(run.stdout.strip().splitlines()[-1])
    scores = {}
    for key, score in found["scores"].items():
        first, second = (re.sub(r"\.(py|ipynb)$", "", Path(p).name) for p in key.split("|"))
        scores[frozenset((first, second))] = score
    return scores, found["seconds"]


def separation(scores: dict, planted: set) -> dict:
    planted_scores = [s for pair, s in scores.items() if pair in planted]
    independent = [s for pair, s in scores.items() if pair not in planted]
    lowest = min(planted_scores)
    top = max((s, sorted(pair)) for pair, s in scores.items() if pair not in planted)
    return {"lowest planted": round(lowest, 3), "highest independent": round(top[0], 3), "that pair": " & ".join(top[1]),
            "independent pairs above the lowest planted": sum(1 for s in independent if s >= lowest),
            "planted pairs": len(planted_scores), "independent pairs": len(independent)}


def bench_copydetect(python: str) -> None:
    from graders.assignment import load
    from graders.similarity.code import Course
    from graders.similarity.compare import compare
    from graders.similarity.handins import read_batch

    planted = make_corpus.planted_pairs()
    with tempfile.TemporaryDirectory() as scratch:
        assignment = load("bert")
        batch = make_corpus.build_batch(Path(scratch), assignment)
        started = time.perf_counter()
        hand_ins, _ = read_batch(batch, assignment, Course.of(assignment))
        comparison = compare(hand_ins)
        ours_s = time.perf_counter() - started
        ours = {frozenset((p.a, p.b)): p.score for p in comparison.pairs}
        print(f"this grader (ast token streams, its own winnowing): {separation(ours, planted)}; {ours_s:.2f} s")
        files = {name: make_corpus.hand_in_files(name) for name in make_corpus.INDEPENDENT | make_corpus.PLANTED}
        template = one_file({m: (make_corpus.TEMPLATE / m).read_text() for m in make_corpus.MODULES})
        extracted = {name: one_file(f) for name, f in files.items()}
        as_handed_in = dict(extracted)
        notebooks = {name for name, (_, _, kind) in make_corpus.PLANTED.items() if kind == "notebook"}
        for name in notebooks:
            path = make_corpus.write_notebook(files[name], Path(scratch) / f"{name}.ipynb")
            as_handed_in[name] = path.read_text()
        for label, texts, suffix in (("the notebook as handed in", as_handed_in, {n: "ipynb" for n in notebooks}),
                                     ("the notebook's modules as this grader reads them", extracted, {})):
            scores, seconds = copydetect_scores(python, texts, template, suffix)
            print(f"copydetect, {label}: {separation(scores, planted)}; {seconds:.2f} s")
        worst = sorted(((s, sorted(p)) for p, s in scores.items() if p in planted))[:3]
        print(f"copydetect's lowest planted pairs: {worst}")


def time_copydetect_on_a_class(python: str, count: int) -> None:
    """copydetect on the benchmark's class (each hand-in one file), for its time beside ours."""
    hand_ins = {name: one_file(files) for name, files in make_corpus.synthetic_class(count).items()}
    template = one_file({m: (make_corpus.TEMPLATE / m).read_text() for m in make_corpus.MODULES})
    started = time.perf_counter()
    _, seconds = copydetect_scores(python, hand_ins, template, {})
    print(f"copydetect on a class of {count}: {seconds:.1f} s of its own ({time.perf_counter() - started:.1f} s with "
          f"its start; load average {os.getloadavg()[0]:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--copydetect", default=None, metavar="PYTHON", help="a Python with copydetect installed")
    args = parser.parse_args()
    if args.copydetect:
        bench_copydetect(args.copydetect)
        time_copydetect_on_a_class(args.copydetect, args.count)
    else:
        bench_class(args.count)


if __name__ == "__main__":
    main()
