"""Charged once, claimed only when true, in the BERT homework: a mistake in one graded function costs
nothing in the checks of another function of the same module that calls it (tests/test_mutation.py
covers parts of other modules), a function's own mistake is still charged with the other one wrong
too, and a failure claims only what the function's behaviour shows (a parameter count does not fail
for dropout, a missing step is claimed only where a step was due). Also: a parameter count's
failure names the sub-module that differs, with and without the reference's shapes, and the
student's exceptions say which call, on which input, at which line."""

import ast
import shutil
from pathlib import Path

import pytest

from graders.checks.framework import Context, check_seed, run_check
from graders.mutants import Edit, apply_edits, collect
from graders.oracles import OracleUnavailable, ReferenceOracle
from tests.checks_inprocess import InProcessStudent, run_part
from tests.course import BERT

# Minutes of grading in all: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

MUTANTS, _ = collect(BERT)
BY_ID = {m.id: m for m in MUTANTS}

# The checks that grade each function (or class) of the reference: a part, or the checks of a part
# that grade one of its two functions.
STEP_CHECKS = {"pretraining.step_updates_parameters", "pretraining.loss_on_selected_tokens",
               "pretraining.step_passes_padding_mask", "pretraining.first_loss"}
GRADED_BY = {
    "scaled_dot_product": ("attention", None),
    "MultiHeadAttention": ("mha", None),
    "PositionalEncoding": ("positional_encoding", None),
    "TransformerBlock": ("block", None),
    "BertModel": ("bert", None),
    "mask_inputs": ("pretraining", {c.id for c in BERT.registry()["pretraining"]} - STEP_CHECKS),
    "pretrain_step": ("pretraining", STEP_CHECKS),
}


def _definitions(file):
    """{top-level function or class: (first line, last line, its source)} of a reference module."""
    text = (Path(BERT.reference_dir) / file).read_text()
    lines = text.splitlines()
    return {node.name: (node.lineno, node.end_lineno, "\n".join(lines[node.lineno - 1:node.end_lineno]))
            for node in ast.parse(text).body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}


def edited_definition(mutant):
    """The one graded definition all of the mutant's edits lie in, with its module's file; None otherwise."""
    found = set()
    for edit in mutant.edits:
        text = (Path(BERT.reference_dir) / edit.file).read_text()
        line = text[:text.index(edit.find)].count("\n") + 1
        found |= {(edit.file, name) for name, (first, last, _) in _definitions(edit.file).items() if first <= line <= last}
    return found.pop() if len(found) == 1 and next(iter(found))[1] in GRADED_BY else None


def callers(mutant):
    """Graded definitions of the same module whose code calls the mutated one."""
    file, name = edited_definition(mutant)
    return sorted(other for other, (_, _, source) in _definitions(file).items()
                  if other != name and other in GRADED_BY and name in source)


CHARGED_ONCE = [m for m in MUTANTS if edited_definition(m) and callers(m)]


def _grade(tmp_path, edits, part, only=None, max_examples=3):
    folder = tmp_path / "submission"
    if not folder.exists():
        shutil.copytree(BERT.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
        apply_edits(folder, edits)
    return run_part(folder, part, max_examples=max_examples, only=only, pack=BERT)


def _lost(results):
    return {cid: (r.status, r.diagnosis, r.message or "") for cid, r in results.items() if r.status in ("failed", "error")}


def test_the_mutants_reach_every_caller():
    """The mutants that exercise this file: sdp's reach multi-head attention, mask_inputs' the step."""
    reached = {caller for m in CHARGED_ONCE for caller in callers(m)}
    assert {"MultiHeadAttention", "pretrain_step"} <= reached
    assert {"sdp_scaled_by_d_k", "mlm_always_mask", "sdp_mask_read_as_square", "sdp_no_dropout"} <= {m.id for m in CHARGED_ONCE}


@pytest.mark.parametrize("mutant", CHARGED_ONCE, ids=lambda m: m.id)
def test_a_mistake_is_not_charged_to_its_caller(mutant, tmp_path):
    charged = {}
    for caller in callers(mutant):
        part, only = GRADED_BY[caller]
        charged.update(_lost(_grade(tmp_path, mutant.edits, part, only)))
    assert not charged, f"{mutant.id} is charged again in {sorted(charged)}: {charged}"


@pytest.mark.parametrize(("dependency", "own", "checks", "diagnosis"), [
    ("sdp_scaled_by_d_k", "mha_no_output_projection", None, "output_projection_missing"),
    ("sdp_scaled_by_d_k", "mha_heads_not_transposed", None, None),
    ("sdp_not_scaled", "mha_mask_on_queries", None, None),
    ("sdp_scaled_by_d_k", "mha_dropout_in_eval", None, "dropout_in_eval"),
    ("mlm_always_mask", "pretrain_no_step", STEP_CHECKS, "pretrain_no_step"),
    ("mlm_always_mask", "pretrain_no_zero_grad", STEP_CHECKS, "zero_grad_missing"),
    ("mlm_always_mask", "pretrain_loss_summed", STEP_CHECKS, "pretrain_loss_not_averaged"),
])
def test_a_callers_own_mistake_is_still_charged(dependency, own, checks, diagnosis, tmp_path):
    """Graded on the student's own dependency, a caller's mistake still shows (and is named)."""
    mutant = BY_ID[own]
    lost = _lost(_grade(tmp_path, BY_ID[dependency].edits + mutant.edits, mutant.part, checks, max_examples=10))
    assert lost, f"{own} with {dependency} lost nothing in {mutant.part}"
    if diagnosis:
        assert diagnosis in {d for _, d, _ in lost.values()}, lost


def test_no_step_is_claimed_missing_where_none_is_due(tmp_path):
    """<mask> at every selected token: the step is right, so no check claims a missing step or
    backward, nor only_mask in pretrain_step."""
    lost = _lost(_grade(tmp_path, BY_ID["mlm_always_mask"].edits, "pretraining", max_examples=10))
    assert lost and set(lost) <= GRADED_BY["mask_inputs"][1], lost
    claims = {d for _, d, _ in lost.values()}
    assert "mlm_always_mask" in claims
    assert not claims & {"pretrain_no_step", "pretrain_no_backward", "pretrain_only_mask"}, lost


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.diagnosis == "dropout_in_eval" and m.part == "mha"],
                         ids=lambda m: m.id)
def test_dropout_in_eval_is_claimed_only_where_it_shows(mutant, tmp_path):
    """No gate, and not the parameter count, fails a module for dropout left on in eval mode: every
    check it loses names it."""
    lost = _lost(_grade(tmp_path, mutant.edits, "mha", max_examples=10))
    assert "mha.eval_deterministic" in lost
    assert "mha.parameter_count" not in lost
    assert {d for _, d, _ in lost.values()} == {"dropout_in_eval"}, lost


class _NoShapes(ReferenceOracle):
    """A golden oracle without the reference's shapes recorded."""

    def call(self, name, *args, **kwargs):
        if name == "state_shapes":
            raise OracleUnavailable(name)
        return super().call(name, *args, **kwargs)


@pytest.mark.parametrize("oracle", [ReferenceOracle, _NoShapes], ids=["with the shapes", "without them"])
def test_a_parameter_count_names_the_sub_module(oracle, tmp_path):
    folder = tmp_path / "submission"
    shutil.copytree(BERT.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, BY_ID["mha_qkv_without_bias"].edits)
    chk = next(c for c in BERT.registry()["mha"] if c.id == "mha.parameter_count")
    seed = check_seed(0, chk.id)
    result = run_check(chk, Context(InProcessStudent(folder), oracle(BERT), seed, max_examples=10))
    assert result.status == "failed" and result.diagnosis == "wrong_parameter_count_mha"
    assert "parameters in its state_dict, expected" in result.message
    if oracle is ReferenceOracle:
        assert "qkv_proj.bias: 0 in yours" in result.message and "missing qkv_proj.bias" in result.message
    else:
        assert "in yours" not in result.message


@pytest.mark.parametrize(("edit", "part", "said"), [
    (Edit("attention.py", "d_k = q.size(-1)", "d_k = q.size(4)"), "attention",
     ["scaled_dot_product(q of shape", "attention.py line", "d_k = q.size(4)"]),
    (Edit("attention.py", "q, k, v = self.qkv_proj(embedding).split(E, dim=-1)",
          "q, k, v = self.qkv_proj(embedding).split(E, dim=1)"), "mha",
     ["MultiHeadAttention(embed_dim=", "x of shape", "attention.py line"]),
    (Edit("encoder.py", "self.norm2 = nn.LayerNorm(embed_dim)", "self.norm2 = nn.LayerNorm(embed_dim + 1)"), "block",
     ["TransformerBlock(embed_dim=", "x of shape", "encoder.py line"]),
])
def test_an_exception_says_the_call_its_input_and_the_line(edit, part, said, tmp_path):
    lost = _lost(_grade(tmp_path, (edit,), part))
    assert lost, f"{edit} raised nowhere in {part}"
    for _, _, message in lost.values():
        assert all(text in message for text in said), message


@pytest.mark.parametrize(("mutant", "checks"), [
    # labels of 0 (or -1) outside the selection: the selection, split and replacements are read from
    # what the function changed and labelled, so only the labels check is lost
    ("mlm_labels_zero", {"pretraining.labels"}),
    ("mlm_labels_minus_one", {"pretraining.labels"}),
    ("mlm_labels_everywhere", {"pretraining.labels"}),
    ("mlm_random_up_to_mask_id", {"pretraining.random_tokens"}),
    ("mlm_always_mask", {"pretraining.split"}),
    ("block_ffn_no_dropout", {"block.dropout"}),
    ("block_norms_swapped", {"block.wiring"}),
    ("bert_one_block", {"bert.layers"}),
    ("bert_block_repeated", {"bert.layers"}),
])
def test_one_behaviour_costs_the_checks_that_state_it(mutant, checks, tmp_path):
    """Charged once: a mistake is lost where the contract states it, and the other checks of its
    part judge the submission on its own consistent output."""
    edited = BY_ID[mutant]
    lost = _lost(_grade(tmp_path, edited.edits, edited.part, max_examples=10))
    assert set(lost) == checks, lost
    assert {d for _, d, _ in lost.values()} == {edited.diagnosis}, lost


def test_an_exception_in_the_students_attention_is_not_blamed_on_the_stand_in(tmp_path):
    """A block that runs an attention of its own (here a MultiHeadAttention it builds in forward,
    with heads of no features) raises in attention.py although its self_attn is the grader's
    stand-in: the message says so instead of claiming the stand-in ran."""
    edit = Edit("encoder.py", "attended = self.self_attn(embedding, mask=mask)",
                "attended = MultiHeadAttention(self.embed_dim, self.embed_dim + 1, 0.0)(embedding, mask=mask)")
    lost = _lost(_grade(tmp_path, (edit,), "block", {"block.wiring", "block.padding"}))
    assert lost, "the block's own attention raised nowhere"
    for _, _, message in lost.values():
        assert "attention.py" in message and "its self_attn the grader's stand-in" not in message, message
