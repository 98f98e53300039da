"""A small BERT and its masked-language-model pre-training (seed 004, parts 5 and 6)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from .encoder import PositionalEncoding, TransformerBlock

IGNORE_INDEX = -100  # nn.CrossEntropyLoss's default ignore_index: no loss at these labels


class BertModel(nn.Module):
    """Token embedding (vocab_size + 1 rows: the last is the <mask> token; not scaled by
    sqrt(embed_dim)) -> positional encoding -> n_layers TransformerBlocks -> mask_pred, a
    Linear(embed_dim, vocab_size) over the vocabulary.

    The positional encoding drops at layer_drop_rate; every block is
    TransformerBlock(embed_dim, n_heads, attn_drop_rate, layer_drop_rate), with weights of its own.
    """

    def __init__(self, n_layers, vocab_size, embed_dim, n_heads, attn_drop_rate, layer_drop_rate):
        super().__init__()
        # TODO: self.embed = Embedding(vocab_size + 1, embed_dim); self.pos_embed = PositionalEncoding;
        # TODO: self.net = nn.Sequential of n_layers TransformerBlocks; self.mask_pred = Linear(E, V).
        # BEGIN SOLUTION
        self.embed = nn.Embedding(vocab_size + 1, embed_dim)
        self.pos_embed = PositionalEncoding(embed_dim, layer_drop_rate)
        self.net = nn.Sequential(
            *[TransformerBlock(embed_dim, n_heads, attn_drop_rate, layer_drop_rate) for _ in range(n_layers)]
        )
        self.mask_pred = nn.Linear(embed_dim, vocab_size)
        # END SOLUTION

    def forward(self, batch_text, mask=None):
        """batch_text: (B, T) token ids in [0, vocab_size]; mask: None or (B, T), 1 at padding.
        Returns (B, T, vocab_size) logits of the original token at every position."""
        # TODO: embed, add positions, run the blocks with the padding mask, predict the tokens.
        # BEGIN SOLUTION
        x = self.pos_embed(self.embed(batch_text))  # (B, T, E)
        x, _ = self.net((x, mask))
        return self.mask_pred(x)  # (B, T, V)
        # END SOLUTION


def mask_inputs(text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15, only_mask=False):
    """BERT's masking: select each non-padding token with probability mask_rate; of the selected,
    80% become mask_token_ind, 10% a token drawn uniformly from [0, vocab_size), 10% stay unchanged.

    text: (B, T) long, left unchanged (work on a copy). only_mask: every selected token becomes
    mask_token_ind (for evaluation).
    Returns (masked_text, mask_labels), both (B, T): labels hold the original token at the
    selected positions and IGNORE_INDEX (-100) everywhere else. Padding is never selected.
    """
    # TODO: draw the selection independently per token (never padding); draw each selected
    # TODO: token's category at random (not by its order in the batch); build the labels from a
    # TODO: copy of the original text.
    # BEGIN SOLUTION
    selected = (torch.rand(text.shape, device=text.device) < mask_rate) & (text != pad_ind)  # (B, T) bool
    mask_labels = torch.where(selected, text, torch.full_like(text, IGNORE_INDEX))
    masked_text = text.clone()
    if only_mask:
        masked_text[selected] = mask_token_ind
        return masked_text, mask_labels
    category = torch.rand(text.shape, device=text.device)  # < 0.8: <mask>, [0.8, 0.9): random, >= 0.9: unchanged
    to_mask = selected & (category < 0.8)
    to_random = selected & (category >= 0.8) & (category < 0.9)
    random_tokens = torch.randint(vocab_size, text.shape, dtype=text.dtype, device=text.device)
    masked_text[to_mask] = mask_token_ind
    masked_text[to_random] = random_tokens[to_random]
    return masked_text, mask_labels
    # END SOLUTION


def pretrain_step(model, optimizer, text, vocab_size, mask_token_ind, pad_ind=0, mask_rate=0.15):
    """One real masked-LM training step on a (B, T) batch: mask the inputs (mask_inputs with this
    call's vocab_size, mask_token_ind, pad_ind and mask_rate), predict with the padding mask
    text == pad_ind, cross-entropy on the selected tokens only, backward, optimizer step. Returns
    the loss as a float.

    The gradients of this step alone move the weights: clear them before the backward pass
    (optimizer.zero_grad() before it, or after the previous step). The grader hands the step an
    optimizer whose gradients are cleared, and calls it several times in a row.
    """
    # TODO: mask_inputs; a padding mask (text == pad_ind); logits = model(masked_text, pad_mask);
    # TODO: cross-entropy over (B*T, V) ignoring label -100; zero_grad, backward, step.
    # BEGIN SOLUTION
    masked_text, mask_labels = mask_inputs(text, vocab_size, mask_token_ind, pad_ind, mask_rate)
    pad_mask = text == pad_ind  # (B, T)
    logits = model(masked_text, pad_mask)  # (B, T, V)
    loss = F.cross_entropy(logits.reshape(-1, vocab_size), mask_labels.flatten(), ignore_index=IGNORE_INDEX)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()
    # END SOLUTION
