"""The argument space of the causal-LM homework's contract (graders/checks/space.py): for every
callable a student writes, the check that compares it with the reference by value and the
situations of its docstring the checks must produce. `grade coverage --assignment causal_lm` proves them."""

import torch

from graders.checks.space import EVAL, TRAINING, Contract, Situation, first_tensor, size, tensor


def _modes():
    return (Situation("in training mode", lambda c: c.mode == TRAINING),
            Situation("in eval mode", lambda c: c.mode == EVAL))


def _shapes():
    return (Situation("a batch of one", lambda c: size(first_tensor(c), 0) == 1),
            Situation("a sequence of one position", lambda c: size(first_tensor(c), 1) == 1))


CONTRACTS = [
    Contract("causal_lm.generate_square_subsequent_mask", "causal_lm.square_mask", (
        Situation("size 1", lambda c: c["sz"] == 1),
        Situation("a size above 4", lambda c: c["sz"] > 4),
    )),
    Contract("causal_lm.PositionalEncoding", "causal_lm.positional_table", (
        Situation("an odd embed_dim", lambda c: c["embed_dim"] % 2 == 1 and c["embed_dim"] > 1),
        Situation("a max_len other than 5000", lambda c: c["max_len"] != 5000),
        Situation("dropout 0", lambda c: c["dropout"] == 0),
        Situation("a nonzero dropout other than 0.1", lambda c: c["dropout"] not in (0, 0.1)),
    )),
    Contract("causal_lm.PositionalEncoding.forward", "causal_lm.positional_table", (
        *_shapes(), *_modes(),
        Situation("float64 input", lambda c: tensor(c["x"]) is not None and c["x"].dtype == torch.float64),
        Situation("a sequence as long as max_len", lambda c: c.built is not None
                  and size(c["x"], 1) == c.built["max_len"]),
    ), several_shapes=True),
    Contract("causal_lm.TransformerModel", "causal_lm.forward_wiring", (
        Situation("one layer", lambda c: c["nlayers"] == 1),
        Situation("several layers", lambda c: c["nlayers"] >= 2),
        Situation("several heads", lambda c: c["nhead"] >= 2),
        Situation("d_hid other than d_model", lambda c: c["d_hid"] != c["d_model"]),
        Situation("dropout 0", lambda c: c["dropout"] == 0),
    )),
    Contract("causal_lm.TransformerModel.forward", "causal_lm.forward_wiring", (
        *_shapes(), *_modes(),
        Situation("no src_mask (the causal one)", lambda c: c["src_mask"] is None),
        Situation("a src_mask of the caller's", lambda c: tensor(c["src_mask"]) is not None),
    ), several_shapes=True),
    Contract("causal_lm.LMHead", "causal_lm.lm_head", (
        Situation("an odd d_model", lambda c: c["d_model"] % 2 == 1),
    )),
    Contract("causal_lm.LMHead.forward", "causal_lm.lm_head", (*_shapes(),), several_shapes=True),
    Contract("causal_lm.ClassificationHead", "causal_lm.classification_head", (
        Situation("more than two classes", lambda c: c["n_classes"] > 2),
    )),
    Contract("causal_lm.ClassificationHead.forward", "causal_lm.classification_head", (*_shapes(),),
             several_shapes=True),
    Contract("causal_lm.count_parameters", "causal_lm.count_parameters"),
    Contract("causal_lm.closed_form_parameter_count", "causal_lm.closed_form", (
        Situation("one layer", lambda c: c["nlayers"] == 1),
        Situation("several layers", lambda c: c["nlayers"] >= 2),
        Situation("more than two classes", lambda c: c["n_classes"] > 2),
    )),
]

GIVEN = {}
