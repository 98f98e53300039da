"""Generic faults through the real checks: every graded function and nn.Module of every pack,
its output broken in a way no diagnosis catalogues, must lose points with failures that name a
mistake or say where the code differs (graders/checks/localise.py), never a bare "differs".

The fault is appended to the reference's module file: a wrapper that scales, transposes or
shifts the float tensors a function or a forward returns. The checks run in-process (tests/checks_inprocess.py)."""

import shutil

import pytest

from tests.checks_inprocess import run_part
from tests.course import BERT, CAUSAL_LM, GPT
from tests.test_wild_corpus import lost, says_where

# Grades or trains for long: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

FAULT = '''

def _faulty(value):
    import torch
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim() >= 2:
        return {fault}
    if isinstance(value, tuple):
        return tuple(_faulty(v) for v in value)
    return value
'''

SCALE, TRANSPOSE, SHIFT = "value * 1.5", "value.transpose(-1, -2)", "value.roll(1, dims=1)"

# (pack, file, name, part, fault): a function, or a class whose forward is wrapped
TARGETS = [
    (BERT, "attention.py", "scaled_dot_product", "attention", SCALE),
    (BERT, "attention.py", "MultiHeadAttention", "mha", SCALE),
    (BERT, "attention.py", "MultiHeadAttention", "mha", SHIFT),
    (BERT, "encoder.py", "PositionalEncoding", "positional_encoding", SCALE),
    (BERT, "encoder.py", "TransformerBlock", "block", SHIFT),
    (CAUSAL_LM, "causal_lm.py", "generate_square_subsequent_mask", "causal_lm", TRANSPOSE),
    (CAUSAL_LM, "causal_lm.py", "TransformerModel", "causal_lm", SCALE),
    (CAUSAL_LM, "causal_lm.py", "LMHead", "causal_lm", SCALE),
    (GPT, "gpt.py", "GPT", "gpt", SHIFT),
]


def _broken(tmp_path, pack, file, name, fault):
    folder = tmp_path / "submission"
    shutil.copytree(pack.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    module = folder / file
    wrap = (f"\n_original_{name} = {name}.forward\n{name}.forward = lambda self, *a, **k: _faulty(_original_{name}(self, *a, **k))\n"
            if name[0].isupper() else
            f"\n_original_{name} = {name}\n\n\ndef {name}(*args, **kwargs):\n    return _faulty(_original_{name}(*args, **kwargs))\n")
    module.write_text(module.read_text() + FAULT.format(fault=fault) + wrap)
    return folder


@pytest.mark.parametrize("pack, file, name, part, fault", TARGETS, ids=[f"{t[2]}-{t[4]}" for t in TARGETS])
def test_a_generic_fault_loses_points_and_every_failure_says_where(tmp_path, pack, file, name, part, fault):
    results = run_part(_broken(tmp_path, pack, file, name, fault), part, pack=pack, max_examples=3)
    failures = lost(results)
    assert failures, f"{name} returning {fault} keeps full marks in part {part}"
    silent = {cid: (results[cid].message or "")[:200] for cid in failures if not says_where(results[cid])}
    assert not silent, f"{name} returning {fault}: failures that neither name a mistake nor say where: {silent}"
