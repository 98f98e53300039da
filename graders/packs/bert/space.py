"""The argument space of the BERT homework's contract (graders/checks/space.py): for every callable
a student writes, the check that compares it with the reference by value and the situations of its
docstring the checks must produce. `grade coverage --assignment bert` proves them; docs/checks.md
lists them with the decisions taken where a docstring was silent."""

import torch

from graders.checks.space import EVAL, TRAINING, Contract, Situation, first_tensor, size, tensor


def _mask(call, name="mask"):
    return tensor(call[name])


def _rates(first, second):
    """Situations of a pair of dropout rates: each alone nonzero, and both nonzero but different."""
    return (
        Situation(f"{first} alone nonzero", lambda c: c[first] > 0 and c[second] == 0),
        Situation(f"{second} alone nonzero", lambda c: c[second] > 0 and c[first] == 0),
        Situation(f"{first} and {second} both nonzero and different", lambda c: 0 < c[first] != c[second] > 0),
    )


def _modes():
    return (Situation("in training mode", lambda c: c.mode == TRAINING),
            Situation("in eval mode", lambda c: c.mode == EVAL))


def _input_batch_of_one():
    return Situation("a batch of one", lambda c: size(first_tensor(c), 0) == 1)


def _input_sequence_of_one():
    return Situation("a sequence of one position", lambda c: size(first_tensor(c), 1) == 1)


def _padding_given(name):
    return Situation(f"a (B, T) padding {name}", lambda c: tensor(c[name]) is not None and tensor(c[name]).dim() == 2
                     and bool(tensor(c[name]).bool().any()))


CONTRACTS = [
    Contract("attention.scaled_dot_product", "attention.matches_reference", (
        Situation("a batch of one", lambda c: size(c["q"], 0) == 1),
        Situation("one head", lambda c: size(c["q"], 1) == 1),
        Situation("several heads", lambda c: (size(c["q"], 1) or 0) >= 2),
        Situation("a sequence of one position", lambda c: size(c["q"], 2) == 1),
        Situation("an odd head width", lambda c: (size(c["q"], -1) or 0) % 2 == 1),
        Situation("float64 inputs", lambda c: tensor(c["q"]) is not None and c["q"].dtype == torch.float64),
        Situation("a float (B, T) padding mask", lambda c: _mask(c) is not None and _mask(c).dim() == 2
                  and _mask(c).is_floating_point()),
        Situation("a boolean (B, T) padding mask", lambda c: _mask(c) is not None and _mask(c).dim() == 2
                  and _mask(c).dtype == torch.bool),
        Situation("a (B, T) mask where B equals T", lambda c: _mask(c) is not None and _mask(c).dim() == 2
                  and _mask(c).size(0) == _mask(c).size(1) == size(c["q"], 2)),
        Situation("a (B, 1, 1, T) padding mask", lambda c: _mask(c) is not None and _mask(c).dim() == 4
                  and _mask(c).size(1) == _mask(c).size(2) == 1),
        Situation("a (1, 1, T, T) mask per query and key", lambda c: _mask(c) is not None and _mask(c).dim() == 4
                  and _mask(c).size(0) == _mask(c).size(1) == 1 and (size(c["q"], 2) or 0) > 1
                  and _mask(c).size(2) == _mask(c).size(3)),
        Situation("a (B, H, T, T) mask", lambda c: _mask(c) is not None and _mask(c).dim() == 4
                  and _mask(c).shape == tensor(c["q"]).shape[:2] + (size(c["q"], 2),) * 2 and _mask(c).size(1) > 1),
        Situation("a boolean mask per query and key", lambda c: _mask(c) is not None and _mask(c).dim() == 4
                  and _mask(c).dtype == torch.bool and _mask(c).size(2) > 1),
        Situation("dropout at a rate below 0.5", lambda c: 0 < c["attn_drop_rate"] < 0.5),
        Situation("dropout at a rate above 0.5", lambda c: c["attn_drop_rate"] > 0.5),
    )),
    Contract("attention.MultiHeadAttention", "mha.matches_reference", (
        Situation("one head", lambda c: c["n_heads"] == 1),
        Situation("several heads", lambda c: c["n_heads"] >= 2),
        Situation("heads of width one", lambda c: c["embed_dim"] == c["n_heads"] > 1),
        Situation("an odd embed_dim", lambda c: c["embed_dim"] % 2 == 1),
        Situation("a nonzero attn_drop_rate", lambda c: c["attn_drop_rate"] > 0),
    )),
    Contract("attention.MultiHeadAttention.forward", "mha.matches_reference", (
        _input_batch_of_one(), _input_sequence_of_one(), _padding_given("mask"), *_modes(),
    ), several_shapes=True),
    Contract("encoder.PositionalEncoding", "positional_encoding.values", (
        Situation("an odd embed_dim", lambda c: c["embed_dim"] % 2 == 1 and c["embed_dim"] > 1),
        Situation("embed_dim 1", lambda c: c["embed_dim"] == 1),
        Situation("a max_len other than 5000", lambda c: c["max_len"] != 5000),
        Situation("dropout 0", lambda c: c["dropout"] == 0),
        Situation("a nonzero dropout other than 0.1", lambda c: c["dropout"] not in (0, 0.1)),
    )),
    Contract("encoder.PositionalEncoding.forward", "positional_encoding.values", (
        _input_batch_of_one(), _input_sequence_of_one(), *_modes(),
        Situation("float64 input", lambda c: tensor(c["x"]) is not None and c["x"].dtype == torch.float64),
    ), several_shapes=True),
    Contract("encoder.TransformerBlock", "block.wiring", (
        *_rates("attn_drop_rate", "layer_drop_rate"),
        Situation("an odd embed_dim", lambda c: c["embed_dim"] % 2 == 1),
        Situation("several heads", lambda c: c["n_heads"] >= 2),
    )),
    Contract("encoder.TransformerBlock.forward", "block.wiring", (
        _input_batch_of_one(), _input_sequence_of_one(), *_modes(),
        Situation("a padding mask", lambda c: isinstance(c["inputs"], (tuple, list)) and len(c["inputs"]) == 2
                  and tensor(c["inputs"][1]) is not None),
        Situation("no mask", lambda c: isinstance(c["inputs"], (tuple, list)) and len(c["inputs"]) == 2
                  and c["inputs"][1] is None),
    ), several_shapes=True),
    Contract("bert.BertModel", "bert.matches_reference", (
        Situation("one layer", lambda c: c["n_layers"] == 1),
        Situation("several layers", lambda c: c["n_layers"] >= 2),
        *_rates("attn_drop_rate", "layer_drop_rate"),
        Situation("several heads", lambda c: c["n_heads"] >= 2),
    )),
    Contract("bert.BertModel.forward", "bert.matches_reference", (
        _input_batch_of_one(), _input_sequence_of_one(), _padding_given("mask"), *_modes(),
        Situation("no mask", lambda c: c["mask"] is None),
        Situation("the <mask> token (id vocab_size) in the input",
                  lambda c: tensor(c["batch_text"]) is not None and bool((c["batch_text"] == c.built["vocab_size"]).any())),
    ), several_shapes=True),
    Contract("bert.mask_inputs", "pretraining.selection_rate", (
        Situation("a pad_ind other than 0", lambda c: c["pad_ind"] != 0),
        Situation("a mask_rate other than 0.15", lambda c: c["mask_rate"] != 0.15),
        Situation("only_mask", lambda c: c["only_mask"] is True),
        Situation("a batch of one", lambda c: size(c["text"], 0) == 1),
        Situation("a sequence of one token", lambda c: size(c["text"], 1) == 1),
        Situation("a batch holding padding", lambda c: tensor(c["text"]) is not None
                  and bool((c["text"] == c["pad_ind"]).any())),
        Situation("a mask_token_ind other than vocab_size", lambda c: c["mask_token_ind"] != c["vocab_size"]),
    )),
    Contract("bert.pretrain_step", "pretraining.step_updates_parameters", (
        Situation("a pad_ind other than 0", lambda c: c["pad_ind"] != 0),
        Situation("a mask_rate other than 0.15", lambda c: c["mask_rate"] != 0.15),
        Situation("a batch of one", lambda c: size(c["text"], 0) == 1),
        Situation("a batch holding padding", lambda c: tensor(c["text"]) is not None
                  and bool((c["text"] == c["pad_ind"]).any())),
    )),
    Contract("sentiment.BERTGRUSentiment", "sentiment.gru_summary", (
        Situation("bidirectional", lambda c: c["bidirectional"] is True),
        Situation("one direction", lambda c: c["bidirectional"] is False),
        Situation("several GRU layers", lambda c: c["n_layers"] >= 2),
        Situation("bidirectional with several layers", lambda c: c["bidirectional"] is True and c["n_layers"] >= 2),
        Situation("several outputs", lambda c: c["output_dim"] >= 2),
        Situation("a nonzero dropout", lambda c: c["dropout"] > 0),
    )),
    Contract("sentiment.BERTGRUSentiment.forward", "sentiment.gru_summary", (
        _input_batch_of_one(), _input_sequence_of_one(), *_modes(),
        Situation("an attention mask with padding", lambda c: tensor(c["attention_mask"]) is not None
                  and bool((c["attention_mask"] == 0).any())),
        Situation("no attention mask", lambda c: c["attention_mask"] is None),
    ), several_shapes=True),
    Contract("sentiment.binary_accuracy", "sentiment.binary_accuracy", (
        Situation("a batch of one", lambda c: size(c["preds"], 0) == 1),
        Situation("long labels", lambda c: tensor(c["y"]) is not None and c["y"].dtype == torch.long),
        Situation("float labels", lambda c: tensor(c["y"]) is not None and c["y"].is_floating_point()),
        Situation("float64 logits", lambda c: tensor(c["preds"]) is not None and c["preds"].dtype == torch.float64),
    )),
    Contract("sentiment.train", "sentiment.train_values", fixed={}),
    Contract("sentiment.evaluate", "sentiment.evaluate_values", fixed={}),
    # What train() and evaluate() iterate over stays in the worker: its batches are proved here.
    Contract("sentiment.epoch_inputs", "sentiment.train_values", (
        Situation("one batch", lambda c: len(c["batches"]) == 1),
        Situation("a batch of one example", lambda c: any(size(batch[0], 0) == 1 for batch in c["batches"])),
        Situation("batches of different sizes", lambda c: len({size(batch[0], 0) for batch in c["batches"]}) > 1),
    ), task=True),
]

GIVEN = {
    "sentiment.HYPERPARAMETERS": "data, not a callable: sentiment.hyperparameters and finetune.accuracy read it",
}
