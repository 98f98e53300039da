"""The argument space of the causal-LM homework's contract (graders/checks/space.py): for every
callable a student writes, the check that compares it with the reference by value and the
situations of its docstring the checks must produce. `grade coverage --assignment causal_lm` proves
them; docs/checks.md lists them with the decisions taken where a docstring was silent."""

import torch

from graders.checks.space import EVAL, TRAINING, Contract, Situation, first_tensor, size, tensor


def _modes():
    return (Situation("in training mode", lambda c: c.mode == TRAINING),
            Situation("in eval mode", lambda c: c.mode == EVAL))


def _shapes():
    return (Situation("a batch of one", lambda c: size(first_tensor(c), 0) == 1),
            Situation("a sequence of one position", lambda c: size(first_tensor(c), 1) == 1),
            Situation("a batch as large as the sequence is long (B == T)",
                      lambda c: (size(first_tensor(c), 0) or 0) > 1 and size(first_tensor(c), 0) == size(first_tensor(c), 1)))


def _mask(call):
    return tensor(call["src_mask"])


def _causal(mask):
    T = mask.size(0)
    return torch.equal(mask, torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")))


CONTRACTS = [
    Contract("causal_lm.generate_square_subsequent_mask", "causal_lm.square_mask", (
        Situation("size 1", lambda c: c["sz"] == 1),
        Situation("a size above 4", lambda c: c["sz"] > 4),
    )),
    Contract("causal_lm.PositionalEncoding", "causal_lm.positional_table", (
        Situation("an odd embed_dim", lambda c: c["embed_dim"] % 2 == 1 and c["embed_dim"] > 1),
        Situation("embed_dim 1", lambda c: c["embed_dim"] == 1),
        Situation("a max_len other than 5000", lambda c: c["max_len"] != 5000),
        Situation("a max_len above 5000", lambda c: c["max_len"] > 5000),
        Situation("dropout 0", lambda c: c["dropout"] == 0),
        Situation("a nonzero dropout other than 0.1", lambda c: c["dropout"] not in (0, 0.1)),
        Situation("dropout 1", lambda c: c["dropout"] == 1),
    )),
    Contract("causal_lm.PositionalEncoding.forward", "causal_lm.positional_table", (
        *_shapes(), *_modes(),
        Situation("float64 input", lambda c: tensor(c["x"]) is not None and c["x"].dtype == torch.float64),
        Situation("float32 input", lambda c: tensor(c["x"]) is not None and c["x"].dtype == torch.float32),
        Situation("a sequence as long as max_len", lambda c: c.built is not None
                  and size(c["x"], 1) == c.built["max_len"]),
        Situation("a sequence of more than 5000 positions", lambda c: (size(c["x"], 1) or 0) > 5000),
        Situation("in training mode at a rate strictly between 0 and 1", lambda c: c.mode == TRAINING
                  and c.built is not None and 0 < c.built["dropout"] < 1),
    ), several_shapes=True),
    Contract("causal_lm.TransformerModel", "causal_lm.model_matches_reference", (
        Situation("one layer", lambda c: c["nlayers"] == 1),
        Situation("several layers", lambda c: c["nlayers"] >= 2),
        Situation("three layers", lambda c: c["nlayers"] >= 3),
        Situation("one head", lambda c: c["nhead"] == 1),
        Situation("several heads", lambda c: c["nhead"] >= 2),
        Situation("an odd d_model", lambda c: c["d_model"] % 2 == 1),
        Situation("d_hid other than d_model", lambda c: c["d_hid"] != c["d_model"]),
        Situation("dropout 0", lambda c: c["dropout"] == 0),
        Situation("dropout 1", lambda c: c["dropout"] == 1),
        Situation("its default dropout 0.5", lambda c: c["dropout"] == 0.5),
    )),
    Contract("causal_lm.TransformerModel.forward", "causal_lm.model_matches_reference", (
        *_shapes(), *_modes(),
        Situation("in training mode at dropout 0", lambda c: c.mode == TRAINING and c.built is not None
                  and c.built["dropout"] == 0),
        Situation("in eval mode at a nonzero dropout", lambda c: c.mode == EVAL and c.built is not None
                  and c.built["dropout"] > 0),
        Situation("several layers", lambda c: c.built is not None and c.built["nlayers"] >= 2),
        Situation("no src_mask (the causal one)", lambda c: c["src_mask"] is None),
        Situation("the causal src_mask given", lambda c: _mask(c) is not None and _causal(_mask(c))),
        Situation("a src_mask blocking other positions than the causal one", lambda c: _mask(c) is not None
                  and bool(torch.isinf(_mask(c)).any()) and not _causal(_mask(c))),
        Situation("an open src_mask (all zeros)", lambda c: _mask(c) is not None and not bool(_mask(c).any())),
    ), several_shapes=True),
    Contract("causal_lm.LMHead", "causal_lm.lm_head", (
        Situation("an odd d_model", lambda c: c["d_model"] % 2 == 1),
        Situation("d_model 1", lambda c: c["d_model"] == 1),
        Situation("one token", lambda c: c["ntoken"] == 1),
    )),
    Contract("causal_lm.LMHead.forward", "causal_lm.lm_head", (*_shapes(),), several_shapes=True),
    Contract("causal_lm.ClassificationHead", "causal_lm.classification_head", (
        Situation("an odd d_model", lambda c: c["d_model"] % 2 == 1),
        Situation("one class", lambda c: c["n_classes"] == 1),
        Situation("more than two classes", lambda c: c["n_classes"] > 2),
    )),
    Contract("causal_lm.ClassificationHead.forward", "causal_lm.classification_head", (*_shapes(),),
             several_shapes=True),
    Contract("causal_lm.count_parameters", "causal_lm.count_parameters", (
        Situation("the student's own TransformerModel", lambda c: "TransformerModel" in str(getattr(c["module"],
                                                                                                   "type_name", ""))),
        Situation("a module of the grader's (the probe)", lambda c: "Sequential" in str(getattr(c["module"],
                                                                                                  "type_name", ""))),
    )),
    Contract("causal_lm.probe_module", "causal_lm.count_parameters", (
        Situation("no layer frozen", lambda c: c["frozen"] == 0),
        Situation("one of two layers frozen", lambda c: c["frozen"] == 1),
        Situation("every layer frozen", lambda c: c["frozen"] == 2),
        Situation("a weight two layers share", lambda c: c["tied"] is True),
        Situation("a shared weight, frozen", lambda c: c["tied"] is True and c["frozen"] >= 1),
    ), task=True),
    Contract("causal_lm.closed_form_parameter_count", "causal_lm.closed_form", (
        Situation("one layer", lambda c: c["nlayers"] == 1),
        Situation("several layers", lambda c: c["nlayers"] >= 2),
        Situation("more than four layers", lambda c: c["nlayers"] > 4),
        Situation("one head", lambda c: c["nhead"] == 1),
        Situation("a d_model of 200 or more", lambda c: c["d_model"] >= 200),
        Situation("a vocabulary of 50,001 tokens or more", lambda c: c["ntoken"] >= 50_001),
        Situation("one class", lambda c: c["n_classes"] == 1),
        Situation("more than two classes", lambda c: c["n_classes"] > 2),
    )),
]

GIVEN = {}
