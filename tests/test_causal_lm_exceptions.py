"""The causal-LM checks explain an exception whose cause the input shows (graders/packs/causal_lm/checks/
causal_lm.py, `explain_model_error`, `explain_head_error`, `explain_pe_error`): a failure naming the mistake,
the call with its input and the student's line; any other exception stays the student's error. The
mutants that raise (tests/test_mutation.py) run them through the checks; these pin each pattern on its own,
on copies of the reference with one mistake, run in process (tests/checks_inprocess.py)."""

import importlib
import shutil

import pytest
import torch

from graders.checks.framework import CheckFailed, Context
from graders.mutants import Edit, apply_edits
from graders.oracles import ReferenceOracle
from graders.sandbox import StudentError
from tests.checks_inprocess import InProcessStudent
from tests.course import CAUSAL_LM

CAUSAL_LM.registry()  # imports the pack's checks
CHECKS = importlib.import_module(f"{CAUSAL_LM.package}.checks.causal_lm")
LM = "causal_lm.py"
CONFIG = (12, 8, 2, 16, 1)


def _context(tmp_path, *edits):
    folder = tmp_path / "submission"
    shutil.copytree(CAUSAL_LM.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, edits)
    return Context(InProcessStudent(folder), ReferenceOracle(CAUSAL_LM), 0)


def _model_error(ctx, ids):
    handle = CHECKS._model(ctx, CONFIG)
    with pytest.raises(StudentError) as raised:
        ctx.student.call(handle, "__call__", ids)
    return handle, raised.value


def test_a_table_sliced_by_the_batch_size(tmp_path):
    ctx = _context(tmp_path, Edit(LM, "x = x + self.pe[:, : x.size(1)]", "x = x + self.pe[:, : x.size(0)]"))
    ids = torch.randint(0, CONFIG[0], (3, 5), generator=torch.Generator().manual_seed(0))
    handle, error = _model_error(ctx, ids)
    explained = CHECKS.explain_model_error(ctx, handle, CONFIG, ids, error)
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "pe_sliced_by_batch"
    assert "ids of shape (3, 5)" in str(explained) and "x.size(0)" in str(explained)
    assert "causal_lm.py line" in str(explained)


def test_a_causal_mask_sized_by_the_batch(tmp_path):
    ctx = _context(tmp_path, Edit(LM, "generate_square_subsequent_mask(src.size(1))", "generate_square_subsequent_mask(src.size(0))"))
    ids = torch.randint(0, CONFIG[0], (3, 5), generator=torch.Generator().manual_seed(0))
    handle, error = _model_error(ctx, ids)
    explained = CHECKS.explain_model_error(ctx, handle, CONFIG, ids, error)
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "causal_mask_wrong_size"


def test_an_embedding_with_its_sizes_swapped(tmp_path):
    ctx = _context(tmp_path, Edit(LM, "nn.Embedding(ntoken, d_model)", "nn.Embedding(d_model, ntoken)"))
    ids = torch.tensor([[1, 11, 3]])  # 11 >= d_model: the lookup itself fails
    handle, error = _model_error(ctx, ids)
    explained = CHECKS.explain_model_error(ctx, handle, CONFIG, ids, error)
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "layer_sizes_swapped"
    assert "8 rows of 12 features" in str(explained)


def test_a_head_linear_with_its_sizes_swapped(tmp_path):
    ctx = _context(tmp_path, Edit(LM, "self.decoder = nn.Linear(d_model, ntoken)", "self.decoder = nn.Linear(ntoken, d_model)"))
    head = ctx.student.construct("causal_lm", "LMHead", 4, 7)
    hidden = torch.randn(2, 3, 4)
    with pytest.raises(StudentError) as raised:
        ctx.student.call(head, "__call__", hidden)
    explained = CHECKS.explain_head_error(ctx, head, raised.value, hidden, 7, "LMHead(4, 7)")
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "layer_sizes_swapped"
    assert "takes 7 features in" in str(explained) and "nn.Linear(4, 7)" in str(explained)


def test_other_exceptions_stay_the_students(tmp_path):
    ctx = _context(tmp_path, Edit(LM, "x = self.pos_encoder(x)", 'raise ValueError("boom")'))
    ids = torch.randint(0, CONFIG[0], (3, 5), generator=torch.Generator().manual_seed(0))
    handle, error = _model_error(ctx, ids)
    assert CHECKS.explain_model_error(ctx, handle, CONFIG, ids, error) is error
    head = ctx.student.construct("causal_lm", "LMHead", 4, 7)
    assert CHECKS.explain_head_error(ctx, head, error, torch.randn(2, 3, 4), 7, "LMHead(4, 7)") is error


def test_sizes_a_shape_mismatch_puts_against_each_other():
    assert CHECKS._sizes_met("The size of tensor a (5) must match the size of tensor b (3) at non-singleton dimension 1") == {3, 5}
    assert CHECKS._sizes_met("The shape of the 2D attn_mask is torch.Size([3, 3]), but should be (5, 5).") == {3, 5}
    assert CHECKS._sizes_met("boom") is None


def test_a_table_sliced_by_the_batch_size_broadcast_over_one_position(tmp_path):
    # x (B, 1, d) + pe[:, :B] broadcasts to (B, B, d): the encoder, not the encoding, raises
    ctx = _context(tmp_path, Edit(LM, "x = x + self.pe[:, : x.size(1)]", "x = x + self.pe[:, : x.size(0)]"))
    ids = torch.tensor([[1], [2]])
    handle, error = _model_error(ctx, ids)
    explained = CHECKS.explain_model_error(ctx, handle, CONFIG, ids, error)
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "pe_sliced_by_batch"
    assert "returns shape (2, 2, 8) for x of shape (2, 1, 8)" in str(explained)


def test_a_float64_table_the_encoder_refuses(tmp_path):
    ctx = _context(tmp_path, Edit(LM, "pe = torch.zeros(1, max_len, embed_dim)",
                                  "pe = torch.zeros(1, max_len, embed_dim, dtype=torch.float64)"))
    ids = torch.randint(0, CONFIG[0], (3, 5), generator=torch.Generator().manual_seed(0))
    handle, error = _model_error(ctx, ids)
    explained = CHECKS.explain_model_error(ctx, handle, CONFIG, ids, error)
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "pe_table_float64"
    assert "returns float64 for float32 input" in str(explained)


def _second_call(ctx, first, second):
    """A model of the differential's example called on `first` then on `second` ids: the error of the
    second call, explained as the differential explains it (or None)."""
    config = CHECKS.LMConfig(*CONFIG)
    ex = CHECKS.ModelInput(config, 0.1, "eval", ((first, None), (second, None)), 0)
    handle = CHECKS._built_model(ctx, ex)
    ctx.student.call(handle, "__call__", first)
    with pytest.raises(StudentError) as raised:
        ctx.student.call(handle, "__call__", second)
    return CHECKS._kept_from_first_call(ctx, ex, second, None, raised.value)


def test_a_causal_mask_kept_from_the_first_call(tmp_path):
    ctx = _context(tmp_path,
                   Edit(LM, "        self.d_model = d_model\n", "        self.d_model = d_model\n        self.causal_mask = None\n"),
                   Edit(LM, "src_mask = generate_square_subsequent_mask(src.size(1)).to(src.device)",
                        "if self.causal_mask is None:\n                self.causal_mask = generate_square_subsequent_mask("
                        "src.size(1))\n            src_mask = self.causal_mask"))
    explained = _second_call(ctx, torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2, 3, 4, 5]]))
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "lm_instance_keeps_state"
    assert "then on ids of shape (1, 5)" in str(explained) and "a new model runs the second input" in str(explained)


def test_an_error_a_new_model_raises_too_is_not_kept_state(tmp_path):
    ctx = _context(tmp_path, Edit(LM, "x = x + self.pe[:, : x.size(1)]", "x = x + self.pe[:, : x.size(0)]"))
    assert _second_call(ctx, torch.tensor([[1, 2, 3]]), torch.tensor([[1, 2], [3, 4], [5, 6]])) is None


def _src_mask_error(ctx, ids):
    handle = CHECKS._model(ctx, CONFIG)
    T = ids.size(1)
    with pytest.raises(StudentError) as raised:
        ctx.student.call(handle, "__call__", ids, CHECKS._causal_mask(T))
    return CHECKS.explain_src_mask_error(ctx, handle, CONFIG, ids, CHECKS._causal_mask(T), raised.value)


def test_a_second_argument_taken_for_a_flag(tmp_path):
    ctx = _context(tmp_path, Edit(LM, "if src_mask is None:", "if not src_mask:"))
    explained = _src_mask_error(ctx, torch.randint(0, CONFIG[0], (3, 5), generator=torch.Generator().manual_seed(0)))
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "src_mask_not_a_mask"


def test_a_sequence_first_encoder_given_a_mask_is_not_said_to_ignore_it(tmp_path):
    # it raises on (B, T) ids with a (T, T) mask and runs without one, as a flag would; but on a
    # square batch the mask works: the layout is the mistake, not the argument
    ctx = _context(tmp_path, Edit(LM, "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True)",
                                  "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout)"))
    explained = _src_mask_error(ctx, torch.randint(0, CONFIG[0], (3, 5), generator=torch.Generator().manual_seed(0)))
    assert getattr(explained, "diagnosis", None) != "src_mask_not_a_mask"
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "not_batch_first"


def test_a_sequence_first_encoder_is_named_by_the_mask_it_asks_for(tmp_path):
    # with a head of its own (the PyTorch tutorial's), the square-batch probe of the hidden states
    # cannot run: the (B, B) mask the encoder asks for names the layout
    ctx = _context(tmp_path, Edit(LM, "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True)",
                                  "layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout)"),
                   Edit(LM, "        return self.transformer_encoder(x, mask=src_mask)",
                        "        return self.transformer_encoder(x, mask=src_mask)[..., :2]"))
    explained = _src_mask_error(ctx, torch.randint(0, CONFIG[0], (3, 5), generator=torch.Generator().manual_seed(0)))
    assert isinstance(explained, CheckFailed) and explained.diagnosis == "not_batch_first"
    assert "asks for a (3, 3) mask" in str(explained)
