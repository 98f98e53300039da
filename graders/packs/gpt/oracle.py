"""Reference behaviour under weights a check chooses: the computation the minGPT checks ask the
oracle for (`ctx.oracle.call("gpt_forward", ...)`). `reference` gives a module of the solution
by its name."""

import torch
from torch import nn


def gpt_forward(reference, state_dict, config, idx, positions=True, final_norm=True):
    """The reference GPT's eval-mode logits under the given weights; with positions=False or
    final_norm=False, what a forward without the position embeddings or without ln_f gives (the
    mistakes a check names)."""
    gpt = reference("gpt")
    model = gpt.GPT(gpt.GPTConfig(**config)).eval()
    model.load_state_dict(state_dict, strict=False)
    if not positions:
        nn.init.zeros_(model.transformer.wpe.weight)
    if not final_norm:
        model.transformer.ln_f = nn.Identity()
    with torch.no_grad():
        return model(idx)[0]


COMPUTATIONS = {"gpt_forward": gpt_forward}
