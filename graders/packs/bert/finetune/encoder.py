"""The frozen encoder (bert-base-uncased on a GPU runner, a tiny BERT in smoke mode) and its tokenizer.

Nothing is ever downloaded: every load passes `local_files_only=True`. A name such as
`bert-base-uncased` is looked up in the local Hugging Face cache (HF_HOME / HF_HUB_CACHE); a path
must be a folder written by `save_pretrained` (config.json, weights, tokenizer files).

The smoke encoder ("smoke") is a 1-layer, 64-wide BERT with random weights from a fixed seed and a
WordPiece vocabulary of the small sentiment set. It is built by code and saved with
`save_pretrained`, then loaded like any other folder, so smoke runs exercise the real loading path.
Random weights carry no knowledge of English, but they keep each token's identity apart and mix in
some of its context, which is all a GRU on top needs to learn the small set. Encoding the whole
small set takes a fraction of a second on one CPU core (a pretrained MiniLM-L6 takes ~10 s;
docs/finetune.md compares them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch

SMOKE = "smoke"
SMOKE_SEED = 1234
_SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


class EncoderNotFound(FileNotFoundError):
    pass


@dataclass
class Encoder:
    model: torch.nn.Module  # a transformers BertModel (or any AutoModel), in eval mode
    tokenizer: object  # its fast tokenizer
    source: Path  # the folder it was loaded from
    weights_hash: str  # sha256 of every tensor in the state dict: part of the feature cache's key
    tokenizer_hash: str  # sha256 of the tokenizer's definition: part of the key too

    @property
    def hidden_size(self) -> int:
        return self.model.config.hidden_size


def load_encoder(name_or_path: str | os.PathLike, *, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float32, cache_root: Path | None = None) -> Encoder:
    """A frozen encoder in eval mode, its tokenizer, and the hashes that key its feature cache."""
    from transformers import AutoModel, AutoTokenizer

    folder = resolve_encoder_path(name_or_path, cache_root=cache_root)
    try:
        model = AutoModel.from_pretrained(folder, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except (OSError, ValueError) as error:
        raise EncoderNotFound(f"{folder}: not a loadable model folder ({error})") from None
    if not tokenizer.is_fast:
        raise EncoderNotFound(f"{folder}: has no fast tokenizer (tokenizer.json or vocab.txt)")
    weights_hash = hash_state_dict(model)  # on the CPU, before moving: one pass over host memory
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    return Encoder(model, tokenizer, folder, weights_hash, hash_tokenizer(tokenizer))


def resolve_encoder_path(name_or_path: str | os.PathLike, *, cache_root: Path | None = None) -> Path:
    """A local folder for `name_or_path`: the smoke encoder, a folder, or a model in the local HF cache."""
    if str(name_or_path) == SMOKE:
        return smoke_encoder_path(cache_root)
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise EncoderNotFound(f"{path}: no config.json here; expected a folder written by save_pretrained")
        return path
    return _from_hf_cache(str(name_or_path))


def tokenize(tokenizer, texts: list[str], max_length: int = 512) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] text [SEP], cut to max_length tokens, padded to the longest: ids (N, T) and mask (N, T), long."""
    encoded = tokenizer(list(texts), truncation=True, max_length=max_length, padding=True, return_tensors="pt")
    return encoded["input_ids"], encoded["attention_mask"]


def hash_tokenizer(tokenizer) -> str:
    """sha256 of what decides the tokens: vocab, normaliser, pre-tokenizer, special tokens. Truncation and
    padding are left out: a fast tokenizer stores the settings of its last call there."""
    serialised = json.loads(tokenizer.backend_tokenizer.to_str())
    serialised.pop("truncation", None)
    serialised.pop("padding", None)
    return hashlib.sha256(json.dumps(serialised, sort_keys=True).encode()).hexdigest()


def hash_state_dict(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.view(torch.uint8).numpy() if tensor.numel() else b"")
    return digest.hexdigest()


# -----------------------------------------------------------------------------
# local Hugging Face cache

def _from_hf_cache(name: str) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(name, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError) as error:
        raise EncoderNotFound(
            f"encoder {name!r} is neither a folder nor in the local Hugging Face cache "
            f"({constants.HF_HUB_CACHE}; set HF_HOME or HF_HUB_CACHE to move it). Put {name} in that cache, "
            f"or save it with `AutoModel.from_pretrained('{name}').save_pretrained(DIR)` plus the tokenizer on a "
            f"machine with network, copy DIR over and pass --encoder DIR. ({type(error).__name__})"
        ) from None


# -----------------------------------------------------------------------------
# the smoke encoder

def smoke_encoder_path(cache_root: Path | None = None) -> Path:
    """The smoke encoder's folder, built on first use (under a second; deterministic for a torch version)."""
    from graders.atomic import fill_folder_atomically

    from .cache import default_cache_root

    # the name is the version: bump it whenever _save_smoke_encoder or the small set changes
    folder = (cache_root or default_cache_root()) / "encoders" / "smoke-v2"
    if not (folder / "config.json").is_file():
        fill_folder_atomically(folder, _save_smoke_encoder)
    return folder


def _save_smoke_encoder(folder: Path) -> None:
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from .data import load_small_sentiment

    texts = [review.text for split in load_small_sentiment().values() for review in split]
    tokenizer = BertTokenizerFast(vocab=_wordpiece_vocab(texts))
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=512)
    with torch.random.fork_rng(devices=[]):  # leave the caller's random stream alone
        torch.manual_seed(SMOKE_SEED)
        model = BertModel(config)
    with torch.no_grad():
        # At BERT's initial scale a word's embedding is no larger than its position's, and after the
        # embedding LayerNorm a GRU on top can hardly tell words apart (60-75% on the small set);
        # ten times wider word embeddings make the token dominate (85-90%).
        model.embeddings.word_embeddings.weight.mul_(10)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _wordpiece_vocab(texts: list[str]) -> dict[str, int]:
    """Every word of `texts` whole, plus single characters and ## continuations so any text tokenizes."""
    words = {w for text in texts for w in re.findall(r"\w+|[^\w\s]", text.lower())}
    characters = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
    pieces = _SPECIAL_TOKENS + sorted(set(characters) | words) + ["##" + c for c in characters]
    return {piece: i for i, piece in enumerate(dict.fromkeys(pieces))}
