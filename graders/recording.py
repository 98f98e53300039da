"""The golden answers of the self-check (`golden/` in the assignment's pack): what they were
recorded from (the fingerprint), whether they are still up to date, and recording them (`grade
build --golden`).

A self-check draws its inputs from the rubric's seed and looks up the reference's answers to
them here instead of running the reference, which students do not have (docs/selfcheck.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import graders
from graders.scoring import NOT_PASSING, part_ids, public_checks

ENGINE_DIR = Path(graders.__file__).resolve().parent
MANIFEST = "manifest.json"
# Reasons a refusal names, at most: the first few say what happened, the rest only how many.
SHOWN_REASONS = 3


def fingerprint_files(assignment):
    """{name: sha256} of every file whose content decides which inputs the public checks draw and
    what the reference answers: the check framework and oracles of the engine, the pack's checks, worker
    tasks and oracle computations (every module in their folders), the reference. When one changes,
    the golden fixtures must be recorded again. The rest of the engine is not among them: what
    it passes to the draws (the seed, the examples per property) is in the fingerprint as values."""
    assignment.ensure_importable()

    def origin(module):
        return Path(importlib.util.find_spec(module).origin)

    mutants = assignment.mutants_path
    # the pack's mutants may sit beside its checks: they decide no draw and never ship in a bundle
    pack = {path for name in assignment.check_modules for path in origin(name).parent.glob("*.py")
            if mutants is None or not (path == mutants or mutants in path.parents)}
    if assignment.oracle_module:
        pack.add(origin(assignment.oracle_module))
    # the worker tasks build what the checks ask of the reference (a probe module, stand-ins)
    pack.update(origin(name) for name in assignment.task_modules)
    named = [*((f"graders/{path.relative_to(ENGINE_DIR).as_posix()}", path)
               for path in [*ENGINE_DIR.glob("checks/*.py"), ENGINE_DIR / "oracles.py"]),
             *((f"reference/{path.name}", path) for path in assignment.reference_dir.glob("*.py")),
             *((f"pack/{path.relative_to(assignment.folder).as_posix()}", path) for path in pack)]
    files = {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in named if path.is_file()}
    return dict(sorted(files.items()))


def library_versions():
    import hypothesis
    import torch

    return {"hypothesis": hypothesis.__version__, "torch": torch.__version__.split("+")[0]}


def golden_fingerprint(assignment):
    """What the golden fixtures were recorded from: source hashes, seed, examples per property,
    public checks, versions."""
    from graders.grading import MAX_EXAMPLES, SELF_CHECK

    return {
        "assignment": assignment.name,
        "seed": assignment.rubric.seed,
        "examples_per_property": MAX_EXAMPLES[SELF_CHECK],
        "public_checks": [c.id for _, c in public_checks(assignment)],
        "files": fingerprint_files(assignment),
        "versions": library_versions(),
    }


def read_manifest(golden_dir):
    path = Path(golden_dir) / MANIFEST
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def stale_reasons(assignment, golden_dir=None):
    """Why the golden fixtures in golden_dir (by default the pack's) no longer match the sources ([] when they do)."""
    golden_dir = golden_dir or assignment.golden_dir
    manifest = read_manifest(golden_dir)
    if manifest is None:
        return [f"{golden_dir} holds no {MANIFEST}"]
    now = golden_fingerprint(assignment)
    recorded = manifest.get("fingerprint", {})
    reasons = _source_reasons(recorded, now, reference_installed=True)
    for library, version in now["versions"].items():
        if recorded.get("versions", {}).get(library) != version:
            reasons.append(f"{library} is {version}, the fixtures were recorded with {recorded.get('versions', {}).get(library)}")
    return reasons


def out_of_date(assignment, golden_dir=None):
    """One line when the golden answers no longer match the checks or the reference they were
    recorded from, with the fix; else None. A self-check with such answers would mark right
    code wrong, so `grade check`, pytest in a bundle and `grade build --bundle` refuse.

    Library versions are left to graders.lock (a draw-deciding one refuses, another torch is a
    note). A student bundle holds no reference: there its files are not compared (`grade build
    --bundle` compared them when it wrote the bundle), and the fix is a new bundle, not a
    recording the student cannot make."""
    golden_dir = golden_dir or assignment.golden_dir
    manifest = read_manifest(golden_dir)
    if manifest is None:
        return None  # no answers at all: the self-check says so with its own fix
    reference_installed = assignment.reference_dir.is_dir()
    reasons = _source_reasons(manifest.get("fingerprint", {}), golden_fingerprint(assignment),
                              reference_installed=reference_installed)
    if not reasons:
        return None
    shown = "; ".join(reasons[:SHOWN_REASONS]) + (f"; {len(reasons) - SHOWN_REASONS} more" if len(reasons) > SHOWN_REASONS else "")
    fix = (f"run `grade build --golden --assignment {assignment.name}`" if reference_installed else
           "your code is not at fault; ask the course staff for a bundle built after they re-recorded the answers")
    return (f"the golden answers of {assignment.name} no longer match its checks or reference ({shown}), so a "
            f"self-check would judge right code against outdated answers: {fix}")


def _source_reasons(recorded, now, *, reference_installed):
    """Why the fingerprint `recorded` no longer matches `now`, library versions aside; without
    `reference_installed`, the reference's files are not compared."""
    reasons = []
    if recorded.get("assignment") != now["assignment"]:
        reasons.append(f"they were recorded for the assignment {recorded.get('assignment')!r}, not {now['assignment']!r}")
    if recorded.get("seed") != now["seed"]:
        reasons.append(f"the rubric's seed is {now['seed']}, the fixtures were recorded with {recorded.get('seed')}")
    if recorded.get("examples_per_property") != now["examples_per_property"]:
        reasons.append(f"a self-check draws {now['examples_per_property']} examples per property, the fixtures "
                       f"were recorded for {recorded.get('examples_per_property')}")
    if recorded.get("public_checks") != now["public_checks"]:
        added = sorted(set(now["public_checks"]) - set(recorded.get("public_checks", [])))
        removed = sorted(set(recorded.get("public_checks", [])) - set(now["public_checks"]))
        reasons.append(f"the public checks changed (new: {added or 'none'}, gone: {removed or 'none'}, or reordered)")
    old_files, new_files = recorded.get("files", {}), now["files"]
    for name in sorted(old_files.keys() | new_files.keys()):
        if not reference_installed and name.startswith("reference/"):
            continue
        if old_files.get(name) != new_files.get(name):
            what = "is new" if name not in old_files else "is gone" if name not in new_files else "changed"
            reasons.append(f"{name} {what}")
    return reasons


def _grade_recording(assignment, source, oracle, **kwargs):
    """grade() in self-check mode, with `oracle` answering instead of the golden fixtures."""
    from graders import grading

    return grading.grade(source, mode=grading.SELF_CHECK, oracle=oracle, assignment=assignment, **kwargs)


def record_golden(assignment, out_dir=None, *, parts=None, reference_dir=None, limits=None, progress=None):
    """Run every public check of `assignment` on the reference in self-check mode, recording what the reference
    oracle answers, and write the records and a manifest into out_dir (replacing it).

    The seed is the rubric's, as `grade check` uses it, so a self-check draws the same inputs.
    Raises RuntimeError when the reference fails a public check: its answers would be wrong.
    Returns the reference's self-check results."""
    from graders.oracles import RecordingOracle

    out_dir = Path(out_dir or assignment.golden_dir)
    recorder = RecordingOracle(assignment)
    seed = assignment.rubric.seed
    results = _grade_recording(assignment, reference_dir or assignment.reference_dir, recorder, seed=seed, only_parts=parts,
                               limits=limits, progress=progress)
    problems = [f"{c['id']}: {c['status']}: {c['message']}"
                for part in results["parts"] for c in part["checks"]
                if c["status"] in NOT_PASSING]
    if results["status"] != "graded" or problems:
        raise RuntimeError("the reference does not pass every public check, so its answers cannot be "
                           "recorded:\n  " + "\n  ".join(problems or [str(results.get("reason"))]))
    staging = Path(tempfile.mkdtemp(prefix=".golden-", dir=out_dir.parent))
    try:
        recorder.save(staging)
        manifest = {
            "about": "Golden fixtures for `grade check`: the reference's answers to the inputs the public "
                     "checks draw with this seed. Regenerate with `grade build --golden`.",
            "records": len(recorder.records),
            "parts": parts or part_ids(assignment.rubric),
            "fingerprint": golden_fingerprint(assignment),
        }
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        os.chmod(staging, 0o755)  # package data: readable by everyone, like the rest of the package
        for path in staging.iterdir():
            os.chmod(path, 0o644)
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return results


