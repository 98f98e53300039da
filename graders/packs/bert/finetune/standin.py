"""A stand-in for the frozen BERT: serves cached features instead of running the encoder.

The student's model is built around it exactly as around the real encoder (`BERTGRUSentiment(bert, ...)`)
and calls it the same way (`self.bert(text, attention_mask=mask)[0]`). The batch iterator tells it which
reviews the next batch holds; when the model calls it, it checks that it was handed that batch's ids
unchanged and returns their features. It has no parameters, so nothing of it can be trained, and it
exposes the real encoder's config so that `bert.config.to_dict()['hidden_size']` works.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .cache import Features


class StandInMismatch(RuntimeError):
    """The model asked the encoder for something other than the batch it was given."""


class CachedEncoder(nn.Module):
    def __init__(self, config: dict):
        super().__init__()
        from transformers import AutoConfig

        self.config = AutoConfig.for_model(**config)
        self._features: Features | None = None
        self._positions: np.ndarray | None = None
        self._ids: torch.Tensor | None = None  # (B, T) the batch's token ids, as the model received them
        self._hidden: torch.Tensor | None = None  # (B, T, H) loaded on the first call for the batch
        self.calls = 0
        self.calls_without_attention_mask = 0

    def serve(self, features: Features, positions: np.ndarray, ids: torch.Tensor) -> None:
        """Called by the batch iterator: the next calls are for reviews `positions` of `features`."""
        self._features, self._positions, self._ids, self._hidden = features, positions, ids, None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        from transformers.modeling_outputs import BaseModelOutput

        self._check_request(input_ids)
        self.calls += 1
        self.calls_without_attention_mask += attention_mask is None
        if self._hidden is None:  # a model may call its encoder twice per batch: load once
            # moved in the storage dtype, widened on arrival: fp16 features cross the PCIe bus at half size
            self._hidden = self._features.batch_hidden(self._positions).to(input_ids.device).float()
        return BaseModelOutput(last_hidden_state=self._hidden)  # [0] and .last_hidden_state both work

    def _check_request(self, input_ids: torch.Tensor) -> None:
        if self._ids is None:
            raise StandInMismatch("the encoder was called outside a batch: features are only served for "
                                  "the batches of the training and evaluation iterators")
        if tuple(input_ids.shape) != tuple(self._ids.shape):
            raise StandInMismatch(f"the encoder was called with ids of shape {tuple(input_ids.shape)}, but the "
                                  f"batch's text has shape {tuple(self._ids.shape)}: pass batch.text to self.bert "
                                  "unchanged")
        if not torch.equal(input_ids.to(self._ids.device), self._ids):
            raise StandInMismatch("the encoder was called with ids that differ from the batch's text: pass "
                                  "batch.text to self.bert unchanged")
