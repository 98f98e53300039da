"""Sentiment analysis over a frozen BERT encoder with a GRU on top (seed 004, part 7)."""

import torch
import torch.nn as nn

# The student's hyper-parameters, read by the grader to train the model on IMDB.
HYPERPARAMETERS = {
    "hidden_dim": 256,
    "n_layers": 2,
    "bidirectional": True,
    "dropout": 0.25,
    "learning_rate": 1e-3,
    "n_epochs": 3,
    "batch_size": 128,
}


class BERTGRUSentiment(nn.Module):
    """bert (frozen) -> GRU over its last hidden states -> dropout -> Linear to output_dim logits.

    A bidirectional GRU's summary is the final forward and final backward state concatenated.
    """

    def __init__(self, bert, hidden_dim, output_dim, n_layers, bidirectional, dropout):
        super().__init__()
        self.bert = bert
        # TODO: read the embedding size from bert.config (hidden_size); define self.rnn, an
        # TODO: nn.GRU(batch_first=True, bidirectional=..., dropout only between layers),
        # TODO: self.out = Linear(hidden_dim * (2 if bidirectional else 1), output_dim), self.dropout.
        raise NotImplementedError('BERTGRUSentiment.__init__ is not implemented yet. TODO: read the embedding size from bert.config (hidden_size); define self.rnn, an nn.GRU(batch_first=True, bidirectional=..., dropout only between layers), self.out = Linear(hidden_dim * (2 if bidirectional else 1), output_dim), self.dropout.')

    def forward(self, text, attention_mask=None):
        """text: (B, T) token ids; attention_mask: (B, T), 1 at real tokens, or None (no padding).
        Returns (B, output_dim), also for a batch of one. One model serves sequences of any length."""
        # TODO: run self.bert under torch.no_grad() (it stays frozen), passing attention_mask;
        # TODO: GRU over the hidden states; pick hidden[-1] or cat(hidden[-2], hidden[-1]); dropout; out.
        raise NotImplementedError('BERTGRUSentiment.forward is not implemented yet. TODO: run self.bert under torch.no_grad() (it stays frozen), passing attention_mask; GRU over the hidden states; pick hidden[-1] or cat(hidden[-2], hidden[-1]); dropout; out.')


def binary_accuracy(preds, y):
    """Fraction of correct predictions in the batch (8 right of 10 gives 0.8, not 8).
    preds: (B,) logits, float32 or float64 (the grader never gives a logit of exactly 0, where
    rounding sigmoid's 0.5 is a convention); y: (B,) labels in {0, 1}, as floats or integers.
    B may be 1. Returns a number or a one-element tensor."""
    # TODO: round sigmoid(preds) to 0/1 and compare with y.
    raise NotImplementedError('binary_accuracy is not implemented yet. TODO: round sigmoid(preds) to 0/1 and compare with y.')


def _forward_batch(model, batch):
    return model(batch.text, attention_mask=batch.attention_mask).squeeze(1)  # (B,)


def train(model, iterator, optimizer, criterion):
    """One epoch of training. Batches have .text (B, T), .attention_mask (B, T), .label (B,) float;
    their sizes may differ (a last batch of one, say). Returns (mean loss, mean accuracy) over the
    batches: the sum of the batches' means divided by the number of batches."""
    # TODO: model.train(); for each batch: zero_grad, forward, loss, accuracy, backward, step.
    raise NotImplementedError('train is not implemented yet. TODO: model.train(); for each batch: zero_grad, forward, loss, accuracy, backward, step.')


def evaluate(model, iterator, criterion):
    """One pass without training (eval mode, no gradients) over batches as train() gets them.
    Returns (mean loss, mean accuracy) over the batches, as train() does."""
    # TODO: model.eval(); under torch.no_grad(), the loss and accuracy of every batch.
    raise NotImplementedError('evaluate is not implemented yet. TODO: model.eval(); under torch.no_grad(), the loss and accuracy of every batch.')
