"""The argument space of the minGPT homework's contract (graders/checks/space.py): for every
callable a student writes, the check that compares it with the reference by value and the
situations of its docstring the checks must produce. `grade coverage --assignment gpt` proves them.

Where the docstrings were silent the pack decided, and the docstrings (reference/gpt/gpt.py) now
say so: a block of one position is a model; heads of any width; forward takes long ids of any
length up to block_size, call after call on one model, and returns (logits, None) without targets,
finetune_classify too; generate takes prompts of any length (cropped), max_new_tokens from 0 on
(beyond block_size too), 1 <= top_k <= vocab_size, and greedy decoding ignores temperature and
top_k; the dataset keeps the sentences of two tokens or more in order (an empty dataset where
none is) and gives long (X, Y); lm_collate_fn gives long (B, T_max) tensors, a batch of one too.
"""

from graders.checks.space import EVAL, TRAINING, Contract, Situation, size, tensor

IGNORE_INDEX = -1
RATES = ("embd_pdrop", "attn_pdrop", "resid_pdrop")


def _config(predicate):
    return lambda call: predicate(call.arguments)


def _model(call, field):
    """A field of the GPTConfig the method's GPT was built from (GPT(config): the config's own
    constructor arguments), or None."""
    config = (call.built or {}).get("config")
    return config.get(field) if isinstance(config, dict) else None


def _block(call):
    return _model(call, "block_size")


def _lm_targets(call):
    targets = tensor(call["targets"])
    return targets is not None and targets.dim() == 2


def _after_a_short_sentence(call):
    """dataset[i] where a sentence of fewer than two tokens comes before the i-th one kept."""
    sentences = (call.built or {}).get("token_ids") or []
    kept = [position for position, ids in enumerate(sentences) if len(ids) >= 2]
    return call["i"] < len(kept) and any(len(ids) < 2 for ids in sentences[:kept[call["i"]]])


CONTRACTS = [
    # The template gives GPTConfig whole; its fields are the model's arguments, so the space of
    # GPT's constructor is the space of the configs the checks build.
    Contract("gpt.GPTConfig", "gpt.forward_matches_reference", (
        Situation("several layers", _config(lambda a: a["n_layer"] >= 2)),
        Situation("three layers", _config(lambda a: a["n_layer"] >= 3)),
        Situation("several heads", _config(lambda a: a["n_head"] >= 2)),
        Situation("heads of an odd width above one", _config(
            lambda a: (a["n_embd"] // a["n_head"]) % 2 == 1 and a["n_embd"] // a["n_head"] > 1)),
        Situation("heads of width one", _config(lambda a: a["n_embd"] == a["n_head"])),
        Situation("a block of one position", _config(lambda a: a["block_size"] == 1)),
        Situation("three dropout rates all different", _config(lambda a: len({a[rate] for rate in RATES}) == 3)),
        Situation("embd_pdrop alone nonzero", _config(
            lambda a: a["embd_pdrop"] > 0 and a["attn_pdrop"] == a["resid_pdrop"] == 0)),
        Situation("attn_pdrop alone nonzero", _config(
            lambda a: a["attn_pdrop"] > 0 and a["embd_pdrop"] == a["resid_pdrop"] == 0)),
        Situation("resid_pdrop alone nonzero", _config(
            lambda a: a["resid_pdrop"] > 0 and a["embd_pdrop"] == a["attn_pdrop"] == 0)),
        Situation("more than two classes", _config(lambda a: a["n_classification_class"] > 2)),
    )),
    Contract("gpt.GPT", "gpt.forward_matches_reference"),
    Contract("gpt.GPT.forward", "gpt.forward_matches_reference", (
        Situation("a batch of one", lambda c: size(c["idx"], 0) == 1),
        Situation("a sequence of one token", lambda c: size(c["idx"], 1) == 1),
        Situation("a sequence of block_size tokens", lambda c: size(c["idx"], 1) == _block(c)),
        Situation("a block of one position", lambda c: _block(c) == 1),
        Situation("next-token targets with IGNORE_INDEX padding",
                  lambda c: _lm_targets(c) and bool((tensor(c["targets"]) == IGNORE_INDEX).any())),
        Situation("next-token targets without padding",
                  lambda c: _lm_targets(c) and not bool((tensor(c["targets"]) == IGNORE_INDEX).any())),
        Situation("class targets with finetune_classify",
                  lambda c: c["finetune_classify"] and tensor(c["targets"]) is not None),
        Situation("finetune_classify without targets", lambda c: c["finetune_classify"] and c["targets"] is None),
        Situation("in training mode", lambda c: c.mode == TRAINING),
        Situation("in training mode, every dropout rate 0",
                  lambda c: c.mode == TRAINING and all(_model(c, rate) == 0 for rate in RATES)),
        Situation("in training mode, with targets", lambda c: c.mode == TRAINING and c["targets"] is not None),
        Situation("in eval mode", lambda c: c.mode == EVAL),
    ), several_shapes=True),
    Contract("gpt.GPT.generate", "gpt.greedy_follows_argmax", (
        Situation("a batch of one prompt", lambda c: size(c["idx"], 0) == 1),
        Situation("a one-token prompt", lambda c: size(c["idx"], 1) == 1),
        Situation("a prompt of exactly block_size tokens", lambda c: size(c["idx"], 1) == _block(c)),
        Situation("a prompt longer than block_size", lambda c: _block(c) is not None and size(c["idx"], 1) > _block(c)),
        Situation("max_new_tokens beyond block_size: the context is cropped while generating",
                  lambda c: _block(c) is not None and size(c["idx"], 1) <= _block(c)
                  < size(c["idx"], 1) + c["max_new_tokens"] - 1),
        Situation("max_new_tokens of 0", lambda c: c["max_new_tokens"] == 0),
        Situation("a block of one position", lambda c: _block(c) == 1),
        Situation("greedy with a temperature other than 1",
                  lambda c: not c["do_sample"] and c["temperature"] != 1.0),
        Situation("greedy with top_k", lambda c: not c["do_sample"] and c["top_k"] is not None),
        Situation("greedy with top_k equal to vocab_size",
                  lambda c: not c["do_sample"] and c["top_k"] is not None and c["top_k"] == _model(c, "vocab_size")),
        Situation("sampling with top_k=1", lambda c: c["do_sample"] and c["top_k"] == 1),
        Situation("sampling with top_k above 1", lambda c: c["do_sample"] and (c["top_k"] or 0) > 1),
        Situation("sampling at a temperature below 1", lambda c: c["do_sample"] and c["temperature"] < 1.0),
        Situation("sampling at a temperature above 1", lambda c: c["do_sample"] and c["temperature"] > 1.0),
    ), fixed={}, several_shapes=True),
    Contract("gpt.LanguageModelingDataset", "gpt.dataset_shifted", (
        Situation("a sentence of one token (left out)", lambda c: any(len(s) == 1 for s in c["token_ids"])),
        Situation("an empty sentence (left out)", lambda c: any(len(s) == 0 for s in c["token_ids"])),
        Situation("a sentence of exactly two tokens (one prediction)", lambda c: any(len(s) == 2 for s in c["token_ids"])),
        Situation("a single sentence", lambda c: len(c["token_ids"]) == 1),
        Situation("short sentences only: an empty dataset", lambda c: all(len(s) < 2 for s in c["token_ids"])),
    )),
    Contract("gpt.LanguageModelingDataset.__getitem__", "gpt.dataset_shifted", (
        Situation("an item after a sentence left out", _after_a_short_sentence),
    )),
    Contract("gpt.LanguageModelingDataset.__len__", "gpt.dataset_shifted", (
        Situation("an empty dataset", lambda c: c.built is not None and all(len(s) < 2 for s in c.built["token_ids"])),
    )),
    Contract("gpt.lm_collate_fn", "gpt.collate_pads", (
        Situation("a batch of one", lambda c: len(c["batch"]) == 1),
        Situation("sequences of equal length", lambda c: len({len(x) for x, _ in c["batch"]}) == 1 and len(c["batch"]) > 1),
        Situation("sequences of different lengths", lambda c: len({len(x) for x, _ in c["batch"]}) > 1),
        Situation("a sequence of one token", lambda c: any(len(x) == 1 for x, _ in c["batch"])),
    )),
]

GIVEN = {}
