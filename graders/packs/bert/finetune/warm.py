"""Warm the fine-tuning's feature caches ahead of grading (the pack's options are read here, so
that prepare.py, which the check imports, does not import them back):

    python -m graders.packs.bert.finetune --imdb PATH --encoder PATH --device cuda    # on a runner
    python -m graders.packs.bert.finetune                                             # the smoke set, smoke encoder
"""

from __future__ import annotations

import argparse
import time

import torch

from graders.packs.bert.options import DEFAULT_ENCODER, add_fine_tuning_arguments, feature_cache_root

from .encoder import load_encoder
from .prepare import prepare_imdb, prepare_small


def command_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m graders.packs.bert.finetune",
                                     description="Build (or find) the feature caches of the fine-tuning check.")
    add_fine_tuning_arguments(parser)
    parser.add_argument("--max-length", type=int, default=512)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = command_parser()
    args = parser.parse_args(argv)
    if args.encoder is not None and args.imdb is None:
        parser.error("--encoder needs --imdb (without IMDB the fine-tuning check uses the smoke encoder)")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    cache_root = feature_cache_root(args.feature_cache)

    started = time.perf_counter()
    encoder = load_encoder(args.encoder or (DEFAULT_ENCODER if args.imdb else "smoke"), device=device,
                           cache_root=cache_root)
    if args.imdb:
        data = prepare_imdb(args.imdb, encoder, cache_root=cache_root, max_length=args.max_length, progress=True)
    else:
        data = prepare_small(encoder, cache_root=cache_root, max_length=args.max_length, progress=True)
    print(f"encoder {encoder.source} on {device}; {time.perf_counter() - started:.1f} s in all")
    for name in ("train", "valid", "test"):
        features = getattr(data, name)
        print(f"  {name:5} {len(features):6} reviews, {int(features.lengths.sum()):10} tokens   {features.folder}")
