"""Reference behaviour under weights a check chooses: the computation the attention checks
ask the oracle for (`ctx.oracle.call("mha_forward", ...)`) besides plain reference functions.
Each takes `reference`, which gives a module of the solution by its name."""

import torch


def mha_forward(reference, state_dict, embed_dim, n_heads, x, mask=None):
    """The reference multi-head attention's eval-mode output under the given reference-layout weights."""
    layer = reference("attention").MultiHeadAttention(embed_dim, n_heads, 0.0).eval()
    layer.load_state_dict(state_dict)
    with torch.no_grad():
        return layer(x, mask)


COMPUTATIONS = {"mha_forward": mha_forward}
