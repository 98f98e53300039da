"""The assignment's pieces agree with each other, checked when an instructor's grade or `grade
build` loads them: a weight in the rubric that names no check, a check of a part the rubric
lacks, a part with nothing to grade, a diagnosis neither the engine's catalogue
(graders/diagnoses.py) nor the pack's has, a harness task no worker module registers. Each
would otherwise be a silent zero or a check that errors for every student; here it is an error
naming the file and the entry.

Diagnoses and tasks are read from the checks' source (a `diagnosis="..."` argument, a
`.task("name", ...)` call, the values of a module-level `..._DIAGNOSES` table), not by running
anything.
"""

from __future__ import annotations

import ast
import functools
import importlib.util

from graders.scoring import Rubric


class AssignmentError(ValueError):
    """The rubric, the checks, the diagnoses and the worker tasks do not agree."""


def problems(rubric: Rubric, registry: dict, diagnoses: dict, tasks: dict, sources: dict[str, str],
             rubric_name: str = "assignment.toml", answers_file: str | None = None) -> list[str]:
    """Every disagreement, one sentence each. `registry`: {part id: [Check]}; `sources`: {file
    name: the source of a checks module}."""
    found = []
    parts = {part.id: part for part in rubric.parts}
    for part_id, checks in registry.items():
        if part_id not in parts:
            found.append(f"{checks[0].func.__module__}: check {checks[0].id} belongs to part {part_id!r}, "
                         f"which {rubric_name} has no [parts.{part_id}] for")
    for part in rubric.parts:
        ids = {chk.id for chk in registry.get(part.id, [])}
        if not ids and part.module != answers_file:
            found.append(f"{rubric_name}: [parts.{part.id}] has no check")
        for weighted in part.weights:
            if weighted not in ids:
                found.append(f"{rubric_name}: [parts.{part.id}] weights {weighted!r}, which is no check of that part")
    for name, source in sorted(sources.items()):
        diagnoses_named, tasks_called = _names_used(source)
        for line, diagnosis in diagnoses_named:
            if diagnosis not in diagnoses:
                found.append(f"{name}:{line}: diagnosis {diagnosis!r} is in no catalogue of diagnoses")
        for line, task in tasks_called:
            if task not in tasks:
                found.append(f"{name}:{line}: harness task {task!r} is registered by no worker module")
    return found


def _names_used(source: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(line, text) of the diagnoses a checks module names (a `diagnosis="..."` argument, a value
    of a module-level `..._DIAGNOSES` table) and of the harness tasks it calls (the first
    argument of a `.task("...", ...)` call)."""
    diagnoses, tasks = [], []

    def text(node):
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            diagnoses += [(node.lineno, text(arg.value)) for arg in node.keywords
                          if arg.arg == "diagnosis" and text(arg.value) is not None]
            if isinstance(node.func, ast.Attribute) and node.func.attr == "task" and node.args \
                    and text(node.args[0]) is not None:
                tasks.append((node.lineno, text(node.args[0])))
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                isinstance(target, ast.Name) and target.id.endswith("_DIAGNOSES") for target in node.targets):
            diagnoses += [(value.lineno, text(value)) for value in node.value.values if text(value) is not None]
    return diagnoses, tasks


@functools.cache
def validate_assignment(assignment) -> None:
    """Raise AssignmentError listing every disagreement of the assignment's pack (once per
    process and pack)."""
    from graders.sandbox import tasks  # noqa: F401  registers the general tasks
    from graders.sandbox.harness import TASKS

    registry = assignment.registry()
    assignment.import_tasks()
    sources = {}
    for name in assignment.check_modules:
        origin = importlib.util.find_spec(name).origin
        with open(origin, encoding="utf-8") as source:
            sources[origin] = source.read()
    found = problems(assignment.rubric, registry, assignment.all_diagnoses(), TASKS, sources,
                     rubric_name=str(assignment.folder / "assignment.toml"), answers_file=assignment.answers_file)
    if found:
        raise AssignmentError(f"the pieces of the assignment {assignment.name!r} disagree:\n  - " + "\n  - ".join(found))
