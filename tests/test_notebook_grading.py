"""A notebook hand-in is graded from its definitions alone: the seed-004 student's notebook
(`!pip install`, top-level training that would hang and then exit, the definitions in their
own cells) gets the same attention and multi-head attention grades as the same code handed
in as a folder, and the notes say which cell each definition came from."""

import importlib
import sys
import time

import pytest

from graders.build import REPO_ROOT
from graders.grading import grade

# Grades or trains for long: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

NOTEBOOKS = REPO_ROOT / "fixtures" / "bert" / "notebooks"
NOTEBOOK = NOTEBOOKS / "seed004_student.ipynb"
FOLDER = REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student"
PARTS = ["attention", "mha"]


def _generator():
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        return importlib.import_module("make_notebook")
    finally:
        sys.path.remove(str(NOTEBOOKS))


def test_student_notebook_matches_its_generator(tmp_path):
    _generator().write_student_notebook(tmp_path / "fresh.ipynb")
    assert (tmp_path / "fresh.ipynb").read_text() == NOTEBOOK.read_text(), (
        "run `python fixtures/bert/notebooks/make_notebook.py` and commit seed004_student.ipynb")


def test_the_notebook_would_not_survive_being_run():
    text = NOTEBOOK.read_text()
    for line in ("!pip install transformers", "while True:", "sys.exit(", "for epoch in range("):
        assert line in text


@pytest.fixture(scope="module")
def graded():
    started = time.perf_counter()
    notebook = grade(NOTEBOOK, only_parts=PARTS)
    elapsed = time.perf_counter() - started
    folder = grade(FOLDER, only_parts=PARTS)
    return notebook, folder, elapsed


def _checks(results):
    return {c["id"]: c for part in results["parts"] for c in part["checks"]}


def test_notebook_is_graded_as_a_notebook(graded):
    notebook, _, elapsed = graded
    assert notebook["status"] == "graded"
    assert notebook["submission"]["kind"] == "notebook"
    assert elapsed < 300  # the training loop never ran (it would not end)


def test_same_scores_as_the_folder(graded):
    notebook, folder, _ = graded
    assert [(p["id"], p["score"], p["max_score"]) for p in notebook["parts"]] == \
           [(p["id"], p["score"], p["max_score"]) for p in folder["parts"]]
    assert notebook["score"] == folder["score"] < folder["max_score"]


def test_same_statuses_and_diagnoses_as_the_folder(graded):
    notebook, folder, _ = graded
    from_notebook, from_folder = _checks(notebook), _checks(folder)
    assert from_notebook.keys() == from_folder.keys()
    for check_id, expected in from_folder.items():
        got = from_notebook[check_id]
        assert got["status"] == expected["status"], check_id
        assert got["score"] == expected["score"], check_id
        assert got["diagnosis"] == expected["diagnosis"], check_id
    # The seed-004 student's known bugs are found in the notebook too.
    assert from_notebook["mha.padding"]["diagnosis"]["id"] == "mask_on_query_axis"
    assert from_notebook["mha.eval_deterministic"]["diagnosis"]["id"] == "dropout_in_eval"


def test_notes_say_which_cell_each_definition_came_from(graded):
    notes = graded[0]["submission"]["notes"]
    assert "scaled_dot_product: cell 6 -> attention.py" in notes
    assert "MultiHeadAttention: cell 7 -> attention.py" in notes
    assert "TransformerBlock: cell 11 -> encoder.py" in notes
    assert any(note.startswith("cell 2: IPython commands ignored: !pip install") for note in notes)
    training = [note for note in notes if note.startswith("cell 23: top-level code not run")]
    assert training and "loops" in training[0] and "sys.exit" in training[0]


# Written and numeric answers in markdown cells headed with the question's id (docs/submissions.md).
ANSWERS_NOTEBOOK_CELLS = [
    ("markdown", "# Homework"),
    ("code", "def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):\n    return q, k"),
    ("markdown", "## answers.layer_norm\nIt normalises each token's features."),
]
# The causal-LM homework's numeric answers, the same way
LM_ANSWERS_NOTEBOOK_CELLS = [
    ("code", "def generate_square_subsequent_mask(sz):\n    return None"),
    ("markdown", "## answers.lm_head_parameters\n10,050,201"),
    ("markdown", "## answers.base_parameters\n12"),
]


@pytest.fixture(scope="module")
def answers_graded(tmp_path_factory):
    from tests.test_notebook import write_notebook

    folder = tmp_path_factory.mktemp("answers")
    return grade(write_notebook(folder / "hw.ipynb", ANSWERS_NOTEBOOK_CELLS), only_parts=["answers"])


def test_notebook_answers_are_graded_like_answers_toml(answers_graded, tmp_path):
    from tests.course import CAUSAL_LM
    from tests.test_notebook import write_notebook

    checks = _checks(answers_graded)
    assert checks["answers.layer_norm"]["status"] == "pending_manual"
    assert checks["answers.layer_norm"]["details"]["answer"] == "It normalises each token's features."
    assert checks["answers.residual_connection"]["status"] == "failed"  # not answered: as in answers.toml
    assert answers_graded["submission"]["origin"]["answers"][0] == {"key": "layer_norm", "cell": 3}
    numeric = _checks(grade(write_notebook(tmp_path / "lm.ipynb", LM_ANSWERS_NOTEBOOK_CELLS), only_parts=["answers"],
                            assignment=CAUSAL_LM))
    assert numeric["answers.lm_head_parameters"]["status"] == "passed"
    assert numeric["answers.base_parameters"]["status"] == "failed"


def test_grade_merge_accepts_notebook_answers(answers_graded, tmp_path):
    import json

    from graders.batch import store
    from graders.batch.merge import merge_manual

    store.publish(tmp_path, "alice", answers_graded, {"key": "a"})
    manual = tmp_path / "manual.csv"
    manual.write_text("student_id,check_id,score,comment\nalice,answers.layer_norm,4,clear\n")
    report = merge_manual(manual, tmp_path)
    assert report.ok and report.applied == [("alice", "answers.layer_norm", 4.0)]
    merged = json.loads((tmp_path / "submissions" / "alice" / "results.json").read_text())
    assert _checks(merged)["answers.layer_norm"]["score"] == 4.0
    assert merged["score"] == pytest.approx(answers_graded["score"] + 4.0)


def test_a_module_the_notebook_does_not_define_is_not_called_missing(tmp_path):
    from tests.test_notebook import write_notebook

    results = grade(write_notebook(tmp_path / "hw.ipynb", ANSWERS_NOTEBOOK_CELLS), only_parts=["sentiment"])
    messages = {c["message"] for part in results["parts"] for c in part["checks"]}
    assert messages == {"the notebook 'hw.ipynb' defines none of sentiment.py's names "
                        "(BERTGRUSentiment, binary_accuracy, train, evaluate, ...)"}


def test_grade_merge_finds_the_homework_in_the_results(answers_graded, tmp_path, monkeypatch):
    """`grade merge` after `grade batch --assignment bert` needs no --assignment of its own."""
    from graders.batch import merge, store
    from graders.batch.cli import cmd_merge

    merged_for = []
    real = merge.merge_manual
    monkeypatch.setattr(merge, "merge_manual", lambda *args: merged_for.append(args[-1]) or real(*args))
    store.publish(tmp_path, "alice", answers_graded, {"key": "a"})
    manual = tmp_path / "manual.csv"
    manual.write_text("student_id,check_id,score,comment\nalice,answers.layer_norm,4,clear\n")
    assert cmd_merge([str(manual), "--out", str(tmp_path)]) == 0
    assert [assignment.name for assignment in merged_for] == ["bert"]

