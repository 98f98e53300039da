"""Course-scale grading: many submissions, resumably, in parallel, locally or on Slurm.

    discover.py   the submissions of a folder or a manifest, with student ids and input hashes
    store.py      the output folder: one result folder per submission written atomically, the
                  done-marker that makes a run resumable, the event ledger, the run lock
    run_one.py    grade one submission and publish its result folder (`python -m graders.batch.run_one`)
    supervise.py  a job = one run_one subprocess with a hard wall-clock limit and retries for lost
                  infrastructure; the local pool runs N such jobs at a time
    slurm.py      the same jobs as a Slurm job array through submitit
    gradebook.py  gradebook.csv and summary.html, rebuilt from the per-submission results.json
    merge.py      manual scores of written answers merged into results.json
    cli.py        `grade batch` and `grade merge`

See docs/batch.md.
"""

import importlib

# Imported on first use, so that `python -m graders.batch.run_one` does not import itself twice
# through this package, and `import graders.batch` stays cheap.
_EXPORTS = {"BatchConfig": "run", "run_batch": "run", "Submission": "discover", "discover": "discover",
            "rebuild": "gradebook", "merge_manual": "merge"}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
