"""Grader side: a dataset and an encoder in, cached features and labels for train / valid / test out
(`python -m graders.packs.bert.finetune` warms the caches ahead: warm.py).

The whole IMDB training set (25,000) is encoded into one cache and viewed as 17,500 train + 7,500
valid rows, so a change of split never re-runs the encoder; the test set has its own cache.
Labels stay here, in the grader: only the training labels go to the worker.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .cache import Features, build_features
from .data import Review, load_imdb, load_small_sentiment, split_positions
from .encoder import SMOKE, Encoder, load_encoder


@dataclass
class PreparedData:
    train: Features
    train_labels: np.ndarray  # (N_train,) 0/1: the only labels a worker sees
    valid: Features
    valid_labels: np.ndarray  # kept in the grader
    test: Features
    test_labels: np.ndarray  # kept in the grader
    provisional: bool  # the small shipped set stands in for IMDB: a score from it is provisional


IMDB_VALID = 7500  # of IMDB's 25,000 training reviews, as the notebook holds out
VALID_SHARE = 0.3  # the same share of a smaller set (a reduced-scale rehearsal, another course's data)


def smoke_mode(imdb, encoder) -> bool:
    """Without IMDB and an encoder the check trains on the small shipped set (provisional)."""
    return imdb is None or encoder is None


def prepare_for_check(imdb, encoder, feature_cache, device: str) -> tuple[PreparedData, dict]:
    """What the fine-tuning check trains on under these options: the encoder loaded as the check
    loads it (fp16 on CUDA), the features found in the cache or built, with the seconds each took.
    The check calls it once per process; a batch once for all its jobs (record.py)."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # the grade's own output stays readable
    smoke = smoke_mode(imdb, encoder)
    cache_root = Path(feature_cache) if feature_cache else None
    dtype = torch.float16 if device == "cuda" else torch.float32
    started = time.monotonic()
    loaded = load_encoder(SMOKE if smoke else encoder, device=device, dtype=dtype, cache_root=cache_root)
    loading = time.monotonic()
    data = prepare_small(loaded, cache_root=cache_root) if smoke else prepare_imdb(imdb, loaded, cache_root=cache_root,
                                                                                   progress=True)
    return data, {"encoder_load_s": round(loading - started, 3), "features_s": round(time.monotonic() - loading, 3)}


def prepare_imdb(imdb_path: str | Path, encoder: Encoder, *, n_valid: int | None = None, seed: int = 1234,
                 cache_root: Path | None = None, max_length: int = 512, progress: bool = False) -> PreparedData:
    splits = load_imdb(imdb_path)
    if n_valid is None:
        n_valid = min(IMDB_VALID, round(VALID_SHARE * len(splits["train"])))
    train_positions, valid_positions = split_positions(splits["train"], n_valid, seed)
    train_all = _features(encoder, splits["train"], cache_root, max_length, progress)
    test = _features(encoder, splits["test"], cache_root, max_length, progress)
    train_all_labels = _labels(splits["train"])
    return PreparedData(train_all.subset(train_positions), train_all_labels[train_positions],
                        train_all.subset(valid_positions), train_all_labels[valid_positions],
                        test, _labels(splits["test"]), provisional=False)


def prepare_small(encoder: Encoder, *, cache_root: Path | None = None, max_length: int = 512,
                  progress: bool = False) -> PreparedData:
    splits = load_small_sentiment()
    names = ("train", "valid", "test")
    everything = _features(encoder, [r for name in names for r in splits[name]], cache_root, max_length, progress)
    views, start = {}, 0
    for name in names:
        views[name] = everything.subset(range(start, start + len(splits[name])))
        start += len(splits[name])
    return PreparedData(views["train"], _labels(splits["train"]), views["valid"], _labels(splits["valid"]),
                        views["test"], _labels(splits["test"]), provisional=True)


def _features(encoder, reviews: list[Review], cache_root, max_length, progress) -> Features:
    return build_features(encoder, [r.text for r in reviews], cache_root=cache_root, max_length=max_length,
                          progress=progress)


def _labels(reviews: list[Review]) -> np.ndarray:
    return np.array([r.label for r in reviews], dtype=np.int64)
