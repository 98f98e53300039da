"""The lock: the exact version of every distribution the grader and its tests run with.

`requirements.lock` beside this file is what `setup.sh` installs (`pip install --no-deps -r`,
so nothing outside it is resolved), and what the student bundle's and the Gradescope kit's
pins are taken from. pyproject.toml keeps the ranges the grader works with; the lock is the one
point inside them that the golden answers were recorded with: hypothesis draws other inputs in
another version, so its answers would be for other questions.

The lock moves only on purpose: `bash scripts/upgrade-lock.sh` re-resolves pyproject.toml's
ranges in a scratch environment (`python -m graders.lock refresh`), installs the new lock,
re-records every pack's golden answers and runs the tests (docs/engine.md, "The locked
environment").

    python -m graders.lock check      does this environment hold exactly the lock? (exit 1 if not)
    python -m graders.lock refresh    write a new lock from pyproject.toml's ranges
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import tempfile
from pathlib import Path

LOCK_PATH = Path(__file__).resolve().parent / "requirements.lock"
GRADER_DISTRIBUTION = "transformer-grader"
# The installer, not something the grader runs.
NOT_LOCKED = frozenset({"pip", GRADER_DISTRIBUTION})
# The grader's extras that setup.sh installs: the lock covers all of them.
EXTRAS = ("dev", "slurm", "data", "review")
# Which versions decide the golden answers' inputs: a self-check refuses to compare its draws
# with answers recorded under another one.
DRAW_DECIDING = ("hypothesis",)
HEADER = """\
# The grader's environment, exactly: every distribution that setup.sh installs (the grader with
# its extras {extras}, and its test tools), resolved by pip from pyproject.toml's ranges on
# Python {python}, Linux, CPU torch. The golden answers were recorded with these versions, and the
# student bundles and the Gradescope kit pin them. Do not edit by hand: `bash scripts/upgrade-lock.sh`
# refreshes it, re-records the golden answers and runs the tests.
"""


class LockError(RuntimeError):
    """The environment is not the lock, where it has to be."""


def canonical(name):
    """A distribution's name as PEP 503 compares it: `Jinja2`, `typing_extensions` -> `jinja2`, `typing-extensions`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version):
    """A version without its local label: `2.13.0+cpu` -> `2.13.0` (the lock pins the release, whichever build)."""
    return version.split("+")[0]


def read_lock(path=LOCK_PATH):
    """{canonical name: version} of the lock."""
    pins = {}
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, separator, version = line.partition("==")
        if not separator or not version.strip():
            raise LockError(f"{path}, line {number}: {line!r} is not `name==version`")
        pins[canonical(name.strip())] = version.strip()
    return pins


def installed_versions():
    """{canonical name: version} of every distribution this Python sees, first one found of each."""
    versions = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if name:
            versions.setdefault(canonical(name), distribution.version)
    return versions


def requirements_of(name):
    """[(canonical name, marker)] of what `name` requires here: its extras left out, markers
    evaluated for this Python, each kept ("" for none) for the platforms where it differs."""
    from packaging.requirements import Requirement

    try:
        lines = importlib.metadata.requires(name) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    needed = []
    for line in lines:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            needed.append((canonical(requirement.name), str(requirement.marker or "")))
    return needed


def closure(roots):
    """{canonical name: marker} of `roots` and of everything they require here, transitively.
    The marker is "" where something requires it unconditionally, else its requirements'
    markers joined (`hf-xet` only on the machines huggingface-hub names), so that a pin carries
    it to the student whose platform does not need it. Only the requirement's own marker counts,
    not its parents': what a platform-dependent package requires is pinned, and so installed,
    everywhere (here: small pure-Python packages such as idna)."""
    conditions = {}
    todo = [(canonical(root), "") for root in roots]
    while todo:
        name, marker = todo.pop()
        if name not in conditions:
            todo.extend(requirements_of(name))
        conditions.setdefault(name, set()).add(marker)
    return {name: "" if "" in found else next(iter(found)) if len(found) == 1
            else " or ".join(f"({marker})" for marker in sorted(found)) for name, found in conditions.items()}


def differences(lock=None, installed=None):
    """What keeps this environment from being the lock, one line each ([] when it is).
    Distributions that only this torch requires are left alone: a GPU runner's CUDA build of
    the locked torch brings packages of its own."""
    lock = read_lock() if lock is None else lock
    installed = installed_versions() if installed is None else installed
    lines = []
    for name, version in sorted(lock.items()):
        if name not in installed:
            lines.append(f"{name} is not installed (the lock: {version})")
        elif release(installed[name]) != release(version):
            lines.append(f"{name} is {installed[name]} (the lock: {version})")
    torch_own = set(closure(["torch"])) if "torch" in installed else set()
    extra = sorted(set(installed) - set(lock) - NOT_LOCKED - torch_own)
    lines += [f"{name} {installed[name]} is installed but not in the lock" for name in extra]
    return lines


def pins(roots, *, ranged=(), lock=None):
    """`name==version` from the lock for every distribution of `closure(roots)`, sorted, with
    the marker of a platform-dependent one, but the `ranged` ones (torch: each platform brings
    its own build), which are left out. Raises LockError when one of them is not in the lock or
    is installed at another version: their requirements were read from what is installed."""
    lock = read_lock() if lock is None else lock
    installed = installed_versions()
    left_out = {canonical(name) for name in ranged}
    markers = {name: marker for name, marker in closure(roots).items() if name not in left_out}
    wrong = [f"{name} {installed.get(name, 'missing')} (the lock: {lock.get(name, 'none')})"
             for name in sorted(markers) if name not in lock or release(installed.get(name, "")) != release(lock[name])]
    if wrong:
        raise LockError(f"this environment is not the lock ({'; '.join(wrong)}): run `bash setup.sh` to install "
                        "it, or `bash scripts/upgrade-lock.sh` to move the lock")
    return [f"{name}=={lock[name]}" + (f"; {markers[name]}" if markers[name] else "") for name in sorted(markers)]


def first_difference(have, want, libraries):
    """(library, have's version or None, want's) of the first of `libraries` that `want` names at
    another release than `have` holds; None when there is none."""
    for library in libraries:
        if want.get(library) and release(have.get(library) or "") != release(want[library]):
            return library, have.get(library), want[library]
    return None


def draw_mismatch(recorded_versions):
    """One line when this environment draws other inputs than the golden answers were recorded
    for (`recorded_versions`: a golden manifest's {library: version}), with the fix; else None."""
    found = first_difference(installed_versions(), recorded_versions, DRAW_DECIDING)
    if found is None:
        return None
    library, installed, recorded = found
    return (f"the golden answers were drawn with {library} {recorded} and this environment has "
            f"{installed or 'none'}, which draws other inputs: run `pip install {library}=={recorded}`, then check again")


def recording_mismatch(lock=None):
    """One line when the versions that decide the golden answers (the draws', torch's) are not
    the lock's here, with the fix; else None. `grade build` records and ships answers of the
    lock only."""
    found = first_difference(installed_versions(), read_lock() if lock is None else lock, (*DRAW_DECIDING, "torch"))
    if found is None:
        return None
    library, installed, locked = found
    return (f"{library} {installed or '(none)'} is installed and the lock says {locked}: the golden answers are the "
            "lock's; run `bash setup.sh` to install the lock, or `bash scripts/upgrade-lock.sh` to move it")


def golden_mismatch(manifest, pack, lock=None):
    """One line when a pack's golden answers (its `manifest`) were recorded with other versions
    than the lock's, with the fix; else None."""
    recorded = (manifest or {}).get("fingerprint", {}).get("versions", {})
    found = first_difference(recorded, read_lock() if lock is None else lock, sorted(recorded))
    if found is None:
        return None
    library, version, locked = found
    return (f"the golden answers of {pack} were recorded with {library} {version} and the lock says {locked}: "
            f"run `grade build --golden --assignment {pack}`")


# ---------------------------------------------------------------------------- refresh


def freeze(python):
    """The lock's lines for the environment of `python`: every distribution but pip and the grader."""
    listed = subprocess.run([str(python), "-m", "pip", "freeze", "--all", "--exclude-editable"],
                            check=True, capture_output=True, text=True).stdout
    lines = []
    for line in listed.splitlines():
        name, separator, version = line.partition("==")
        if separator and canonical(name) not in NOT_LOCKED:
            lines.append(f"{canonical(name)}=={release(version)}")
    return sorted(lines)


def refresh(source, lock_path=LOCK_PATH, *, torch_pin=None, log=print):
    """Resolve the grader at `source` (its pyproject.toml's ranges) with every extra in a
    scratch virtual environment, as setup.sh installs it but without the lock, and write what
    pip chose as the new lock. torch stays at the old lock's version unless `torch_pin`.
    Returns {name: (old version or None, new version or None)} of what changed."""
    old = read_lock(lock_path) if Path(lock_path).is_file() else {}
    torch_pin = torch_pin or old.get("torch")
    if not torch_pin:
        raise LockError("no torch version to keep: give one (--torch VERSION)")
    with tempfile.TemporaryDirectory(prefix="grader-lock-") as scratch:
        venv = Path(scratch) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        log(f"resolving torch=={torch_pin} and {source}[{','.join(EXTRAS)}] in a scratch environment...")
        subprocess.run([*pip, f"torch=={torch_pin}"], check=True)
        subprocess.run([*pip, f"{Path(source).resolve()}[{','.join(EXTRAS)}]"], check=True)
        subprocess.run([str(python), "-m", "pip", "check"], check=True)
        lines = freeze(python)
    python_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    text = HEADER.format(extras=", ".join(EXTRAS), python=python_version) + "\n".join(lines) + "\n"
    Path(lock_path).write_text(text)
    new = read_lock(lock_path)
    return {name: (old.get(name), new.get(name)) for name in sorted(old.keys() | new.keys())
            if old.get(name) != new.get(name)}


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(prog="python -m graders.lock", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("check", help="say whether this environment holds exactly the lock (exit 1 if not)")
    refreshing = commands.add_parser("refresh", help="write a new lock from pyproject.toml's ranges")
    refreshing.add_argument("--source", type=Path, default=Path(__file__).resolve().parents[1],
                            help="the grader's source folder (default: this checkout)")
    refreshing.add_argument("--torch", default=None, help="the torch release to lock (default: the lock's)")
    args = parser.parse_args(argv)
    if args.command == "check":
        found = differences()
        if not found:
            print(f"environment: exactly the lock ({len(read_lock())} distributions, {LOCK_PATH.name})")
            return 0
        print(f"environment: not the lock ({LOCK_PATH.name}): " + "; ".join(found))
        print("  `bash setup.sh` installs the lock; `bash scripts/upgrade-lock.sh` moves it on purpose")
        return 1
    if not (args.source / "pyproject.toml").is_file():
        parser.error(f"{args.source} holds no pyproject.toml")
    changed = refresh(args.source, torch_pin=args.torch)
    for name, (old, new) in changed.items():
        print(f"  {name}: {old or '(new)'} -> {new or '(gone)'}")
    print(f"wrote {LOCK_PATH} ({len(changed)} changed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
