"""What a container-isolation worker's own root costs (graders/sandbox/rootfs.py): the tree of
what a worker may see (graders/sandbox/exposure.py: this machine's system folders, this
interpreter's installation and the distributions on its path), made from nothing (once per
machine), then brought up to date with nothing changed (once per grading process), then after
one folder changed. Needs root (device nodes, owners); the trees go to a scratch folder.

    sudo .venv/bin/python benchmarks/bench_own_root.py [--repeat 3]

Prints each figure and the number of entries, for docs/sandbox.md.
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from graders.sandbox import isolation, rootfs


def timed(sources, hidden, parent) -> float:
    rootfs._brought_up_to_date.clear()  # as a new grading process would
    started = time.perf_counter()
    rootfs.prepared_root(sources, hidden, parent)
    return time.perf_counter() - started


def entries(tree: Path) -> int:
    return sum(len(files) + len(folders) for _, folders, files in os.walk(tree))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_own_root: run as root (the tree holds device nodes and others' files)")
    sources, hidden = isolation.own_root_sources()
    made, current, one_changed, held = [], [], [], 0
    scratch = Path(tempfile.mkdtemp(prefix="bench-own-root-"))
    try:
        scratch.chmod(0o711)
        marker_folder = Path(tempfile.mkdtemp(prefix="bench-own-root-source-"))
        sources = [*sources, str(marker_folder)]
        for _ in range(args.repeat):
            parent = scratch / f"run-{len(made)}"
            parent.mkdir(mode=0o711)
            made.append(timed(sources, hidden, parent))
            current.append(timed(sources, hidden, parent))
            (marker_folder / f"changed-{len(made)}").write_text("a folder changed\n")
            one_changed.append(timed(sources, hidden, parent))
            held = entries(next(parent.glob("root-*/")))
            shutil.rmtree(parent)
        shutil.rmtree(marker_folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{len(sources) - 1} sources (the allow-list): {', '.join(sources[:-1][:12])}, ... ({held:,} entries in the tree)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for name, figures in (("made from nothing", made), ("up to date, nothing changed", current),
                          ("up to date, one folder changed", one_changed)):
        print(f"{name}: median {statistics.median(figures):.2f} s ({', '.join(f'{f:.2f}' for f in figures)})")


if __name__ == "__main__":
    main()
