"""What the self-check needs installed, and what to say when some of it is not.

The student bundle's pyproject.toml installs exactly `self_check_requirements(assignment)`: the
engine's own distributions (`ENGINE_REQUIREMENTS`) and those the assignment's manifest declares
(`[dependencies] runtime`), with everything they require, at the lock's versions
(graders/lock.py), but torch, which each platform installs in its own build; the Gradescope kit
installs `kit_requirements(assignment)`, the same for the instructor's grade. tests/test_bundle.py
checks that every third-party module the bundled grader imports is among them (or among the
instructor-only ones) and that each of them is imported.

When the grader, or its worker, cannot import one of these modules, the problem is the
grader's environment, not the student's code: `MissingDependency` / `missing_dependency_message`
say so, with the command that fixes it. The ranges are those the grader works with: pyproject.toml's
lower bounds, up to the next major version of the lock's; the lock is the one point inside them
that the golden answers were recorded with.
"""

from __future__ import annotations

# The engine's own: (distribution, the module it is imported as, the versions the grader works with)
ENGINE_REQUIREMENTS = (
    ("torch", "torch", ">=2.1,<3"),
    ("numpy", "numpy", ">=1.24,<3"),
    ("safetensors", "safetensors", ">=0.4,<1"),  # tensors across the worker's pipes, golden answers
    ("jinja2", "jinja2", ">=3.1,<4"),  # report.html
    ("markupsafe", "markupsafe", ">=2,<4"),  # report.html's escaping (also a dependency of jinja2)
    ("nbformat", "nbformat", ">=5.9,<6"),  # a notebook handed in instead of the module files
    ("rich", "rich", ">=13,<16"),  # the terminal summary
    ("pytest", "pytest", ">=8,<10"),  # plain `pytest` in the homework folder
    ("hypothesis", "hypothesis", ">=6.100,<7"),  # pinned to the golden answers' version when they exist
)
# What the course's packs declare in their manifests (`[dependencies] runtime`), which the grader
# is installed with: only a pack that declares one gets it in its bundle and kit.
PACK_REQUIREMENTS = (
    ("transformers", "transformers", ">=4.40,<6"),  # BERT models the bert pack's checks build in the worker
)
SELF_CHECK_REQUIREMENTS = ENGINE_REQUIREMENTS + PACK_REQUIREMENTS  # whatever a self-check may import
# Imported only by instructor features that a self-check never reaches.
INSTRUCTOR_ONLY_MODULES = {"pyarrow": "IMDB from parquet or Arrow files", "submitit": "batch grading on Slurm",
                           "packaging": "the lock's requirements, pinned by `grade build` and the Gradescope kit",
                           "huggingface_hub": "the fine-tuning's encoder from the local Hugging Face cache",
                           "flask": "the review desk's web app (`grade review`)", "waitress": "the review desk's server",
                           "jsonschema": "`grade report`'s check of a results.json it is given"}



def requirement(distribution):
    """The pip requirement of one of SELF_CHECK_REQUIREMENTS: the lock's version
    (`transformers==5.24.0`), or its range for torch, or where no lock is readable."""
    from graders.lock import LockError, read_lock

    ranges = {name: versions for name, _, versions in SELF_CHECK_REQUIREMENTS}
    if distribution not in ranges:
        raise KeyError(distribution)
    try:
        locked = read_lock().get(distribution) if distribution != "torch" else None
    except (OSError, LockError):
        locked = None
    return f"{distribution}=={locked}" if locked else f"{distribution}{ranges[distribution]}"


def self_check_requirements(assignment):
    """The student bundle's dependencies: torch as a range, and every other distribution the
    engine's self-check and the assignment's declared dependencies import, with all they
    require, at the lock's exact versions. Raises graders.lock.LockError where this environment
    is not the lock (the requirements are read from what is installed)."""
    from graders.lock import pins

    others = [name for name, _, _ in ENGINE_REQUIREMENTS if name != "torch"]
    return [requirement("torch"), *pins([*others, *assignment.runtime_dependencies], ranged=["torch"])]


def kit_requirements(assignment):
    """The Gradescope kit's: everything the grader requires at run time but what only other packs
    declare, and the assignment's declared dependencies, with all they require, at the lock's
    versions (torch apart: the kit's setup.sh installs the lock's release from PyTorch's index)."""
    from graders.lock import GRADER_DISTRIBUTION, canonical, pins, requirements_of

    packs_own = {canonical(name) for name, _, _ in PACK_REQUIREMENTS}
    engine = [name for name, _ in requirements_of(GRADER_DISTRIBUTION) if name not in packs_own]
    return pins([*engine, *assignment.runtime_dependencies], ranged=["torch"])


def grader_distribution(module_name):
    """The distribution of SELF_CHECK_REQUIREMENTS that provides `module_name` (any submodule
    of it), or None for a module that is not the grader's to provide."""
    top = (module_name or "").partition(".")[0]
    return next((name for name, module, _ in SELF_CHECK_REQUIREMENTS if module == top), None)


def import_name(distribution):
    """The module a distribution of SELF_CHECK_REQUIREMENTS is imported as."""
    return next(module for name, module, _ in SELF_CHECK_REQUIREMENTS if name == distribution)


def missing_dependency_message(module_name):
    """What to tell whoever runs the grader when `module_name` cannot be imported; None when
    the module is not one of the grader's dependencies (then it is the code's own import)."""
    distribution = grader_distribution(module_name)
    if distribution is None:
        return None
    return (f"the grader's environment lacks {distribution}: run `pip install '{requirement(distribution)}'` "
            "in the environment you run `grade` from (a problem of the installation, not of your code)")


def broken_dependency_message(module_name, problem):
    """What to tell whoever runs the grader when one of its dependencies is installed but fails
    to import (`problem`: the error at the bottom of it)."""
    return (f"the grader's environment cannot import {module_name}: {problem}. Another package of the "
            f"environment clashes with it (often torchvision, torchaudio or an extension built for "
            f"another torch): run `pip check`, then reinstall it or remove the clashing package "
            "(a problem of the installation, not of your code)")


def missing_module(error):
    """The grader dependency whose absence a ModuleNotFoundError reports, or None. Only the
    package itself counts: a submodule that does not exist (`import torch.nonexistent`) or a
    name it does not have (`from transformers import Bertmodel`, a plain ImportError) is the
    importing code's mistake."""
    if not isinstance(error, ModuleNotFoundError) or not error.name or "." in error.name:
        return None
    return error.name if grader_distribution(error.name) else None


def broken_dependency(error):
    """`(module, problem)` when `error` came out of the module code of one of the grader's
    dependencies while it was imported, whoever imported it: it is installed but does not import
    in this environment (transformers importing a torchvision built for another torch). `module`
    is the innermost module of the dependency whose code raised (`transformers.modeling_utils`,
    not `transformers`, whose own import is lazy and may well succeed); `problem` is the error at
    the bottom of the chain. None for anything else, the student's own mistakes inside a
    dependency's functions included (those run in functions, not in module code)."""
    try:
        folders = _dependency_folders()
        chain = error_chain(error)
        innermost = None
        for link in chain:
            traceback = link.__traceback__
            while traceback is not None:
                code = traceback.tb_frame.f_code
                if code.co_name == "<module>":
                    for module, folder in folders:
                        if code.co_filename.startswith(folder):
                            innermost = _module_name(module, code.co_filename[len(folder):])
                traceback = traceback.tb_next
        if innermost is not None:
            bottom = chain[-1]
            return innermost, f"{type(bottom).__name__}: {str(bottom)[:300]}"
    except Exception:  # noqa: BLE001  an exception object of the student's own making
        return None
    return None


def error_chain(error):
    """`error` and the errors that caused it (`__cause__`, else `__context__`), outermost first:
    at most 20, each once (an exception object may be of anyone's making)."""
    chain, seen = [], set()
    while error is not None and id(error) not in seen and len(chain) < 20:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _module_name(package, relative_file):
    """`transformers`, `modeling_utils.py` -> `transformers.modeling_utils`; a package's
    `__init__.py` is the package itself."""
    parts = relative_file.removesuffix(".py").replace("\\", "/").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *[part for part in parts if part]])


def dependency_module(name):
    """`name` when it is a module of one of the grader's dependencies installed here (a file of
    its package, found without importing anything), else None: what a worker names is checked
    before the grader imports it anywhere."""
    import os
    import re

    if not (isinstance(name, str) and len(name) <= 200 and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*){0,15}", name)):
        return None
    top, _, rest = name.partition(".")
    for module, folder in _dependency_folders():
        if module != top:
            continue
        path = os.path.join(folder, *rest.split(".")) if rest else folder.rstrip(os.sep)
        if not rest or os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__init__.py")):
            return name
    return None


def _dependency_folders():
    """(module, its package folder + "/") of each grader dependency installed here."""
    import importlib.util
    import os
    import sys

    folders = []
    for _, module, _ in SELF_CHECK_REQUIREMENTS:
        loaded = sys.modules.get(module)
        try:
            locations = list(getattr(loaded, "__path__", None) or importlib.util.find_spec(module).submodule_search_locations)
        except Exception:  # noqa: BLE001  not installed, or not a package
            continue
        folders += [(module, os.path.join(location, "")) for location in locations]
    return folders
