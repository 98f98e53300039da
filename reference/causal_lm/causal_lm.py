"""A causal Transformer language model on nn.TransformerEncoder, its two heads, and parameter
counting (seeds 000 and 001; the PyTorch nn.Transformer tutorial, batch-first)."""

import math

import torch
import torch.nn as nn


def generate_square_subsequent_mask(sz):
    """(sz, sz) float mask: 0 on and below the diagonal, -inf above, so position i attends to
    positions 0..i only. Added to the attention logits by nn.TransformerEncoder. Any sz >= 1
    (sz = 1 is the single 0 of a sequence of one position)."""
    # TODO: -inf strictly above the diagonal, 0 elsewhere (float32).
    # BEGIN SOLUTION
    return torch.triu(torch.full((sz, sz), float("-inf")), diagonal=1)
    # END SOLUTION


class PositionalEncoding(nn.Module):
    """Adds PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

    embed_dim may be odd (1 too): the last dimension (an even index) then holds a sin without its
    cos. Input and output are batch-first, (B, T, E), for any T from 1 to max_len. x may be
    float32 or float64: the output has x's dtype. dropout (nn.Dropout's rate) is applied to the
    sum x + PE in training mode only. The table is a buffer, not a parameter: it moves with
    .to(device) and is saved in the state_dict, but is never trained.
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


class TransformerModel(nn.Module):
    """ids (B, T) -> embedding * sqrt(d_model) -> positional encoding -> nlayers causal
    nn.TransformerEncoderLayer (batch_first) -> hidden states (B, T, d_model). No head.
    dropout is the rate of the positional encoding and of every encoder layer.

    The layers are nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True)
    with torch's defaults otherwise (ReLU, post-LN: norm_first=False), in an nn.TransformerEncoder
    of nlayers layers without a final norm. d_model is any size nhead divides, odd ones too.

    Its sub-modules are an nn.Embedding, a PositionalEncoding and an nn.TransformerEncoder. The
    checks run each of them on its own, found by the template's attribute names (embedding,
    pos_encoder, transformer_encoder) or else by their class: other names are fine.
    """

    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, dropout=0.5):
        super().__init__()
        self.d_model = d_model
        # TODO: self.embedding = Embedding(ntoken, d_model); self.pos_encoder = PositionalEncoding;
        # TODO: self.transformer_encoder = nn.TransformerEncoder of nlayers layers, batch_first=True.
        # TODO: Keep no extra copy of the layer as an attribute (it would count as parameters).
        # BEGIN SOLUTION
        self.embedding = nn.Embedding(ntoken, d_model)
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        layer = nn.TransformerEncoderLayer(d_model, nhead, d_hid, dropout, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        # END SOLUTION

    def forward(self, src, src_mask=None):
        """src: (B, T) int64 ids, any B and T >= 1; src_mask: a float (T, T) mask of 0 (may attend) and
        -inf (blocked), a 0 in every row, as generate_square_subsequent_mask gives (other values: torch's
        encoder in eval mode reads them as blocked); the causal one when None. -> (B, T, d_model) float32."""
        # TODO: embed and scale by sqrt(d_model), add positions, run the encoder with the causal mask.
        # BEGIN SOLUTION
        if src_mask is None:
            src_mask = generate_square_subsequent_mask(src.size(1)).to(src.device)
        x = self.embedding(src) * math.sqrt(self.d_model)  # (B, T, d_model)
        x = self.pos_encoder(x)
        return self.transformer_encoder(x, mask=src_mask)
        # END SOLUTION


class LMHead(nn.Module):
    """Next-token logits at every position: Linear(d_model, ntoken) with bias. (B, T, d) -> (B, T, ntoken),
    for any T >= 1; hidden is float32, the model's output."""

    def __init__(self, d_model, ntoken):
        super().__init__()
        # TODO: self.decoder = Linear(d_model, ntoken).
        # BEGIN SOLUTION
        self.decoder = nn.Linear(d_model, ntoken)
        # END SOLUTION

    def forward(self, hidden):
        # TODO: logits at every position.
        # BEGIN SOLUTION
        return self.decoder(hidden)
        # END SOLUTION


class ClassificationHead(nn.Module):
    """Class logits from the last position, the only one that has seen the whole sequence under
    the causal mask: Linear(d_model, n_classes) with bias. (B, T, d) -> (B, n_classes), for any
    T >= 1 and n_classes >= 1; hidden is float32, the model's output."""

    def __init__(self, d_model, n_classes=2):
        super().__init__()
        # TODO: self.classifier = Linear(d_model, n_classes).
        # BEGIN SOLUTION
        self.classifier = nn.Linear(d_model, n_classes)
        # END SOLUTION

    def forward(self, hidden):
        # TODO: classify the hidden state of the last position.
        # BEGIN SOLUTION
        return self.classifier(hidden[:, -1])
        # END SOLUTION


def count_parameters(module):
    """Number of trainable parameters of any nn.Module: the elements of those with requires_grad,
    frozen ones (requires_grad False) and buffers left out, a parameter shared by several
    sub-modules counted once (as module.parameters() lists it)."""
    # TODO: sum numel over the parameters that require gradients.
    # BEGIN SOLUTION
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
    # END SOLUTION


def closed_form_parameter_count(ntoken, d_model, nhead, d_hid, nlayers, n_classes=2):
    """Parameter counts as formulas, returned as {"base": ..., "lm_head": ..., "classification_head": ...}.

    One encoder layer: attention in-projection 3d^2 + 3d, out-projection d^2 + d, feed-forward
    d*d_hid + d_hid + d_hid*d + d, two LayerNorms 4d. The positional encoding is a buffer: 0.
    The count does not depend on nhead: the heads split d, they do not multiply it. Any positive
    sizes (nhead dividing d_model), the seed's 50,001-token vocabulary and wider ones included;
    the counts are Python ints.
    """
    # TODO: the embedding, nlayers encoder layers, and each head, as closed-form expressions.
    # BEGIN SOLUTION
    attention = (3 * d_model * d_model + 3 * d_model) + (d_model * d_model + d_model)
    feed_forward = (d_model * d_hid + d_hid) + (d_hid * d_model + d_model)
    layer_norms = 2 * (2 * d_model)
    base = ntoken * d_model + nlayers * (attention + feed_forward + layer_norms)
    return {
        "base": base,
        "lm_head": d_model * ntoken + ntoken,
        "classification_head": d_model * n_classes + n_classes,
    }
    # END SOLUTION
