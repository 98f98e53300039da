"""Encoder features computed once and memory-mapped by every later run.

The encoder is frozen, so its output for a review never changes: we run it once per
(encoder weights, tokenizer, dataset, max_length, storage dtype) and every submission of a batch, and
every later grading run, reads the result from disk. On a GPU this turns a 10-minute epoch (BERT
forward at every step, as the notebook does) into seconds of GRU work.

On disk, under <cache root>/features/<key>/ (key: a hash of everything above):

    hidden.npy      (total_tokens, H)   last hidden state, all reviews back to back (ragged)
    input_ids.npy   (total_tokens,)     the token ids, to rebuild batches and check what a model asks for
    offsets.npy     (N + 1,)            review i is rows offsets[i]:offsets[i+1] of the two above
    manifest.json   what was hashed, the encoder's config, sizes, build time

A folder is written under a temporary name and renamed into place when complete, so a crash leaves
no half-built cache and two builders racing for the same key both end with a valid one. No labels
are stored: a cache can be handed to an untrusted worker as it is.

Every review is encoded on its own attention mask, so its features do not depend on which reviews
it happens to share a batch with. Positions past a review's end are served as zeros (the real BERT
would give its output at [PAD] tokens there, which a model should ignore anyway).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from graders.atomic import fill_folder_atomically

if TYPE_CHECKING:
    from .encoder import Encoder

FORMAT_VERSION = 1
_STORAGE_DTYPES = ("float16", "float32")


def default_cache_root() -> Path:
    """$TRANSFORMER_GRADER_CACHE, else ~/.cache/transformer-grader; for root /var/cache/transformer-grader,
    because the sandboxed worker, which reads the features, runs as an unprivileged user that cannot
    enter root's home."""
    root = os.environ.get("TRANSFORMER_GRADER_CACHE")
    if not root:
        root = Path("/var/cache/transformer-grader") if os.geteuid() == 0 else Path.home() / ".cache" / "transformer-grader"
    return Path(root) / "finetune"


@dataclass
class Features:
    """A read-only view of a feature cache: all of its reviews, or a subset of them (`rows`)."""

    folder: Path
    manifest: dict
    hidden: np.ndarray  # (total_tokens, H), memory-mapped
    input_ids: np.ndarray  # (total_tokens,), memory-mapped
    offsets: np.ndarray  # (N_all + 1,)
    rows: np.ndarray  # (N,) which reviews of the cache this view holds, in order
    built_now: bool = False  # True when this call ran the encoder

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def config(self) -> dict:
        return self.manifest["encoder"]["config"]

    @property
    def lengths(self) -> np.ndarray:  # (N,) tokens per review, [CLS] and [SEP] included
        return (self.offsets[self.rows + 1] - self.offsets[self.rows]).astype(np.int64)

    def subset(self, positions) -> Features:
        """The reviews at `positions` of this view, e.g. the training part of a train/valid split."""
        return Features(self.folder, self.manifest, self.hidden, self.input_ids, self.offsets,
                        self.rows[np.asarray(positions, dtype=np.int64)])

    def batch_ids(self, positions: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids (B, T) and attention mask (B, T), padded to the longest review of the batch."""
        spans = self._spans(positions)
        longest = max(end - start for start, end in spans)
        ids = np.full((len(spans), longest), self.manifest["pad_token_id"], dtype=np.int64)
        mask = np.zeros((len(spans), longest), dtype=np.int64)
        for i, (start, end) in enumerate(spans):
            ids[i, : end - start] = self.input_ids[start:end]
            mask[i, : end - start] = 1
        return torch.from_numpy(ids), torch.from_numpy(mask)

    def batch_hidden(self, positions: np.ndarray) -> torch.Tensor:
        """Last hidden states (B, T, H) in the storage dtype, zeros past each review's end."""
        spans = self._spans(positions)
        longest = max(end - start for start, end in spans)
        hidden = np.zeros((len(spans), longest, self.hidden.shape[1]), dtype=self.hidden.dtype)
        for i, (start, end) in enumerate(spans):
            hidden[i, : end - start] = self.hidden[start:end]
        return torch.from_numpy(hidden)

    def _spans(self, positions) -> list[tuple[int, int]]:
        rows = self.rows[np.asarray(positions, dtype=np.int64)]
        return list(zip(self.offsets[rows].tolist(), self.offsets[rows + 1].tolist()))


# -----------------------------------------------------------------------------
# building and opening

def build_features(encoder: Encoder, texts: list[str], *, cache_root: Path | None = None, max_length: int = 512,
                   storage_dtype: str | None = None, max_batch_tokens: int | None = None,
                   progress: bool = False) -> Features:
    """Features of `texts` (in order) from the cache, running the encoder only if they are not there yet.

    storage_dtype: "float16" (default on CUDA) or "float32" (default on CPU).
    max_batch_tokens: padded tokens per encoder batch (default 65,536 on CUDA; 2,048 on CPU, where 8,192
    measured 25% slower, probably because the activations no longer fit in the CPU caches).
    """
    device = next(encoder.model.parameters()).device
    on_cuda = device.type == "cuda"
    storage_dtype = storage_dtype or ("float16" if on_cuda else "float32")
    if storage_dtype not in _STORAGE_DTYPES:
        raise ValueError(f"storage_dtype must be one of {sorted(_STORAGE_DTYPES)}, not {storage_dtype!r}")
    if max_length > encoder.model.config.max_position_embeddings:
        raise ValueError(f"max_length {max_length} exceeds the encoder's {encoder.model.config.max_position_embeddings} positions")
    if not texts:
        raise ValueError("no texts to encode")

    identity = {
        "format_version": FORMAT_VERSION,
        "weights_hash": encoder.weights_hash,
        "tokenizer_hash": encoder.tokenizer_hash,
        "dataset_hash": hash_texts(texts),
        "max_length": max_length,
        "storage_dtype": storage_dtype,
    }
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]
    folder = (cache_root or default_cache_root()) / "features" / key
    if (folder / "manifest.json").is_file():
        return open_features(folder)

    def fill(tmp: Path) -> None:
        started = time.perf_counter()
        _encode_into(tmp, encoder, texts, max_length, storage_dtype,
                     max_batch_tokens or (65_536 if on_cuda else 2_048), progress)
        manifest = {
            **identity,
            "key": key,
            "n_examples": len(texts),
            "encoder": {"source": str(encoder.source), "config": encoder.model.config.to_dict()},
            "hidden_size": encoder.hidden_size,
            "pad_token_id": encoder.tokenizer.pad_token_id,
            "build_seconds": round(time.perf_counter() - started, 3),
            "built_on": str(device),
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, default=str))

    fill_folder_atomically(folder, fill)
    features = open_features(folder)
    features.built_now = True
    return features


def open_features(folder: str | Path) -> Features:
    """Open a built cache read-only (what a worker does with a folder the grader hands it)."""
    folder = Path(folder)
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise FileNotFoundError(f"{folder}: not a feature cache (no manifest.json)")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{folder}: cache format {manifest.get('format_version')}, expected {FORMAT_VERSION}; "
                         "delete it to rebuild")
    hidden = np.load(folder / "hidden.npy", mmap_mode="r")
    input_ids = np.load(folder / "input_ids.npy", mmap_mode="r")
    offsets = np.load(folder / "offsets.npy")
    n, total = manifest["n_examples"], int(offsets[-1])
    if offsets.shape != (n + 1,) or hidden.shape != (total, manifest["hidden_size"]) or input_ids.shape != (total,):
        raise ValueError(f"{folder}: array shapes do not match its manifest; delete it to rebuild")
    return Features(folder, manifest, hidden, input_ids, offsets, np.arange(n, dtype=np.int64))


def hash_texts(texts: list[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))  # length-prefixed: ["ab", "c"] != ["a", "bc"]
        digest.update(data)
    return digest.hexdigest()


# -----------------------------------------------------------------------------
# running the encoder

def _encode_into(folder: Path, encoder: Encoder, texts: list[str], max_length: int, storage_dtype: str,
                 max_batch_tokens: int, progress: bool) -> None:
    ids = encoder.tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]  # N lists
    lengths = np.array([len(x) for x in ids], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    np.save(folder / "offsets.npy", offsets)
    np.save(folder / "input_ids.npy", np.concatenate([np.asarray(x, dtype=np.int32) for x in ids]))
    hidden = np.lib.format.open_memmap(folder / "hidden.npy", mode="w+", dtype=np.dtype(storage_dtype),
                                       shape=(int(offsets[-1]), encoder.hidden_size))

    model, pad_id = encoder.model, encoder.tokenizer.pad_token_id
    device = next(model.parameters()).device
    autocast = torch.autocast("cuda", dtype=torch.float16) if device.type == "cuda" else nullcontext()
    batches = _length_sorted_batches(lengths, max_batch_tokens)
    for rows in _progress(batches, progress, f"encoding {len(texts)} texts"):
        longest = int(lengths[rows].max())
        batch_ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
        for i, row in enumerate(rows):
            batch_ids[i, : lengths[row]] = torch.as_tensor(ids[row])
        mask = (torch.arange(longest)[None, :] < torch.as_tensor(lengths[rows])[:, None]).long()
        with torch.inference_mode(), autocast:
            out = model(input_ids=batch_ids.to(device), attention_mask=mask.to(device))[0]  # (B, T, H)
        out = out.to(getattr(torch, storage_dtype)).cpu().numpy()  # converted before the copy: half the bytes in fp16
        for i, row in enumerate(rows):
            hidden[offsets[row]:offsets[row + 1]] = out[i, : lengths[row]]
    hidden.flush()
    del hidden


def _length_sorted_batches(lengths: np.ndarray, max_batch_tokens: int) -> list[np.ndarray]:
    """Rows grouped longest first, each group at most max_batch_tokens once padded: little padding, and an
    out-of-memory error, if any, shows up on the first batch rather than an hour in."""
    order = np.argsort(-lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        size = max(1, max_batch_tokens // int(lengths[order[start]]))  # the first row is the longest
        batches.append(order[start:start + size])
        start += size
    return batches


def _progress(items: list, enabled: bool, description: str):
    if not enabled:
        return items
    from rich.progress import track

    return track(items, description=description, total=len(items))
