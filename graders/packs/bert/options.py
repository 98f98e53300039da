"""The fine-tuning check's command-line options: what `grade`, `grade batch`, `grade doctor` and
`python -m graders.packs.bert.finetune` (which warms the feature cache ahead) add to
their parsers for this assignment (the `options` module of assignment.toml; graders/options.py
says what the engine asks of such a module).

The feature cache is found the same way everywhere: --feature-cache, else
$TRANSFORMER_GRADER_CACHE, else the per-user (or, for root, system) default, so a cache warmed
ahead is the one `grade` and every job of `grade batch` use.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from graders.options import positive_number

DEFAULT_ENCODER = "bert-base-uncased"


@dataclass(frozen=True)
class FinetuneOptions:
    imdb: Path | None = None  # IMDB: an aclImdb/ folder, parquet, CSV or JSONL; None: smoke mode
    encoder: str | None = None  # a BERT folder or a model name in the local Hugging Face cache
    feature_cache: Path | None = None  # resolved by feature_cache_root() when the grade runs
    device: str | None = None  # cuda or cpu; None: cuda when available
    budget_s: float | None = None  # seconds of training per submission; None: the check's default

    def check_options(self) -> dict:
        return {"imdb": self.imdb, "encoder": self.encoder, "feature_cache": self.feature_cache,
                "device": self.device, "time_budget_s": self.budget_s}

    def resolved(self) -> FinetuneOptions:
        return dataclasses.replace(self, feature_cache=feature_cache_root(self.feature_cache).resolve())


def feature_cache_root(explicit: Path | str | None = None) -> Path:
    """--feature-cache, else $TRANSFORMER_GRADER_CACHE, else the default (finetune/cache.py)."""
    from graders.packs.bert.finetune.cache import default_cache_root

    return Path(explicit) if explicit is not None else default_cache_root()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of one grade (`grade`, `grade batch`, `grade doctor`)."""
    group = add_fine_tuning_arguments(parser)
    group.add_argument("--finetune-budget", type=positive_number, default=None, metavar="S",
                       help="seconds of training allowed per submission (added to the submission's budget)")


def add_fine_tuning_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """--imdb, --encoder, --feature-cache and --device: the same for grading and for warming the
    feature cache ahead, which must find the cache grading uses."""
    group = parser.add_argument_group("fine-tuning (the sentiment part's training check)")
    group.add_argument("--imdb", type=Path, default=None, help="IMDB: an aclImdb/ folder, parquet, CSV or JSONL "
                       "(without it: the small shipped set, in smoke mode)")
    group.add_argument("--encoder", default=None,
                       help=f"a BERT folder or a model name in the local Hugging Face cache (default with --imdb: {DEFAULT_ENCODER})")
    group.add_argument("--feature-cache", type=Path, default=None,
                       help="folder of the shared encoder-feature cache (default: $TRANSFORMER_GRADER_CACHE, "
                            "else ~/.cache/transformer-grader, for root /var/cache/transformer-grader)")
    group.add_argument("--device", choices=("cuda", "cpu"), default=None, help="default: cuda when available")
    return group


def from_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> FinetuneOptions:
    """The options of `args`, validated: a missing IMDB path is a usage error."""
    if args.imdb is not None and not args.imdb.exists():
        parser.error(f"--imdb: no such file or folder: {args.imdb}")
    if args.encoder is not None and args.imdb is None:
        parser.error("--encoder needs --imdb (without IMDB the fine-tuning check runs in smoke mode)")
    # With IMDB, the encoder `python -m graders.packs.bert.finetune --imdb` warms the cache with by default.
    encoder = args.encoder or (DEFAULT_ENCODER if args.imdb is not None else None)
    return FinetuneOptions(imdb=args.imdb, encoder=encoder, feature_cache=args.feature_cache,
                           device=args.device, budget_s=getattr(args, "finetune_budget", None))


def readable_paths(options: dict) -> list[Path]:
    """What the worker of the fine-tuning may read: the feature cache and the encoder."""
    from graders.packs.bert.checks.finetune import worker_readable_paths

    return worker_readable_paths(options)


def prepare_batch(options: dict, folder: Path, *, parts=None, gpus=None) -> dict:
    """The fine-tuning's data, prepared once for every job of a batch that grades the part
    (graders/packs/bert/finetune/record.py): the check options that tell each job where it is."""
    if parts is not None and "finetune" not in parts:
        return {}
    from graders.packs.bert.finetune.record import prepare_for_batch

    return prepare_for_batch(options, folder, gpus=gpus)


def held_out_paths(options: dict) -> list[Path]:
    """What no worker may read: IMDB, whose labels never reach a worker."""
    return [Path(options["imdb"])] if options.get("imdb") else []


def describe_part(part_id: str, options: FinetuneOptions) -> str:
    """What `grade` says when a part starts, besides its name."""
    if part_id != "finetune":
        return ""
    mode = "on IMDB" if options.imdb else "in smoke mode, on the small sentiment set"
    return f" (training {mode}{f', up to {options.budget_s:g} s' if options.budget_s else ''})"
