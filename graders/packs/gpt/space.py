"""The argument space of the minGPT homework's contract (graders/checks/space.py): for every
callable a student writes, the check that compares it with the reference by value and the
situations of its docstring the checks must produce. `grade coverage --assignment gpt` proves them."""

from graders.checks.space import EVAL, TRAINING, Contract, Situation, size, tensor

IGNORE_INDEX = -1


def _config(predicate):
    return lambda call: predicate(call.arguments)


CONTRACTS = [
    # The template gives GPTConfig whole; its fields are the model's arguments, so the space of
    # GPT's constructor is the space of the configs the checks build.
    Contract("gpt.GPTConfig", "gpt.forward_matches_reference", (
        Situation("several layers", _config(lambda a: a["n_layer"] >= 2)),
        Situation("several heads", _config(lambda a: a["n_head"] >= 2)),
        Situation("a block of one position", _config(lambda a: a["block_size"] == 1)),
        Situation("three dropout rates all different", _config(
            lambda a: len({a["embd_pdrop"], a["attn_pdrop"], a["resid_pdrop"]}) == 3)),
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
        Situation("next-token targets with IGNORE_INDEX padding",
                  lambda c: size(c["targets"], -1) is not None and tensor(c["targets"]).dim() == 2
                  and bool((tensor(c["targets"]) == IGNORE_INDEX).any())),
        Situation("class targets with finetune_classify",
                  lambda c: c["finetune_classify"] and tensor(c["targets"]) is not None),
        Situation("finetune_classify without targets", lambda c: c["finetune_classify"] and c["targets"] is None),
        Situation("in training mode", lambda c: c.mode == TRAINING),
        Situation("in eval mode", lambda c: c.mode == EVAL),
    ), several_shapes=True),
    Contract("gpt.GPT.generate", "gpt.greedy_follows_argmax", (
        Situation("a batch of one prompt", lambda c: size(c["idx"], 0) == 1),
        Situation("a one-token prompt", lambda c: size(c["idx"], 1) == 1),
        Situation("greedy with a temperature other than 1",
                  lambda c: not c["do_sample"] and c["temperature"] != 1.0),
        Situation("greedy with top_k", lambda c: not c["do_sample"] and c["top_k"] is not None),
        Situation("sampling with top_k=1", lambda c: c["do_sample"] and c["top_k"] == 1),
        Situation("sampling at a temperature below 1", lambda c: c["do_sample"] and c["temperature"] < 1.0),
        Situation("sampling at a temperature above 1", lambda c: c["do_sample"] and c["temperature"] > 1.0),
    ), fixed={}, several_shapes=True),
    Contract("gpt.LanguageModelingDataset", "gpt.dataset_shifted", (
        Situation("a sentence of one token (left out)", lambda c: any(len(s) == 1 for s in c["token_ids"])),
        Situation("an empty sentence (left out)", lambda c: any(len(s) == 0 for s in c["token_ids"])),
        Situation("a single sentence", lambda c: len(c["token_ids"]) == 1),
    )),
    Contract("gpt.LanguageModelingDataset.__getitem__", "gpt.dataset_shifted"),
    Contract("gpt.LanguageModelingDataset.__len__", "gpt.dataset_drops_short"),
    Contract("gpt.lm_collate_fn", "gpt.collate_pads", (
        Situation("a batch of one", lambda c: len(c["batch"]) == 1),
        Situation("sequences of equal length", lambda c: len({len(x) for x, _ in c["batch"]}) == 1 and len(c["batch"]) > 1),
        Situation("a sequence of one token", lambda c: any(len(x) == 1 for x, _ in c["batch"])),
    )),
]

GIVEN = {}
