"""What the self-check needs installed, and what to say when some of it is not.

The student bundle's pyproject.toml installs exactly `SELF_CHECK_REQUIREMENTS` (graders/bundle.py);
tests/test_bundle.py checks that every third-party module the bundled grader imports is among
them (or among the instructor-only ones) and that each of them is imported.

When the grader, or its worker, cannot import one of these modules, the problem is the
grader's environment, not the student's code: `MissingDependency` / `missing_dependency_message`
say so, with the command that fixes it. The ranges start where pyproject.toml's do and stop
before the next major version of what the golden answers were recorded with.
"""

from __future__ import annotations

import json
from pathlib import Path

# (distribution, the module it is imported as, the versions the grader works with)
SELF_CHECK_REQUIREMENTS = (
    ("torch", "torch", ">=2.1,<3"),
    ("numpy", "numpy", ">=1.24,<3"),
    ("safetensors", "safetensors", ">=0.4,<1"),  # tensors across the worker's pipes, golden answers
    ("transformers", "transformers", ">=4.40,<6"),  # the sentiment checks' tiny BertModel, in the worker
    ("jinja2", "jinja2", ">=3.1,<4"),  # report.html
    ("markupsafe", "markupsafe", ">=2,<4"),  # report.html's escaping (also a dependency of jinja2)
    ("nbformat", "nbformat", ">=5.9,<6"),  # a notebook handed in instead of the module files
    ("rich", "rich", ">=13,<16"),  # the terminal summary
    ("pytest", "pytest", ">=8,<10"),  # plain `pytest` in the homework folder
    ("hypothesis", "hypothesis", ">=6.100,<7"),  # pinned to the golden answers' version when they exist
)
# Imported only by instructor features that a self-check never reaches.
INSTRUCTOR_ONLY_MODULES = {"pyarrow": "IMDB from parquet or Arrow files", "submitit": "batch grading on Slurm",
                           "huggingface_hub": "the fine-tuning's encoder from the local Hugging Face cache"}

_GOLDEN_MANIFEST = Path(__file__).resolve().parent / "golden" / "manifest.json"


def pinned_versions(manifest=_GOLDEN_MANIFEST):
    """{distribution: version} that must be exact: hypothesis draws other inputs in another
    version, whose answers the golden fixtures do not hold."""
    try:
        versions = json.loads(Path(manifest).read_text())["fingerprint"]["versions"]
    except (OSError, ValueError, KeyError):
        return {}
    return {"hypothesis": versions["hypothesis"]} if "hypothesis" in versions else {}


def requirement(distribution):
    """The pip requirement of one of SELF_CHECK_REQUIREMENTS: `transformers>=4.40,<6`."""
    pins = pinned_versions()
    if distribution in pins:
        return f"{distribution}=={pins[distribution]}"
    for name, _, versions in SELF_CHECK_REQUIREMENTS:
        if name == distribution:
            return f"{name}{versions}"
    raise KeyError(distribution)


def self_check_requirements():
    return [requirement(name) for name, _, _ in SELF_CHECK_REQUIREMENTS]


def grader_distribution(module_name):
    """The distribution of SELF_CHECK_REQUIREMENTS that provides `module_name` (any submodule
    of it), or None for a module that is not the grader's to provide."""
    top = (module_name or "").partition(".")[0]
    return next((name for name, module, _ in SELF_CHECK_REQUIREMENTS if module == top), None)


def missing_dependency_message(module_name):
    """What to tell whoever runs the grader when `module_name` cannot be imported; None when
    the module is not one of the grader's dependencies (then it is the code's own import)."""
    distribution = grader_distribution(module_name)
    if distribution is None:
        return None
    return (f"the grader's environment lacks {distribution}: run `pip install '{requirement(distribution)}'` "
            "in the environment you run `grade` from (a problem of the installation, not of your code)")


def missing_module(error):
    """The grader dependency whose absence an ImportError reports, or None. Only the package
    itself counts: a submodule that does not exist (`import torch.nonexistent`) is the
    importing code's mistake."""
    if not isinstance(error, ImportError) or not error.name or "." in error.name:
        return None
    return error.name if grader_distribution(error.name) else None
