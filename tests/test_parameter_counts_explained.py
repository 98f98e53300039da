"""A failed parameter count says which sub-module differs (graders/checks/weights.py `count_difference`),
against the reference's shapes asked of the oracle on every draw: in causal_lm.model_parameters,
causal_lm.lm_head and gpt.heads; and causal_lm.count_parameters says what a wrong count added up.
Where the golden answers hold no shapes (a shrunk input in a self-check), the message goes without."""

import importlib
import shutil

from graders.checks.framework import Context, check_seed, run_check
from graders.mutants import Edit, apply_edits
from graders.oracles import OracleUnavailable, ReferenceOracle
from tests.checks_inprocess import InProcessStudent
from tests.course import CAUSAL_LM, GPT

CAUSAL_LM.registry()  # imports the pack's checks
CHECKS = importlib.import_module(f"{CAUSAL_LM.package}.checks.causal_lm")


class _NoShapes(ReferenceOracle):
    """The reference oracle without the shapes, as golden answers without a record of them."""

    def call(self, name, *args, **kwargs):
        if name in ("parameter_shapes", "gpt_state_shapes"):
            raise OracleUnavailable(name)
        return super().call(name, *args, **kwargs)


def _grade(tmp_path, pack, check_id, edits, oracle=ReferenceOracle):
    folder = tmp_path / "submission"
    folder.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(pack.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, edits)
    chk = next(c for checks in pack.registry().values() for c in checks if c.id == check_id)
    seed = check_seed(0, check_id)
    return run_check(chk, Context(InProcessStudent(folder), oracle(pack), seed, max_examples=5))


LAYER = "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True)"
KEPT = (Edit("causal_lm.py", LAYER + "\n", LAYER.replace("layer = ", "self.layer = ") + "\n        layer = self.layer\n"),)


def test_an_extra_layer_is_named(tmp_path):
    result = _grade(tmp_path, CAUSAL_LM, "causal_lm.model_parameters", KEPT)
    assert result.status == "failed" and result.diagnosis == "extra_layer_copy"
    assert "by sub-module: layer: " in result.message and "0 expected (extra layer.self_attn.in_proj_weight" in result.message


def test_without_the_shapes_the_count_is_still_said(tmp_path):
    result = _grade(tmp_path, CAUSAL_LM, "causal_lm.model_parameters", KEPT, oracle=_NoShapes)
    assert result.status == "failed" and result.diagnosis == "extra_layer_copy"
    assert "by sub-module" not in result.message


def test_other_names_are_listed_on_each_side(tmp_path):
    # the word-language-model naming and a head without bias: the counts differ, the names too
    edits = (Edit("causal_lm.py", "self.decoder = nn.Linear(d_model, ntoken)", "self.out = nn.Linear(d_model, ntoken, bias=False)"),
             Edit("causal_lm.py", "return self.decoder(hidden)", "return self.out(hidden)"))
    result = _grade(tmp_path, CAUSAL_LM, "causal_lm.lm_head", edits)
    assert result.status == "failed" and result.diagnosis == "parameter_count_off"
    assert "out: " in result.message and "decoder: 0 in yours" in result.message


def test_a_lm_head_bias_is_named(tmp_path):
    edits = (Edit("gpt.py", "self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)",
                  "self.lm_head = nn.Linear(config.n_embd, config.vocab_size)"),)
    result = _grade(tmp_path, GPT, "gpt.heads", edits)
    assert result.status == "failed" and "lm_head.bias: 11 in yours, 0 expected (extra lm_head.bias (11,))" in result.message
    assert "by sub-module" not in _grade(tmp_path / "golden", GPT, "gpt.heads", edits, oracle=_NoShapes).message


def test_a_wrong_count_says_what_it_added_up(tmp_path):
    edits = (Edit("causal_lm.py", "return sum(p.numel() for p in module.parameters() if p.requires_grad)",
                  "return sum(t.numel() for t in module.state_dict().values())"),)
    result = _grade(tmp_path, CAUSAL_LM, "causal_lm.count_parameters", edits)
    assert result.status == "failed" and result.diagnosis == "count_from_state_dict"
    assert "on 2 modules it counted the elements of the whole state_dict, frozen parameters and buffers" in result.message


class _NoSecondProbe:
    """A context whose worker builds no second probe module: the counts given are all there is."""

    class student:
        @staticmethod
        def task(*args):
            raise CHECKS.StudentError("RuntimeError", "no worker here", "")


def test_a_mistake_is_named_only_when_it_alone_gives_every_count():
    # Sequential(Linear(4, 3), Linear(3, 2)), layer 0 frozen, a buffer of 100: 15 + 8 + 100
    def named(got):
        return CHECKS._count_mistake(_NoSecondProbe, [(CHECKS._probe_counts((4, 3, 2), 1), got)], (4, 3, 2), 1)

    diagnosis, said = named(15 + 8 + 100)
    assert diagnosis == "count_from_state_dict" and "(123 where 8 is right)" in said
    assert named(15 + 8)[0] == "count_includes_frozen"
    assert named(0)[0] == "count_state_dict_requires_grad"
    diagnosis, said = named(8 + 100)  # the buffer, not the frozen layer: no mistake of the list gives it
    assert diagnosis is None and said == " (counts seen: 108 where 8 is right)"


def test_the_probe_counts_are_the_references_for_every_frozen_and_tied_probe():
    """What count_parameters is held to on the probe (the oracle's count of the module the task builds)
    and the readings its mistakes are named by, for every probe the check draws."""
    from torch import nn

    probe_module = importlib.import_module(f"{CAUSAL_LM.package}.tasks").probe_module
    oracle = ReferenceOracle(CAUSAL_LM)
    for sizes in ((4, 3, 2), (1, 5, 7)):
        for frozen in (0, 1, 2):
            for tied in (False, True):
                module = probe_module(list(sizes), frozen, tied)
                counts = CHECKS._probe_counts(sizes, frozen, tied)
                params = list(module.parameters())
                assert counts["right"] == oracle.call("probe_count", list(sizes), frozen, tied) == sum(
                    p.numel() for p in params if p.requires_grad)
                assert counts["frozen"] == sum(p.numel() for p in params)
                assert counts["state"] == sum(t.numel() for t in module.state_dict().values())
                assert counts["tensors"] == len([p for p in params if p.requires_grad])
                assert counts["all_tensors"] == len(params)
                assert len(module) == 2 + tied and all(isinstance(layer, nn.Linear) for layer in module)
                assert not tied or module[2].weight is module[0].weight
