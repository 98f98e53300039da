"""The fine-tuning part end to end through the sandbox, in smoke mode (no GPU, no IMDB): the
reference trains, beats chance and is marked provisional; a broken training loop is caught."""

import shutil

import pytest

from tests.course import HOMEWORK, REFERENCE_DIR
from graders.grading import grade


def _finetune_part(folder, **options):
    results = grade(folder, only_parts=["finetune"], options=options, assignment=HOMEWORK)
    (part,) = results["parts"]
    return part


class Notes:
    """What `grade` prints on stderr while a check runs: here, kept."""

    def __init__(self):
        self.lines = []

    def __call__(self, chk):
        pass

    def note(self, text):
        self.lines.append(text)


@pytest.mark.slow
def test_reference_passes_smoke_mode_provisionally_and_each_epoch_is_shown():
    notes = Notes()
    results = grade(REFERENCE_DIR, only_parts=["finetune"], progress=notes, assignment=HOMEWORK)
    (part,) = results["parts"]
    (check,) = part["checks"]
    assert check["status"] == "passed", check["message"]
    assert part["provisional"] and "IMDB" in part["note"]
    curve = check["details"]["training_curve"]
    assert len(curve["valid_acc"]) == len(curve["epoch"]) >= 2 and max(curve["valid_acc"]) >= 0.7
    assert [line.split(":")[0] for line in notes.lines] == [f"fine-tuning epoch {n}" for n in curve["epoch"]]
    assert f"validation accuracy {curve['valid_acc'][-1]:.1%}" in notes.lines[-1]
    assert "test accuracy" in check["message"]


@pytest.mark.slow
def test_each_stage_of_the_check_is_timed_in_results():
    """Issues 35 and 45: where the check's time goes, in results.json: preparation (who prepared
    the data and, when this grade built them, the encoder's load and the features), the
    frozen-encoder probe, the worker's start, the training as a whole and each epoch with its
    predictions; and the grade's own stages beside its parts."""
    results = grade(REFERENCE_DIR, only_parts=["finetune"], assignment=HOMEWORK)
    (part,) = results["parts"]
    (check,) = part["checks"]
    timings = check["details"]["timings"]
    assert {"preparation_s", "probe_s", "start_s", "training_s", "epochs"} <= timings.keys()
    if timings["prepared_by"] == "this grade":
        assert {"encoder_load_s", "features_s"} <= timings.keys()
    else:
        assert timings["prepared_by"] == "an earlier grade of this process" and timings["preparation_s"] < 1
    assert [epoch["epoch"] for epoch in timings["epochs"]] == check["details"]["training_curve"]["epoch"]
    for epoch in timings["epochs"]:
        assert 0 <= epoch["predict_seconds"] <= epoch["seconds"] and epoch["request_seconds"] >= epoch["seconds"] - 0.5
    assert sum(epoch["request_seconds"] for epoch in timings["epochs"]) <= timings["training_s"]
    assert all(timings[key] >= 0 for key in ("preparation_s", "probe_s", "start_s"))
    stages = results["timings"]
    assert (stages["setup_s"] + stages["worker_start_s"] + stages["checks"]["finetune.accuracy"] + stages["close_s"]
            <= stages["total_s"] + 0.01), stages


@pytest.mark.parametrize("bug, diagnosis", [
    (("        optimizer.step()\n", "        pass\n"), "train_no_step"),
    (("    model.train()\n    for batch in iterator:", "    for batch in iterator:"), "train_no_train_mode"),
])
@pytest.mark.slow
def test_a_broken_training_loop_is_caught(bug, diagnosis, tmp_path):
    folder = tmp_path / "submission"
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    source = (folder / "sentiment.py").read_text()
    assert source.count(bug[0]) == 1
    (folder / "sentiment.py").write_text(source.replace(*bug))
    # The harness sees these mistakes in the first epoch: a short budget is enough.
    part = _finetune_part(folder, time_budget_s=10)
    (check,) = part["checks"]
    assert part["provisional"], "smoke mode is provisional whatever the outcome"
    named = check["diagnosis"]["id"] if check["diagnosis"] else None
    seen = check["details"].get("observed_mistakes", [])
    assert diagnosis == named or diagnosis in seen, check


@pytest.mark.slow
@pytest.mark.parametrize("break_it", ["raises", "missing"])
def test_smoke_mode_is_provisional_whatever_the_students_code_does(break_it, tmp_path):
    """The part's points stay out of the total however the check ends: a model that cannot be
    built, or no sentiment.py at all, does not put 8 more points in the denominator than a
    working submission has."""
    folder = tmp_path / "submission"
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    if break_it == "missing":
        (folder / "sentiment.py").unlink()
    else:
        source = (folder / "sentiment.py").read_text()
        (folder / "sentiment.py").write_text(source.replace("class BERTGRUSentiment(nn.Module):",
                                                            "class BERTGRUSentiment:", 1))
    results = grade(folder, only_parts=["finetune", "attention"], assignment=HOMEWORK)
    (part,) = [part for part in results["parts"] if part["id"] == "finetune"]
    assert part["checks"][0]["status"] != "passed" and part["provisional"] and "IMDB" in part["note"]
    assert results["max_score"] == sum(p["max_score"] for p in results["parts"] if p["id"] != "finetune")
    assert results["provisional"]["parts"] == ["finetune"]
