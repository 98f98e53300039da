"""Sinusoidal positional encoding and the post-LN Transformer encoder block (seed 004, parts 3 and 4)."""

import math

import torch
import torch.nn as nn

from .attention import MultiHeadAttention


class PositionalEncoding(nn.Module):
    """Adds PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    embed_dim may be odd: the last dimension (an even index) then holds a sin without its cos.
    Input and output are batch-first, (B, T, E). The table is a buffer, not a parameter:
    it moves with .to(device) and is saved in the state_dict, but is never trained.
    """

    def __init__(self, embed_dim, dropout=0.1, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        # TODO: build the (1, max_len, embed_dim) table, sin on even and cos on odd dimensions,
        # TODO: and register it with self.register_buffer("pe", ...).
        # BEGIN SOLUTION
        position = torch.arange(max_len).unsqueeze(1)  # (max_len, 1)
        div_term = torch.exp(torch.arange(0, embed_dim, 2) * (-math.log(10000.0) / embed_dim))  # (E/2,)
        pe = torch.zeros(1, max_len, embed_dim)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term[: embed_dim // 2])
        self.register_buffer("pe", pe)
        # END SOLUTION

    def forward(self, x):
        """x: (B, T, E) -> (B, T, E), position t of every sequence gets pe[t]."""
        # TODO: add the encoding of positions 0..T-1 along the sequence axis, then dropout.
        # BEGIN SOLUTION
        x = x + self.pe[:, : x.size(1)]
        return self.dropout(x)
        # END SOLUTION


class TransformerBlock(nn.Module):
    """Post-LN encoder block:

        h = norm1(x + dropout(self_attn(x, mask)))
        y = norm2(h + linear_net(h))          linear_net = Linear, GELU, Linear, Dropout

    self_attn is MultiHeadAttention(embed_dim, n_heads, attn_drop_rate); dropout and linear_net's
    Dropout drop at layer_drop_rate. The grader calls the sub-modules by these names: self_attn,
    linear_net, norm1, norm2. One block serves sequences of any length.
    """

    def __init__(self, embed_dim, n_heads, attn_drop_rate, layer_drop_rate):
        super().__init__()
        self.embed_dim = embed_dim
        self.n_heads = n_heads
        # TODO: define self.self_attn (MultiHeadAttention), self.linear_net (nn.Sequential of
        # TODO: Linear, GELU, Linear, Dropout), self.norm1, self.norm2 (LayerNorm), self.dropout.
        # BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(embed_dim, n_heads, attn_drop_rate)
        self.linear_net = nn.Sequential(
            nn.Linear(embed_dim, 4 * embed_dim),
            nn.GELU(),
            nn.Linear(4 * embed_dim, embed_dim),
            nn.Dropout(layer_drop_rate),
        )
        self.norm1 = nn.LayerNorm(embed_dim)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.dropout = nn.Dropout(layer_drop_rate)
        # END SOLUTION

    def forward(self, inputs):
        """inputs: (embedding (B, T, E), mask (B, T) or None) -> (embedding (B, T, E), mask)."""
        # TODO: attention, dropout, residual, norm1; then linear_net, residual, norm2.
        # TODO: Return the mask too, so that blocks can be chained in nn.Sequential.
        # BEGIN SOLUTION
        embedding, mask = inputs
        attended = self.self_attn(embedding, mask=mask)
        embedding = self.norm1(embedding + self.dropout(attended))
        embedding = self.norm2(embedding + self.linear_net(embedding))
        return embedding, mask
        # END SOLUTION
