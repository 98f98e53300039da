"""One student against the others in a batch: `grade batch --jobs 2` with a submission that
holds every process slot it can, snoops for the other students' folders and files, and writes
where it finds them, next to honest submissions graded at the same time. The honest ones must
be graded exactly as on their own; nothing of theirs may be read or changed."""

import csv
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from graders.batch.cli import cmd_batch

from test_isolation_layers import FULL, SPAWN_MANY

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not FULL, reason="needs bubblewrap and root")]

REPO = Path(__file__).resolve().parent.parent
HONEST = REPO / "fixtures" / "bert" / "submissions" / "seed004_student"
PARTS = ["attention"]

# At import: hold every process slot of its uid, then look through everything it can see for
# other students' code and results, and try to overwrite what it finds; each call then waits, so
# that it is still running while the neighbours' workers start.
GREEDY_SNOOP = SPAWN_MANY + """
    import os, time
    held = hold_every_slot(1000)
    found = []
    for top in ("/tmp", "/proc", "/work", "/root", "/home", "/srv"):
        for folder, subfolders, files in os.walk(top):
            if folder.count(os.sep) >= 6:
                subfolders[:] = []
            for name in files:
                if name in ("attention.py", "results.json", "gradebook.csv") and "honest" in folder:
                    found.append(os.path.join(folder, name))
    for path in found:
        try:
            with open(path, "a") as handle:
                handle.write("# sabotaged")
        except OSError:
            pass
    print("held", held, "found", found)

    _real = scaled_dot_product

    def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):
        time.sleep(0.1)
        return _real(q, k, v, attn_drop_rate, mask)
"""


# The honest submission graded on its own, by grade() in a process of its own: it runs beside the
# batch, whose greedy student spends most of its time asleep.
ALONE = r"""
import json, sys
from graders.assignment import load
from graders.grading import grade
print(json.dumps(grade(sys.argv[1], only_parts=json.loads(sys.argv[2]), assignment=load("bert"))["score"]))
"""


def test_a_greedy_snooping_student_harms_no_neighbour(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    for name in ("honest_a", "honest_b"):
        shutil.copytree(HONEST, course / name)
    greedy = course / "greedy"
    shutil.copytree(HONEST, greedy)
    with (greedy / "attention.py").open("a") as handle:
        handle.write(textwrap.dedent(GREEDY_SNOOP))
    before = {path: path.read_bytes() for path in course.rglob("*.py") if "honest" in str(path)}

    alone = subprocess.Popen([sys.executable, "-c", ALONE, str(HONEST), json.dumps(PARTS)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        out = tmp_path / "out"
        status = cmd_batch([str(course), "--out", str(out), "--jobs", "2", "--parts", *PARTS,
                            "--timeout", "10", "--no-progress"], "bert")
        printed, errors = alone.communicate(timeout=600)
    finally:
        if alone.poll() is None:
            alone.kill()
            alone.wait()
    assert alone.returncode == 0, errors[-3000:]
    honest_alone = json.loads(printed.splitlines()[-1])
    assert status == 0
    with (out / "gradebook.csv").open() as handle:
        book = {row["student_id"]: row for row in csv.DictReader(handle)}
    for name in ("honest_a", "honest_b"):
        assert book[name]["status"] == "graded", book[name]
        assert float(book[name]["total"]) == pytest.approx(honest_alone, abs=0.005), book[name]
        assert "sabotaged" not in (out / "submissions" / name / "results.json").read_text()
    assert float(book["greedy"]["total"]) <= round(honest_alone, 2)
    assert {path: path.read_bytes() for path in before} == before
