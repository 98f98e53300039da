"""The autograder for Gradescope: `grade gradescope-kit` writes the zip an instructor uploads,
and its `run_autograder` grades one submission there.

Gradescope builds an image from the zip: it unpacks it into /autograder/source and runs
`setup.sh` as root (with internet), then for every submission runs /autograder/run_autograder
as root with the student's files in /autograder/submission, and shows
/autograder/results/results.json. The kit holds:

    setup.sh          Python 3.11+, bubblewrap, a virtualenv with the lock's exact versions of
                      the grader's dependencies (graders/requirements.lock; CPU torch)
    run_autograder    python -m graders.gradescope_kit run /autograder
    requirements.txt  those versions
    kit.json          the grading options baked in (assignment, parts, seed, isolation, unsafe)
    grader/           the grader with the assignment's pack, and its reference solution, from
                      this installation

Grading fails closed as everywhere, at the kit's isolation level: `container` by default, since
Gradescope's Docker forbids bubblewrap's namespaces and each submission gets a container of its
own (graders/sandbox/isolation.py), or `full`. On an image where student code cannot be isolated
at that level, the submission is not graded: results.json tells the student so honestly (score 0,
a problem of the autograder, please tell the instructor), and the refusal with its fix is in the
autograder's output, which the instructor sees. --unsafe-no-sandbox grades anyway, which every
output then shows.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import graders
from graders.assignment import PACKS_DIR, Assignment
from graders.atomic import OutputFolderError, output_file, write_atomically
from graders.options import command_parser, validate_parts
from graders.sandbox.isolation import CONTAINER, EXIT_NOT_ISOLATED, FULL, LEVELS

KIT_CONFIG = "kit.json"
GRADER_FOLDER = "grader"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, to build the autograder's image.
set -euo pipefail
cd /autograder/source
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
PYTHON=$(command -v python3.13 || command -v python3.12 || command -v python3.11 || true)
if [ -z "$PYTHON" ]; then
    apt-get install -y -q python3.11
    PYTHON=$(command -v python3.11)
fi
apt-get install -y -q bubblewrap "$(basename "$PYTHON")-venv"
"$PYTHON" -m venv /autograder/venv
/autograder/venv/bin/pip install -q --upgrade pip
/autograder/venv/bin/pip install -q "torch==__TORCH__" --index-url __TORCH_INDEX__
/autograder/venv/bin/pip install -q -r requirements.txt
# The grader and the reference come from this kit, not from an index.
SITE=$(/autograder/venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo /autograder/source/__GRADER__ > "$SITE/transformer_grader_kit.pth"
# At the kit's isolation level; under container isolation this also makes the workers' own root
# (a tree of links, graders/sandbox/rootfs.py) in the image, so that no submission pays for it.
/autograder/venv/bin/python -m graders.cli doctor --isolation __ISOLATION__ \
    || echo "grade doctor: student code cannot be isolated on this image"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this as root for every submission: submission/ in, results/results.json out.
exec "${GRADER_PYTHON:-/autograder/venv/bin/python}" -m graders.gradescope_kit run "${AUTOGRADER_ROOT:-/autograder}"
"""


def pinned_requirements(assignment: Assignment) -> list[str]:
    """What the grader requires at run time for this assignment, at the lock's versions
    (graders/dependencies.py: the engine's own and the pack's declared ones; torch apart:
    setup.sh takes its CPU build from PyTorch's index, at the lock's version)."""
    from graders.dependencies import kit_requirements

    return kit_requirements(assignment)


def torch_version() -> str:
    from graders.lock import read_lock

    return read_lock()["torch"]


def write_kit(out: Path, assignment: Assignment, *, parts: list[str] | None = None, seed: int | None = None,
              unsafe: bool = False, isolation: str = CONTAINER) -> Path:
    """The autograder zip for Gradescope, at `out`, for the assignment: the engine, its pack (as
    an installed one) and its reference, where the pack's manifest finds it."""
    engine = Path(graders.__file__).parent
    config = {"assignment": assignment.name, "parts": parts, "seed": seed, "isolation": isolation,
              "unsafe_no_sandbox": unsafe}
    pack_home = f"{engine.name}/{PACKS_DIR.name}/{assignment.name}"
    # The manifest names the reference relative to the pack's folder: it lies as far from the
    # pack in the kit as it does here.
    reference_home = Path(pack_home, os.path.relpath(assignment.reference_dir, assignment.folder))
    folders = [(engine, engine.name), (assignment.folder, pack_home),
               (assignment.reference_dir, _normal(reference_home))]
    setup = (SETUP_SH.replace("__TORCH__", torch_version()).replace("__TORCH_INDEX__", TORCH_CPU_INDEX)
             .replace("__GRADER__", GRADER_FOLDER).replace("__ISOLATION__", isolation))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as kit:
        _add(kit, "setup.sh", setup, executable=True)
        _add(kit, "run_autograder", RUN_AUTOGRADER, executable=True)
        _add(kit, "requirements.txt", "\n".join(pinned_requirements(assignment)) + "\n")
        _add(kit, KIT_CONFIG, json.dumps(config, indent=2) + "\n")
        for folder, home in folders:
            for path in sorted(folder.rglob("*")):
                relative = path.relative_to(folder)
                if folder == engine and relative.parts[0] == PACKS_DIR.name and len(relative.parts) > 2:
                    continue  # other packs stay out; this one is added as its own folder
                if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                    _add(kit, f"{GRADER_FOLDER}/{home}/{relative.as_posix()}", path.read_bytes())
    return write_atomically(out, buffer.getvalue())


def _normal(path: Path) -> str:
    """`a/b/../../c` as `c`; a reference outside the kit's grader/ folder cannot be shipped."""
    parts: list[str] = []
    for part in path.parts:
        if part == "..":
            if not parts:
                raise ValueError(f"the reference lies outside the grader's folder ({path}): install the pack "
                                 "with its reference beside graders/ to make a kit")
            parts.pop()
        elif part != ".":
            parts.append(part)
    return "/".join(parts)


def _add(kit: zipfile.ZipFile, name: str, data, *, executable: bool = False) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))  # the same kit, byte for byte
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    kit.writestr(info, data)


# ---------------------------------------------------------------- on Gradescope


def submitted_input(submission: Path) -> Path:
    """What to grade: the folder Gradescope filled, or the one zip or notebook in it."""
    files = [p for p in submission.iterdir() if not p.name.startswith(".")] if submission.is_dir() else []
    if len(files) == 1 and files[0].is_file() and files[0].suffix.lower() in (".zip", ".ipynb"):
        return files[0]
    return submission


def not_graded(text: str) -> dict:
    from graders.reports.gradescope import STDOUT_VISIBILITY

    return {"score": 0, "output": text, "output_format": "text", "stdout_visibility": STDOUT_VISIBILITY, "tests": []}


def run(root: Path, grade: Callable[[list[str]], int]) -> int:
    """Grade root/submission with `grade` (the `grade` command's main) and write
    root/results/results.json; always writes it."""
    config = json.loads((root / "source" / KIT_CONFIG).read_text())
    results_file = root / "results" / "results.json"
    out = root / "grade-out"
    shutil.rmtree(out, ignore_errors=True)
    argv = [str(submitted_input(root / "submission")), "--out", str(out)]
    if config.get("assignment"):
        argv += ["--assignment", config["assignment"]]
    if config.get("parts"):
        argv += ["--parts", *config["parts"]]
    if config.get("seed") is not None:
        argv += ["--seed", str(config["seed"])]
    argv += ["--isolation", config.get("isolation") or FULL]
    if config.get("unsafe_no_sandbox"):
        argv.append("--unsafe-no-sandbox")
    status = grade(argv)
    export = out / "gradescope.json"
    if status == EXIT_NOT_ISOLATED:
        # The instructor reads the autograder's output on Gradescope (stdout and stderr, where the
        # refusal and its fix were printed); the student reads only this.
        print(f"AUTOGRADER NOT GRADING: this image cannot isolate student code at the kit's isolation level "
              f"({config.get('isolation') or FULL}); the refusal above says what is missing and how to fix it. "
              "Rebuild the kit (grade gradescope-kit) once fixed, and regrade.", file=sys.stderr)
        document = not_graded("Not graded: the course's autograder could not run your code safely on this server, "
                              "a problem of the autograder's setup, not of your submission. Your submission is kept; "
                              "please tell your instructor, who sees why in the autograder's output.")
    elif export.is_file():
        document = json.loads(export.read_text())
    else:
        document = not_graded("Not graded: the autograder failed, a problem of the autograder, not of your submission. "
                              "Your submission is kept; please tell your instructor, who sees why in the "
                              "autograder's output.")
    write_atomically(results_file, json.dumps(document, indent=1, allow_nan=False))
    return 0


def cmd_kit(argv, given=None) -> int:
    """`grade gradescope-kit` for the assignment `given` (--assignment), else the only installed one."""
    from graders.assignment import resolve

    parser = command_parser("grade gradescope-kit", "Write the autograder zip to upload to Gradescope.")
    parser.add_argument("--out", type=Path, default=Path("autograder.zip"))
    parser.add_argument("--parts", nargs="+", default=None, metavar="PART", help="grade only these parts")
    parser.add_argument("--seed", type=int, default=None, help="grading seed (default: the rubric's)")
    parser.add_argument("--isolation", choices=LEVELS, default=CONTAINER,
                        help="what grading on Gradescope requires (default: container, since Gradescope's Docker "
                             "forbids the namespaces of full isolation: each submission's container is the boundary; "
                             "docs/sandbox.md)")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade even where the image cannot isolate student code; every output says so")
    args = parser.parse_args(argv)
    assignment = resolve(given)
    validate_parts(args.parts, parser, assignment)
    try:
        output_file(args.out)
    except OutputFolderError as error:
        print(f"grade gradescope-kit: {error}", file=sys.stderr)
        return 2
    path = write_kit(args.out, assignment, parts=args.parts, seed=args.seed, unsafe=args.unsafe_no_sandbox, isolation=args.isolation)
    print(f"autograder kit: {path} (upload it as the assignment's autograder on Gradescope); isolation: "
          f"{'NONE (--unsafe-no-sandbox)' if args.unsafe_no_sandbox else args.isolation}")
    return 0


if __name__ == "__main__":  # run_autograder: `python -m graders.gradescope_kit run ROOT`
    from graders.cli import main

    if sys.argv[1:2] == ["run"] and len(sys.argv) == 3:
        sys.exit(run(Path(sys.argv[2]), main))
    sys.exit(main(["gradescope-kit", *sys.argv[1:]]))
