"""Scaled dot-product attention and multi-head attention (seed 004, parts 1 and 2)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V, with dropout on the attention weights.

    q, k, v: (B, H, T, d) queries, keys, values, float32 or float64; any sizes from 1.
    attn_drop_rate: probability of zeroing an attention weight (the survivors are scaled by 1/(1-p)).
    mask: None; or a 2-D (B, T) key-padding mask where 1 / True marks padding: no query may attend
          to that key (a 2-D mask is always read so, also when B == T); or a 4-D mask broadcastable
          to (B, H, T, T), such as (B, 1, 1, T) or a causal (1, 1, T, T), where nonzero / True
          blocks query i -> key j. Float, integer or boolean. Every query keeps at least one key.
    Returns (values, attention): (B, H, T, d) and (B, H, T, T). values are the weights after
    dropout times v; attention may be those weights or the same weights before dropout (both are
    accepted). Before dropout every attention row sums to one.
    """
    # TODO: scale Q K^T by 1/sqrt(d_k); block masked keys before the softmax (a (B, T) padding
    # TODO: mask must be broadcast over heads and queries, i.e. viewed as (B, 1, 1, T)); softmax over
    # TODO: the keys; dropout at attn_drop_rate; return the weighted values and the weights.
    raise NotImplementedError('scaled_dot_product is not implemented yet. TODO: scale Q K^T by 1/sqrt(d_k); block masked keys before the softmax (a (B, T) padding mask must be broadcast over heads and queries, i.e. viewed as (B, 1, 1, T)); softmax over the keys; dropout at attn_drop_rate; return the weighted values and the weights.')


class MultiHeadAttention(nn.Module):
    """Self-attention with `n_heads` heads of size embed_dim // n_heads.

    qkv_proj: Linear(E, 3E), the query, key and value projections of every head stored together.
    o_proj:   Linear(E, E), the output projection W^O applied after the heads are merged.
    The grader loads its weights into these two by name; qkv_proj's outputs may hold q, k and v
    one after the other ([q | k | v]) or head by head ([q_h | k_h | v_h]).
    """

    def __init__(self, embed_dim, n_heads, attn_drop_rate):
        super().__init__()
        assert embed_dim % n_heads == 0, "embed_dim must be divisible by n_heads"
        self.embed_dim = embed_dim
        self.n_heads = n_heads
        self.head_dim = embed_dim // n_heads
        self.attn_drop_rate = attn_drop_rate
        # TODO: define self.qkv_proj = Linear(E, 3E) and self.o_proj = Linear(E, E).
        raise NotImplementedError('MultiHeadAttention.__init__ is not implemented yet. TODO: define self.qkv_proj = Linear(E, 3E) and self.o_proj = Linear(E, E).')
        self._reset_parameters()

    def _reset_parameters(self):
        # Original Transformer initialization, see the PyTorch documentation.
        nn.init.xavier_uniform_(self.qkv_proj.weight)
        self.qkv_proj.bias.data.fill_(0)
        nn.init.xavier_uniform_(self.o_proj.weight)
        self.o_proj.bias.data.fill_(0)

    def forward(self, embedding, mask=None):
        """embedding: (B, T, E); mask: None or (B, T) with 1 at padding. Returns (B, T, E)."""
        # TODO: project to q, k, v and split them into heads of shape (B, H, T, head_dim);
        # TODO: attend with scaled_dot_product (attention dropout only in training mode);
        # TODO: merge the heads back to (B, T, E) and apply the output projection o_proj.
        raise NotImplementedError('MultiHeadAttention.forward is not implemented yet. TODO: project to q, k, v and split them into heads of shape (B, H, T, head_dim); attend with scaled_dot_product (attention dropout only in training mode); merge the heads back to (B, T, E) and apply the output projection o_proj.')
