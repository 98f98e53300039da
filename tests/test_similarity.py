"""`grade similarity`: shared work found through every disguise, shared answers not.

The corpus is fixtures/similarity/make_corpus.py's: hand-ins of the bert homework by seven
hands (three written for it, the seed-004 student's, three public pieces) and planted copies of
them, one disguise each, one of everything, one handed in as a notebook, one of a public
solution. It is published as a graded batch through the batch's own store; the report is made
by the command, as a TA runs it. The real intake and grading path is tested end to end in
test_similarity_graded_batch (slow).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from graders.assignment import load
from graders.cli import main
from graders.similarity.code import Course, read_hand_in
from graders.similarity.compare import STUDENT, HandIn, compare

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "fixtures" / "similarity"))
import make_corpus  # noqa: E402

WILD = REPO / "fixtures" / "wild" / "bert"


@pytest.fixture(scope="module")
def bert():
    return load("bert")


@pytest.fixture(scope="module")
def course(bert):
    return Course.of(bert)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, bert):
    return make_corpus.build_batch(tmp_path_factory.mktemp("corpus"), bert)


@pytest.fixture(scope="module")
def report(corpus):
    assert main(["similarity", str(corpus), "--corpus", str(WILD), "--reference"]) == 0
    folder = corpus / "similarity"
    return folder, json.loads((folder / "similarity.json").read_text())


def pair_scores(data: dict) -> dict[frozenset, float]:
    return {frozenset((p["a"], p["b"])): p["score"] for p in data["pairs"]}


def scored(course, hand_ins: dict[str, dict[str, str]], tmp_path: Path, **options):
    """{pair: score} of hand-ins given as {name: {module: text}}, read as the batch reads them."""
    read = []
    for name, files in hand_ins.items():
        folder = make_corpus.write_folder(files, tmp_path / name)
        read.append(HandIn(name, STUDENT, read_hand_in(folder, course)))
    comparison = compare(read, **options)
    return {frozenset((p.a, p.b)): p.score for p in comparison.pairs}, comparison


# --------------------------------------------------------------------------- the corpus, ranked

def test_the_corpus_read_as_folders_ranks_every_planted_pair_first(course, tmp_path):
    names = [*make_corpus.INDEPENDENT, *make_corpus.PLANTED]
    scores, _ = scored(course, {name: make_corpus.hand_in_files(name) for name in names}, tmp_path)
    planted = make_corpus.planted_pairs()
    assert min(scores[p] for p in planted) > max(s for p, s in scores.items() if p not in planted)


# The batch of the corpus is published through the store and the report made by the command:
# several seconds, so these tests are slow.
@pytest.mark.slow
def test_every_planted_pair_ranks_above_every_independent_pair(report, corpus):
    _, data = report
    scores = pair_scores(data)
    students = [h["id"] for h in data["hand_ins"] if h["kind"] == "student"]
    assert sorted(students) == sorted([*make_corpus.INDEPENDENT, *make_corpus.PLANTED])
    planted = make_corpus.planted_pairs()
    every_pair = {frozenset((a, b)) for a in students for b in students if a < b}
    lowest_planted = min(scores.get(pair, 0.0) for pair in planted)
    highest_independent = max(scores.get(pair, 0.0) for pair in every_pair - planted)
    assert lowest_planted > highest_independent
    assert lowest_planted >= 0.85 and highest_independent < 0.2, (lowest_planted, highest_independent)
    flagged = {frozenset((p["a"], p["b"])) for p in data["pairs"] if p["flagged"]}
    assert flagged == planted


@pytest.mark.slow
def test_the_histogram_counts_every_pair_and_marks_the_threshold(report):
    folder, data = report
    students = sum(1 for h in data["hand_ins"] if h["kind"] == "student")
    assert sum(data["histogram"]["counts"]) == data["histogram"]["pairs"] == students * (students - 1) // 2
    index = (folder / "index.html").read_text()
    assert 'class="threshold"' in index and "marked from 50%" in index


@pytest.mark.slow
def test_groups_of_three_or_more_are_the_families_of_copies(report):
    _, data = report
    groups = [sorted(c["members"]) for c in data["clusters"]]
    assert ["einsum", "einsum_renamed", "einsum_reordered"] in groups
    assert ["compact", "compact_defs", "compact_notebook"] in groups
    assert all(len(g) >= 3 for g in groups)


@pytest.mark.slow
def test_a_copy_of_a_public_solution_is_reported_against_its_corpus_entry(report):
    folder, data = report
    match = next(p for p in data["corpus_matches"] if p["a"] == "annotated_public" and p["b"] == "annotated_transformer")
    assert match["kind"] == "corpus" and match["modules"]["attention.py"]["a"]["share"] >= 0.9
    index = (folder / "index.html").read_text()
    share = round(match["modules"]["attention.py"]["a"]["share"] * 100)
    assert f"annotated_public</a> shares {share}% of attention.py with corpus entry annotated_transformer" in index
    reference = [p for p in data["corpus_matches"] if p["kind"] == "reference"]
    assert reference and all(p["b"] == "reference" for p in reference)


@pytest.mark.slow
def test_the_words_say_evidence_to_look_at_never_plagiarism(report):
    folder, _ = report
    pages = [folder / "index.html", *sorted((folder / "pairs").iterdir())]
    assert len(pages) > 10
    for page in [*pages, folder / "similarity.json", folder / "similarity.csv"]:
        text = page.read_text().lower()
        assert "plagiar" not in text and "cheat" not in text, page.name
    for page in pages:
        assert "evidence to look at" in page.read_text().lower(), page.name


@pytest.mark.slow
def test_the_csv_lists_the_pairs_of_the_json(report):
    folder, data = report
    rows = (folder / "similarity.csv").read_text().splitlines()
    assert rows[0].startswith("rank,kind,a,b,score,share_a,share_b")
    students = [r for r in rows[1:] if r.split(",")[1] == "students"]
    assert len(students) == len(data["pairs"])
    first = data["pairs"][0]
    assert students[0].startswith(f"1,students,{first['a']},{first['b']},{first['score']}")


# --------------------------------------------------------------------------- each disguise alone

HANDS = ("einsum", "loops", "compact")


@pytest.mark.parametrize("disguise", sorted(make_corpus.DISGUISES))
def test_each_disguise_leaves_the_copy_found(disguise, course, tmp_path):
    hand_ins = {name: make_corpus.hand_in_files(name) for name in HANDS}
    transform = make_corpus.DISGUISES[disguise]
    copy = {module: transform(text) if module in make_corpus.MODULES else text
            for module, text in make_corpus.hand_in_files("einsum").items()}
    assert copy != hand_ins["einsum"]
    scores, _ = scored(course, {**hand_ins, "copy": copy}, tmp_path)
    assert scores[frozenset(("einsum", "copy"))] >= 0.9, scores
    assert max(scores[frozenset(("copy", other))] for other in ("loops", "compact")) < 0.2


def test_a_reorder_that_changes_what_is_computed_is_not_taken_for_the_same_code(course, tmp_path):
    """Control of the canonical order: statements that depend on each other keep their order."""
    original = "def f(x):\n    y = x * 2\n    z = y + 1\n    w = z * z - y\n    return torch.tanh(w) * torch.sigmoid(z + y)\n"
    dependent = "def f(x):\n    z = y + 1\n    y = x * 2\n    w = z * z - y\n    return torch.tanh(w) * torch.sigmoid(z + y)\n"
    independent = "def f(x):\n    y = x * 2\n    w = x + 1\n    z = y + 1\n    return torch.tanh(w) * torch.sigmoid(z + y)\n"
    swapped = "def f(x):\n    w = x + 1\n    y = x * 2\n    z = y + 1\n    return torch.tanh(w) * torch.sigmoid(z + y)\n"

    def stream(text, tmp):
        files = {m: (make_corpus.TEMPLATE / m).read_text() for m in make_corpus.MODULES}
        files["bert.py"] = "import torch\n" + text + "\nmask_inputs = f\n"
        folder = make_corpus.write_folder(files, tmp)
        return next(s.tokens for s in read_hand_in(folder, course).streams if s.name == "f")

    assert stream(independent, tmp_path / "a") == stream(swapped, tmp_path / "b")
    assert stream(original, tmp_path / "c") != stream(dependent, tmp_path / "d")


# --------------------------------------------------------------------------- only what the student wrote counts

def test_the_template_handed_in_unchanged_counts_for_nothing():
    for pack in ("bert", "gpt", "causal_lm"):
        assignment = load(pack)
        code = read_hand_in(assignment.template_dir, Course.of(assignment))
        assert code.streams and all(s.tokens == () for s in code.streams), pack
        assert HandIn("template", STUDENT, code).fingerprints == {}


def test_template_code_is_never_counted_in_a_hand_in(course, bert, tmp_path):
    """Two hand-ins that agree only on what the template gave score nothing; the template's lines
    (signatures, _reset_parameters, super().__init__) are marked given, and no fingerprint covers them."""
    first = make_corpus.hand_in_files("einsum")
    second = {m: (make_corpus.TEMPLATE / m).read_text() for m in make_corpus.MODULES}  # the template, and
    second["bert.py"] = second["bert.py"] + "\n\n" + _own_function(random.Random(1))  # a function of its own
    scores, comparison = scored(course, {"first": first, "second": second}, tmp_path)
    assert scores[frozenset(("first", "second"))] == 0.0
    hand_in = comparison.by_id()["first"]
    reset = next(s for s in hand_in.streams if s.name == "MultiHeadAttention._reset_parameters")
    text = first["attention.py"].splitlines()
    given = {n for n, line in enumerate(text, 1) if "xavier_uniform_" in line or "bias.data.fill_" in line
             or "super().__init__()" in line or line.strip().startswith("def __init__(self, embed_dim, n_heads")}
    assert len(given) == 6 and given <= set().union(*(s.template_lines for s in hand_in.streams))
    assert len(reset.tokens) < 12
    covered = {line for s in hand_in.streams if s.module == "attention.py" for line in s.lines}
    assert not covered & given


def test_code_common_to_much_of_the_class_is_discounted_with_the_threshold_shown(course, tmp_path):
    """Twelve hands write the same short softmax(QK^T/sqrt(d))V independently and differ everywhere
    else: the shared five lines are the class's common code, and no pair is marked. With the
    threshold raised above the class (the control), the same five lines are a third or more of
    every pair's code."""
    convergent = ("def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):\n"
                  "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))\n"
                  "    if mask is not None:\n"
                  "        scores = scores.masked_fill(mask[:, None, None, :].bool(), float('-inf'))\n"
                  "    weights = F.dropout(F.softmax(scores, dim=-1), attn_drop_rate)\n"
                  "    return weights @ v, weights\n")
    rng = random.Random(7)
    hand_ins = {}
    for index in range(12):
        files = {m: (make_corpus.TEMPLATE / m).read_text() for m in make_corpus.MODULES}
        files["attention.py"] = "import math\nimport torch\nimport torch.nn.functional as F\n\n" + convergent
        files["bert.py"] = "import torch\nimport torch.nn.functional as F\n\n" + _own_function(rng)
        hand_ins[f"student{index:02d}"] = files
    scores, comparison = scored(course, hand_ins, tmp_path)
    assert comparison.common == 6 and comparison.discounted > 0
    assert max(scores.values()) < 0.2
    raised, _ = scored(course, hand_ins, tmp_path / "control", common=12)
    assert min(raised.values()) > 0.3


def _own_function(rng: random.Random) -> str:
    """A pretrain_step of random arithmetic: as long as the softmax above, and a hand's own."""
    lines = ["def pretrain_step(model, optimizer, text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15):",
             "    h0 = text.float()"]
    calls = ("torch.tanh", "torch.sigmoid", "torch.relu", "torch.exp", "torch.abs", "torch.sqrt", "torch.log1p")
    for step in range(1, 7):
        op = rng.choice(("+", "-", "*", "/"))
        lines.append(f"    h{step} = {rng.choice(calls)}(h{step - 1} {op} {rng.randint(2, 99)}) {op} h{rng.randrange(step)}.mean(dim={rng.randint(0, 1)})")
    lines.append("    return h6.sum().item()")
    return "\n".join(lines) + "\n"


def test_a_notebook_and_a_folder_of_the_same_code_are_read_as_one(bert, course, tmp_path):
    from graders.similarity.handins import _read

    files = make_corpus.hand_in_files("einsum")
    folder = make_corpus.write_hand_in("as_folder", files, "folder", tmp_path)
    notebook = make_corpus.write_hand_in("as_notebook", files, "notebook", tmp_path)
    read = [_read("as_folder", STUDENT, folder, bert, course), _read("as_notebook", STUDENT, notebook, bert, course)]
    assert read[0].source_kind == "folder" and read[1].source_kind == "notebook"
    assert read[0].fingerprints.keys() == read[1].fingerprints.keys() and read[0].fingerprints
    assert compare(read).pairs[0].score == 1.0
    assert read[1].notebook == "as_notebook.ipynb" and any(any(c) for c in read[1].cells.values())


@pytest.mark.slow  # three hand-ins published through the store, then the command
def test_a_notebook_and_a_folder_of_the_same_code_are_scored_as_one(bert, tmp_path):
    files = make_corpus.hand_in_files("einsum")
    submissions = tmp_path / "submissions"
    folder = make_corpus.write_hand_in("as_folder", files, "folder", submissions)
    notebook = make_corpus.write_hand_in("as_notebook", files, "notebook", submissions)
    other = make_corpus.write_hand_in("other", make_corpus.hand_in_files("loops"), "zip", submissions)
    batch = tmp_path / "batch"
    for student_id, entry in (("as_folder", folder), ("as_notebook", notebook), ("other", other)):
        make_corpus.publish_graded(batch, student_id, entry, bert)
    # the common threshold above the class of three: code both share with `other` counts too
    assert main(["similarity", str(batch), "--common", "3"]) == 0
    data = json.loads((batch / "similarity" / "similarity.json").read_text())
    same = next(p for p in data["pairs"] if {p["a"], p["b"]} == {"as_folder", "as_notebook"})
    assert same["score"] == same["share_a"] == same["share_b"] == 1.0
    assert all(sides["a"]["share"] == 1.0 for sides in same["modules"].values() if sides["a"]["own"])
    assert {h["id"]: h["handed_in_as"] for h in data["hand_ins"]} == {"as_folder": "folder", "as_notebook": "notebook",
                                                                      "other": "zip"}
    longest = same["longest_fragment"]["b"]
    assert longest["notebook"] == "as_notebook.ipynb" and longest["cells"]
    page = (batch / "similarity" / same["page"]).read_text()
    assert f"as_notebook.ipynb cell {longest['cells'][0]}" in page


def test_hostile_modules_are_left_out_with_a_note_and_the_rest_is_compared(course, tmp_path):
    files = make_corpus.hand_in_files("einsum")
    files["bert.py"] = "x = " + "(" * 5000 + "1" + ")" * 5000 + "\n"  # too deep for the parser
    files["encoder.py"] = "def f(x):\n" + "".join(f"    x{i} = x + {i}\n" for i in range(60_000))  # over 1 MiB
    files["sentiment.py"] = "def train(model, iterator, optimizer, criterion):\n" + "".join(
        "    " * (depth + 1) + f"if model.step{depth}(iterator):\n" for depth in range(90)) + "    " * 91 + "return model\n"
    code = read_hand_in(make_corpus.write_folder(files, tmp_path / "hostile"), course)
    assert "bert.py cannot be parsed: not compared" in code.notes
    assert "encoder.py is over 1024 KiB: not compared" in code.notes
    assert {s.module for s in code.streams} >= {"attention.py", "sentiment.py"}
    assert HandIn("hostile", STUDENT, code).fingerprints


# --------------------------------------------------------------------------- reading the batch

@pytest.mark.slow  # published through the store, then the command
def test_a_hand_in_changed_after_grading_is_not_compared_and_says_why(bert, tmp_path, capsys):
    submissions = tmp_path / "submissions"
    entries = {name: make_corpus.write_hand_in(name, make_corpus.hand_in_files(name), "folder", submissions)
               for name in ("einsum", "loops", "compact")}
    batch = tmp_path / "batch"
    for name, entry in entries.items():
        make_corpus.publish_graded(batch, name, entry, bert)
    (entries["loops"] / "attention.py").write_text("# handed in again after the deadline\n")
    assert main(["similarity", str(batch)]) == 0
    data = json.loads((batch / "similarity" / "similarity.json").read_text())
    assert [h["id"] for h in data["hand_ins"]] == ["compact", "einsum"]
    assert data["not_compared"] == [{"id": "loops", "kind": "student",
                                     "reason": "its input loops changed after it was graded: grade the batch again to "
                                               "compare it"}]
    assert "1 not compared" in capsys.readouterr().out


@pytest.mark.slow  # a batch published through the store, then read twice
def test_hand_ins_read_by_several_processes_are_the_ones_read_by_one(bert, course, tmp_path, monkeypatch):
    from graders.similarity import handins

    submissions = tmp_path / "submissions"
    batch = tmp_path / "batch"
    for name in ("einsum", "loops", "compact", "einsum_renamed", "compact_notebook"):
        kind = make_corpus.PLANTED.get(name, (None, None, "folder"))[2]
        make_corpus.publish_graded(batch, name, make_corpus.write_hand_in(name, make_corpus.hand_in_files(name), kind,
                                                                          submissions), bert)
    alone, _ = handins.read_batch(batch, bert, course)
    monkeypatch.setattr(handins, "PARALLEL_FROM", 2)
    monkeypatch.setattr(handins.os, "sched_getaffinity", lambda pid: {0, 1})
    shared, _ = handins.read_batch(batch, bert, course)
    assert [h.id for h in shared] == [h.id for h in alone] == sorted(h.id for h in alone)
    assert [h.fingerprints for h in shared] == [h.fingerprints for h in alone]
    assert [h.cells for h in shared] == [h.cells for h in alone] and shared[1].cells


@pytest.mark.parametrize("arguments, message", [
    (["nowhere"], "holds no batch results"),
    (["BATCH", "--corpus", "nowhere"], "is not a folder"),
    (["BATCH", "--flag-at", "0"], "--flag-at is a percentage"),
    (["BATCH", "--common", "0"], "--common must be 1 or more"),
    (["BATCH", "--out", "papers"], "exists and is not a similarity report"),
])
def test_bad_usage_is_one_line_and_exit_status_2(arguments, message, tmp_path, capsys):
    batch = tmp_path / "batch"
    (batch / "submissions").mkdir(parents=True)  # each mistake is found before anything is read
    (tmp_path / "papers").mkdir()
    (tmp_path / "papers" / "thesis.tex").write_text("nothing may replace this")
    argv = [str(batch) if a == "BATCH" else str(tmp_path / a) if a in ("nowhere", "papers") else a for a in arguments]
    assert main(["similarity", *argv]) == 2
    assert (tmp_path / "papers" / "thesis.tex").read_text() == "nothing may replace this"
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("grade similarity: ")


@pytest.mark.slow  # grade batch's start: the grader's imports
def test_grade_batch_points_to_the_similarity_report(tmp_path, capsys):
    from graders.batch.cli import cmd_batch

    (tmp_path / "submissions").mkdir()
    out = tmp_path / "gradebook"
    assert cmd_batch([str(tmp_path / "submissions"), "--out", str(out), "--no-progress", "--unsafe-no-sandbox"], "bert") == 0
    assert f"grade similarity {out}" in capsys.readouterr().out


# --------------------------------------------------------------------------- staff only, and the same every time

@pytest.mark.slow
def test_nothing_of_it_reaches_students_gradescope_or_the_bundle(report, corpus, bert):
    from graders.bundle import bundle_files

    assert not [name for name in bundle_files(bert) if "/graders/similarity/" in name]
    for folder in (corpus / "submissions").iterdir():
        for name in ("feedback.html", "gradescope.json", "report.html"):
            assert "similarity" not in (folder / name).read_text().lower(), (folder.name, name)


@pytest.mark.slow
def test_the_same_batch_gives_the_same_report_byte_for_byte(report, corpus, tmp_path):
    """Once more in another process, under another string hash seed (sets of names iterate in
    another order there): every file the same bytes."""
    folder, _ = report
    again = tmp_path / "again"
    run = subprocess.run([sys.executable, "-m", "graders.cli", "similarity", str(corpus), "--corpus", str(WILD),
                          "--reference", "--out", str(again)], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, timeout=300)
    assert run.returncode == 0, run.stderr
    first = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    second = {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()}
    assert first.keys() == second.keys() and len(first) > 10
    assert [name for name in first if first[name] != second[name]] == []
