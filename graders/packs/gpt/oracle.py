"""Reference behaviour under weights a check chooses: the computations the minGPT checks ask the
oracle for (`ctx.oracle.call("gpt_forward", ...)`, the state's shapes for a configuration, the
reference's generate over the grader's stand-in forward, the reference dataset's items).
`reference` gives a module of the solution by its name."""

import torch
from torch import nn

from .tasks import StandInForward, stand_in_table

# The GELU flavours the contract accepts in the blocks' MLP: the exact one (nn.GELU()) and the
# tanh approximation (karpathy's minGPT NewGELU, nn.GELU(approximate="tanh")); the template's
# Block docstring says so.
GELU_FLAVOURS = ("none", "tanh")


def gpt_model(reference, config, gelu="none"):
    """The reference GPT for `config`, its MLPs with the given GELU flavour (what a failed forward
    is traced against, graders/checks/localise.py)."""
    if gelu not in GELU_FLAVOURS:
        raise ValueError(f"gelu must be one of {GELU_FLAVOURS}, got {gelu!r}")
    gpt = reference("gpt")
    model = gpt.GPT(gpt.GPTConfig(**config))
    for block in model.transformer.h:
        block.mlp["act"] = nn.GELU(approximate=gelu)
    return model


def gpt_forward(reference, state_dict, config, idx, positions=True, final_norm=True, gelu="none", train=False):
    """The reference GPT's eval-mode logits under the given weights, its MLPs with the given GELU
    flavour; with positions=False, positions="ids" or final_norm=False, what a forward without the
    position embeddings, with the token ids fed to the position embedding, or without ln_f gives
    (the mistakes a check names). With train=True, in training mode: deterministic where every
    dropout rate of `config` is 0 or 1 (a rate of 1 drops its whole path)."""
    model = gpt_model(reference, config, gelu).train(train)
    model.load_state_dict(state_dict, strict=False)
    if positions is False:
        nn.init.zeros_(model.transformer.wpe.weight)
    if not final_norm:
        model.transformer.ln_f = nn.Identity()
    with torch.no_grad():
        if positions == "ids":  # wpe(idx) in place of wpe(arange(T)): the ids must be < block_size
            wte, wpe = model.transformer.wte, model.transformer.wpe
            x = wte(idx) + wpe(idx)
            for block in model.transformer.h:
                x = block(x)
            return model.lm_head(model.transformer.ln_f(x))
        return model(idx)[0]


def gpt_state_shapes(reference, config):
    """{name: shape} of the reference GPT's state_dict for `config`: what a failed count of the
    heads is explained against, sub-module by sub-module."""
    gpt = reference("gpt")
    return {name: tuple(t.shape) for name, t in gpt.GPT(gpt.GPTConfig(**config)).state_dict().items()}


def gpt_outputs(reference, state_dict, config, idx, targets=None, finetune_classify=False, gelu="none", train=False):
    """The reference GPT's (logits, loss) under the given weights, its MLPs with the given GELU
    flavour, in eval mode or (train=True, deterministic where every dropout rate is 0 or 1) in
    training mode: what GPT.forward(idx, targets, finetune_classify) returns."""
    model = gpt_model(reference, config, gelu).train(train)
    model.load_state_dict(state_dict, strict=False)
    with torch.no_grad():
        return model(idx, targets, finetune_classify=finetune_classify)


class _StandInModel:
    """The stand-in forward as the reference's generate sees a model: callable, with block_size."""

    def __init__(self, stand_in):
        self.forward = StandInForward(stand_in_table(**stand_in), "pair")
        self.block_size = stand_in["block_size"]

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)


def gpt_generate(reference, stand_in, idx, max_new_tokens, **kwargs):
    """The reference's GPT.generate (greedy unless kwargs say otherwise) of a model whose forward is
    the grader's stand-in (`stand_in`: vocab_size, block_size, seed, scale; graders/packs/gpt/tasks.py)."""
    return reference("gpt").GPT.generate(_StandInModel(stand_in), idx, max_new_tokens, **kwargs)


def gpt_dataset(reference, token_ids):
    """[(X, Y)] of the reference's LanguageModelingDataset of `token_ids`, in index order (copies: X and
    Y are views of one sentence, which the golden answers cannot store as such)."""
    dataset = reference("gpt").LanguageModelingDataset(token_ids)
    return [tuple(t.clone() for t in dataset[i]) for i in range(len(dataset))]


COMPUTATIONS = {"gpt_forward": gpt_forward, "gpt_outputs": gpt_outputs, "gpt_model": gpt_model,
                "gpt_state_shapes": gpt_state_shapes, "gpt_generate": gpt_generate, "gpt_dataset": gpt_dataset}
