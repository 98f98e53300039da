"""Charged once in the minGPT homework: a mistake of GPT.forward costs the checks of the clause it
breaks, never generate's (which run the student's generate with the grader's stand-in forward,
graders/packs/gpt/tasks.py) nor the checks of the logits where only the return value is wrong; and
generate's own mistakes are still charged, and named, whatever forward does."""

import shutil

import pytest

from graders.mutants import Edit, apply_edits, collect
from tests.checks_inprocess import run_part
from tests.course import GPT

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

MUTANTS, _ = collect(GPT)
BY_ID = {m.id: m for m in MUTANTS}
FORWARD_CHECKS = {"gpt.forward_matches_reference", "gpt.padding_not_in_loss", "gpt.heads", "gpt.dropout", "gpt.causal",
                  "gpt.classifier_last_position"}
GENERATE_CHECKS = {"gpt.greedy_follows_argmax", "gpt.greedy_deterministic", "gpt.generate_crops_context", "gpt.top_k",
                   "gpt.temperature_distribution", "gpt.temperature_small_is_greedy", "gpt.temperature_large_spreads"}

LOGITS_ALONE = BY_ID["gpt_forward_returns_logits_only"].edits
# generate written against that forward: it reads the logits as the student's forward returns them
READS_LOGITS_ALONE = (Edit("gpt.py", "logits, _ = self(context)", "logits = self(context)"),)
FORWARD_TODO = (Edit("gpt.py", "        B, T = idx.size()\n        assert T <= self.block_size",
                     "        raise NotImplementedError('GPT.forward is not implemented yet')\n"
                     "        B, T = idx.size()\n        assert T <= self.block_size"),)


def _lost(tmp_path, edits, max_examples=3):
    folder = tmp_path / "submission"
    shutil.copytree(GPT.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, edits)
    results = run_part(folder, "gpt", max_examples=max_examples, pack=GPT)
    return {cid: (r.status, r.diagnosis, r.message or "") for cid, r in results.items() if r.status in ("failed", "error")}


@pytest.mark.parametrize(("edits", "checks"), [
    # the return value is wrong, the logits right: the pair is charged where it is judged
    (LOGITS_ALONE, {"gpt.forward_matches_reference", "gpt.padding_not_in_loss"}),
    (LOGITS_ALONE + READS_LOGITS_ALONE, {"gpt.forward_matches_reference", "gpt.padding_not_in_loss"}),
    # forward never written: every check of forward, none of generate's
    (FORWARD_TODO, FORWARD_CHECKS),
    # wrong logits: forward's differential, and no check that judges forward on its own logits
    (BY_ID["gpt_forward_no_position_embedding"].edits, {"gpt.forward_matches_reference"}),
], ids=["logits alone", "logits alone, read so by generate", "forward a TODO", "no position embedding"])
def test_a_mistake_of_forward_costs_nothing_in_generate(edits, checks, tmp_path):
    lost = _lost(tmp_path, edits)
    assert set(lost) == checks, lost


@pytest.mark.parametrize(("dependency", "own", "diagnosis"), [
    (LOGITS_ALONE, "gpt_generate_no_feedback", "generate_no_feedback"),
    (FORWARD_TODO, "gpt_crop_decided_by_the_prompt", "generate_no_crop"),
    (FORWARD_TODO, "gpt_top_k_keeps_only_best", "top_k_only_best"),
    (LOGITS_ALONE + READS_LOGITS_ALONE, "gpt_temperature_multiplied", "temperature_multiplied"),
], ids=["no feedback", "crop from the prompt", "top-k only best", "temperature multiplied"])
def test_generates_own_mistake_is_still_charged(dependency, own, diagnosis, tmp_path):
    lost = _lost(tmp_path, dependency + BY_ID[own].edits, max_examples=10)
    assert diagnosis in {d for cid, (_, d, _) in lost.items() if cid in GENERATE_CHECKS}, lost
