"""Small named hypothesis strategies for the checks' inputs.

Strategies draw sizes and a seed; tensors are made from a torch.Generator seeded with it, so
hypothesis shrinks towards small shapes and simple seeds, and the same draw gives the same
tensors on every machine.
"""

from dataclasses import dataclass

import torch
from hypothesis import strategies as st


def tensors_from(seed, *shapes):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g) for shape in shapes]


@dataclass
class AttentionInput:
    q: torch.Tensor  # (B, H, T, d)
    k: torch.Tensor
    v: torch.Tensor
    padding: torch.Tensor | None  # (B, T) float, 1 at padding; every row keeps key 0

    def __repr__(self):
        B, H, T, d = self.q.shape
        padding = None if self.padding is None else self.padding.int().tolist()
        return f"q, k, v of shape (B={B}, H={H}, T={T}, d={d}), padding mask {padding}"


@st.composite
def attention_inputs(draw, *, padded=False, square_batch=None):
    """(B, H, T, d) q, k, v; with `padded`, a (B, T) padding mask that always keeps key 0 and pads
    at least one key somewhere; `square_batch` forces B == T (True) or B != T (False)."""
    T = draw(st.integers(2 if padded else 1, 6))
    if square_batch is True:
        B = T
    elif square_batch is False:
        B = draw(st.integers(1, 5).filter(lambda b: b != T))
    else:
        B = draw(st.integers(1, 4))
    H = draw(st.integers(1, 3))
    d = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**16))
    q, k, v = tensors_from(seed, (B, H, T, d), (B, H, T, d), (B, H, T, d))
    padding = None
    if padded:
        g = torch.Generator().manual_seed(seed + 1)
        rest = (torch.rand(B, T - 1, generator=g) < 0.5).float()
        rest[0, -1] = 1.0  # at least one padded key
        padding = torch.cat([torch.zeros(B, 1), rest], dim=1)
    return AttentionInput(q, k, v, padding)


@dataclass
class MHAInput:
    embed_dim: int
    n_heads: int
    x: torch.Tensor  # (B, T, E)
    padding: torch.Tensor | None
    weights_seed: int

    def __repr__(self):
        padding = None if self.padding is None else self.padding.int().tolist()
        return (f"MultiHeadAttention(embed_dim={self.embed_dim}, n_heads={self.n_heads}) on input of shape "
                f"{tuple(self.x.shape)}, padding mask {padding}")


@st.composite
def mha_inputs(draw, *, padded=False):
    n_heads = draw(st.integers(1, 4))
    embed_dim = n_heads * draw(st.integers(1, 4))
    T = draw(st.integers(2 if padded else 1, 5))
    B = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    (x,) = tensors_from(seed, (B, T, embed_dim))
    padding = None
    if padded:
        g = torch.Generator().manual_seed(seed + 1)
        rest = (torch.rand(B, T - 1, generator=g) < 0.5).float()
        rest[0, -1] = 1.0
        padding = torch.cat([torch.zeros(B, 1), rest], dim=1)
    return MHAInput(embed_dim, n_heads, x, padding, seed + 2)
