"""The minGPT checks explain an exception whose cause the input shows (graders/packs/gpt/checks/gpt.py,
`explain_error`): a failure naming the mistake, the call with its input and the student's line; any
other exception stays the student's error. The mutants that raise (tests/test_mutation.py) cover the
causes a realistic mistake reaches on the checks' inputs; these cover the rest of the patterns."""

import importlib

import torch

from graders.checks.framework import CheckFailed
from graders.sandbox import StudentError
from tests.course import GPT

GPT.registry()  # imports the pack's checks
CHECKS = importlib.import_module(f"{GPT.package}.checks.gpt")

CONFIG = {"vocab_size": 12, "block_size": 8, "n_layer": 1, "n_head": 2, "n_embd": 8, "n_classification_class": 2,
          "weights_seed": 0}
TRACEBACK = ('Traceback (most recent call last):\n  File "gpt.py", line 171, in generate\n'
             '    kth_best = torch.topk(logits, top_k, dim=1).values[:, [-1]]\n')


class _Student:
    def call(self, *args, **kwargs):
        """Plain sampling (no top_k) runs: only a sampler given logits raises there."""


class _Context:
    student = _Student()


def _explain(message, *, exc_type="RuntimeError", **kwargs):
    ctx, handle = _Context(), object()
    CHECKS._remember(ctx, handle, CONFIG)
    error = StudentError(exc_type, message, TRACEBACK)
    idx = torch.tensor([[1, 2, 3]])
    return error, CHECKS.explain_error(ctx, handle, error, idx, "generate", max_new_tokens=1, **kwargs)


def test_topk_out_of_range_names_the_call_the_input_and_the_line():
    _, explained = _explain("selected index 4 out of range", do_sample=True, top_k=4)
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "top_k_out_of_range"
    assert "idx of shape (1, 3)" in str(explained) and "top_k=4" in str(explained)
    assert "gpt.py line 171" in str(explained) and "torch.topk(logits, top_k, dim=1)" in str(explained)


def test_no_token_left_at_top_k_one():
    _, explained = _explain("probability tensor contains either `inf`, `nan` or element < 0", do_sample=True, top_k=1)
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "top_k_drops_kth"


def test_the_mask_of_block_size_against_a_shorter_sequence():
    _, explained = _explain("The size of tensor a (8) must match the size of tensor b (3) at non-singleton dimension 3")
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "attention_mask_not_cropped"


def test_sampling_from_logits_raises_without_top_k_too():
    class Raising:
        def call(self, *args, **kwargs):
            raise StudentError("RuntimeError", "probability tensor contains either `inf`, `nan` or element < 0", TRACEBACK)

    ctx, handle = _Context(), object()
    ctx.student = Raising()
    CHECKS._remember(ctx, handle, CONFIG)
    error = StudentError("RuntimeError", "probability tensor contains either `inf`, `nan` or element < 0", TRACEBACK)
    explained = CHECKS.explain_error(ctx, handle, error, torch.tensor([[1, 2, 3]]), "generate", max_new_tokens=1,
                                     do_sample=True, top_k=1)
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "sample_from_logits"


def test_a_loss_over_unflattened_logits():
    _, explained = _explain("Expected target size [1, 12], got [1, 3]")
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "loss_class_dim"
    _, explained = _explain("Expected target size (1, 12), got torch.Size([1, 3])")
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "loss_class_dim"


def test_a_next_token_without_its_column():
    _, explained = _explain("Tensors must have same number of dimensions: got 2 and 1")
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "generate_next_token_shape"


def test_other_exceptions_stay_the_students():
    for message, kwargs in [("boom", {}), ("selected index 4 out of range", {}),  # no top_k: not generate's top-k
                            ("The size of tensor a (9) must match the size of tensor b (3) at non-singleton dimension 3", {})]:
        error, explained = _explain(message, **kwargs)
        assert explained is error


def test_a_model_the_check_did_not_build_is_left_alone():
    error = StudentError("RuntimeError", "selected index 4 out of range", TRACEBACK)
    assert CHECKS.explain_error(_Context(), object(), error, torch.tensor([[1]]), "generate", top_k=4) is error
