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
    rate: float = 0.0  # the module's attn_drop_rate: eval mode must ignore it
    again: "MHAInput | None" = None  # a second input of another length, for the same module

    def __repr__(self):
        padding = None if self.padding is None else self.padding.int().tolist()
        text = (f"MultiHeadAttention(embed_dim={self.embed_dim}, n_heads={self.n_heads}, attn_drop_rate={self.rate}) "
                f"in eval mode on input of shape {tuple(self.x.shape)}, padding mask {padding}")
        if self.again is not None:
            again = None if self.again.padding is None else self.again.padding.int().tolist()
            text += f", then on input of shape {tuple(self.again.x.shape)}, padding mask {again}"
        return text


def _padding(B, T, g):
    rest = (torch.rand(B, T - 1, generator=g) < 0.5).float()
    rest[0, -1] = 1.0
    return torch.cat([torch.zeros(B, 1), rest], dim=1)


@st.composite
def mha_inputs(draw, *, padded=False):
    """A module (heads of width 1 to 4, odd widths included, a rate eval mode must ignore) and two
    inputs of different lengths for it."""
    n_heads = draw(st.integers(1, 4))
    embed_dim = n_heads * draw(st.integers(1, 4))
    rate = draw(st.sampled_from((0.0, 0.3, 0.9)))
    lengths = [draw(st.integers(2 if padded else 1, 5)) for _ in range(2)]
    if lengths[1] == lengths[0]:
        lengths[1] = lengths[0] + 1
    B = draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2**16))
    inputs = []
    for offset, T in enumerate(lengths):
        (x,) = tensors_from(seed + 3 * offset, (B, T, embed_dim))
        padding = _padding(B, T, torch.Generator().manual_seed(seed + 3 * offset + 1)) if padded else None
        inputs.append((x, padding))
    (x2, padding2) = inputs[1]
    again = MHAInput(embed_dim, n_heads, x2, padding2, seed + 2, rate)
    return MHAInput(embed_dim, n_heads, inputs[0][0], inputs[0][1], seed + 2, rate, again)


# The forms of `mask` scaled_dot_product's docstring allows (graders/packs/bert/space.py proves each
# is drawn): none, a (B, T) padding mask as floats or booleans, the same as (B, 1, 1, T), a causal
# (1, 1, T, T) mask, and a (B, H, T, T) mask of its own per head, as floats or booleans. Every query
# keeps at least one key (the docstring's promise).
MASK_FORMS = ("none", "padding", "padding_bool", "padding_4d", "causal", "per_head", "per_head_bool")
FLOAT_DTYPES = (torch.float32, torch.float64)


@dataclass
class SDPInput:
    q: torch.Tensor  # (B, H, T, d)
    k: torch.Tensor
    v: torch.Tensor
    mask: torch.Tensor | None  # one of MASK_FORMS
    form: str

    @property
    def padding(self):
        """The (B, T) padding this mask is a form of, or None (no mask, or one per query and key)."""
        if self.form.startswith("padding"):
            return (self.mask if self.mask.dim() == 2 else self.mask[:, 0, 0, :]).float()
        return None

    def __repr__(self):
        B, H, T, d = self.q.shape
        dtype = str(self.q.dtype).replace("torch.", "")
        mask = "mask=None" if self.mask is None else (
            f"a {self.form.replace('_', ' ')} mask of shape {tuple(self.mask.shape)} "
            f"{self.mask.int().tolist() if self.mask.numel() <= 64 else ''}".rstrip())
        return f"q, k, v of shape (B={B}, H={H}, T={T}, d={d}) and dtype {dtype}, {mask}"


def _padding_mask(B, T, g):
    """(B, T) float, 1 at padding; key 0 of every row kept, and at least one key padded."""
    rest = (torch.rand(B, T - 1, generator=g) < 0.5).float()
    rest[0, -1] = 1.0
    return torch.cat([torch.zeros(B, 1), rest], dim=1)


def _per_head_mask(B, H, T, g):
    """(B, H, T, T) bool, True = blocked, each query keeping at least one key (and blocking one
    where it has two)."""
    blocked = torch.rand(B, H, T, T, generator=g) < 0.4
    kept = torch.randint(T, (B, H, T), generator=g)
    blocked.scatter_(-1, kept[..., None], False)
    if T > 1:
        blocked[0, 0, 0, (int(kept[0, 0, 0]) + 1) % T] = True
    return blocked


@st.composite
def sdp_arguments(draw, *, forms=MASK_FORMS, dtypes=FLOAT_DTYPES):
    """scaled_dot_product's whole argument space at rate 0: (B, H, T, d) of every size from 1,
    both float dtypes, and every form of mask."""
    form = draw(st.sampled_from(forms))
    T = draw(st.integers(1 if form in ("none", "causal") else 2, 6))
    B = draw(st.integers(1, 4))
    H = draw(st.integers(2 if form.startswith("per_head") else 1, 3))  # a mask per head needs heads
    d = draw(st.integers(1, 8))
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 2**16))
    q, k, v = (t.to(dtype) for t in tensors_from(seed, (B, H, T, d), (B, H, T, d), (B, H, T, d)))
    g = torch.Generator().manual_seed(seed + 1)
    mask = None
    if form.startswith("padding"):
        mask = _padding_mask(B, T, g)
        mask = mask.bool() if form == "padding_bool" else mask[:, None, None, :] if form == "padding_4d" else mask
    elif form == "causal":
        mask = torch.triu(torch.ones(T, T), diagonal=1)[None, None]  # 1 = blocked: the keys after the query
    elif form.startswith("per_head"):
        mask = _per_head_mask(B, H, T, g)
        mask = mask if form == "per_head_bool" else mask.float()
    return SDPInput(q, k, v, mask, form)
