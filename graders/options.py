"""The grading options of `grade`, `grade batch` and the Slurm path: declared, defaulted and
validated here once, so that an option means the same wherever it is given.

    parser = argparse.ArgumentParser()
    add_grading_arguments(parser)
    options = grading_options(parser.parse_args(argv), parser)   # exits 2 on a bad value
    options.limits()          # the sandbox's budgets, the fine-tuning budget included
    options.check_options()   # what graders.grading.grade takes as `options`

The feature cache of the fine-tuning check is found the same way everywhere: --feature-cache,
else $TRANSFORMER_GRADER_CACHE, else the per-user (or, for root, system) default, so a cache
warmed by `python -m graders.finetune` is the one `grade` and every job of `grade batch` use.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ENCODER = "bert-base-uncased"

@dataclass(frozen=True)
class FinetuneOptions:
    imdb: Path | None = None  # IMDB: an aclImdb/ folder, parquet, CSV or JSONL; None: smoke mode
    encoder: str | None = None  # a BERT folder or a model name in the local Hugging Face cache
    feature_cache: Path | None = None  # resolved by feature_cache_root() when the grade runs
    device: str | None = None  # cuda or cpu; None: cuda when available
    budget_s: float | None = None  # seconds of training per submission; None: the check's default


@dataclass(frozen=True)
class GradingOptions:
    parts: tuple[str, ...] | None = None  # None: every part
    seed: int | None = None  # None: the rubric's
    call_timeout_s: float | None = None  # per call into student code; None: Limits' default
    submission_budget_s: float | None = None  # the sandbox's budget for the whole submission
    unsafe: bool = False  # grade without full isolation; every output says so
    count_provisional: bool = False  # provisional (smoke-mode) points in the totals
    finetune: FinetuneOptions = FinetuneOptions()

    def limits(self):
        """The sandbox's limits. Training runs inside the submission's budget, so a fine-tuning
        budget extends it by as much: the parts after it keep the time they always had."""
        from graders.sandbox import Limits

        limits = Limits()
        if self.call_timeout_s is not None:
            limits = dataclasses.replace(limits, call_timeout_s=self.call_timeout_s)
        budget = self.submission_budget_s if self.submission_budget_s is not None else limits.submission_budget_s
        if self.finetune.budget_s is not None:
            budget += self.finetune.budget_s
        return dataclasses.replace(limits, submission_budget_s=budget)

    def check_options(self) -> dict:
        """The options of the checks and totals, as graders.grading.grade takes them."""
        f = self.finetune
        return {"imdb": f.imdb, "encoder": f.encoder, "feature_cache": f.feature_cache, "device": f.device,
                "time_budget_s": f.budget_s, "count_provisional": self.count_provisional}

    def resolved(self) -> GradingOptions:
        """The same options with the feature cache made an absolute path, for a job that runs
        elsewhere (another process, a Slurm node) with another environment."""
        cache = feature_cache_root(self.finetune.feature_cache).resolve()
        return dataclasses.replace(self, finetune=dataclasses.replace(self.finetune, feature_cache=cache))


def feature_cache_root(explicit: Path | str | None = None) -> Path:
    """--feature-cache, else $TRANSFORMER_GRADER_CACHE, else the default (graders.finetune.cache)."""
    from graders.finetune.cache import default_cache_root

    return Path(explicit) if explicit is not None else default_cache_root()


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def add_grading_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of one grade, the same for `grade` and `grade batch`."""
    parser.add_argument("--seed", type=int, default=None, help="grading seed (default: the rubric's; same seed, same score)")
    parser.add_argument("--parts", nargs="+", default=None, metavar="PART", help="grade only these parts")
    parser.add_argument("--timeout", type=_positive, default=None, metavar="S",
                        help="wall-clock seconds per call into student code (default 60)")
    parser.add_argument("--timeout-per-submission", type=_positive, default=None, metavar="S",
                        help="sandbox time budget of one submission (default 600, plus --finetune-budget)")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="grade without full isolation, for code you trust (your own); every output says so")
    parser.add_argument("--count-provisional", action="store_true",
                        help="count provisional points (smoke-mode fine-tuning) in the totals; they are shown apart otherwise")
    group = add_fine_tuning_arguments(parser)
    group.add_argument("--finetune-budget", type=_positive, default=None, metavar="S",
                       help="seconds of training allowed per submission (added to the submission's budget)")


def add_fine_tuning_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """--imdb, --encoder, --feature-cache and --device: the same for grading and for warming the
    feature cache ahead (`python -m graders.finetune`), which must find the cache grading uses."""
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


def validate_parts(parts, parser: argparse.ArgumentParser) -> None:
    """A usage error (exit 2) naming the parts that the rubric does not have."""
    from graders.scoring import load_rubric

    known = [part.id for part in load_rubric().parts]
    unknown = [part for part in parts or () if part not in known]
    if unknown:
        parser.error(f"no such part: {', '.join(unknown)} (the parts are: {', '.join(known)})")


def grading_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> GradingOptions:
    """The options of `args`, validated: an unknown part or a missing IMDB path is a usage error."""
    validate_parts(args.parts, parser)
    if args.imdb is not None and not args.imdb.exists():
        parser.error(f"--imdb: no such file or folder: {args.imdb}")
    if args.encoder is not None and args.imdb is None:
        parser.error("--encoder needs --imdb (without IMDB the fine-tuning check runs in smoke mode)")
    # With IMDB, the encoder `python -m graders.finetune --imdb` warms the cache with by default.
    encoder = args.encoder or (DEFAULT_ENCODER if args.imdb is not None else None)
    return GradingOptions(
        parts=tuple(args.parts) if args.parts else None,
        seed=args.seed,
        call_timeout_s=args.timeout,
        submission_budget_s=args.timeout_per_submission,
        unsafe=args.unsafe_no_sandbox,
        count_provisional=args.count_provisional,
        finetune=FinetuneOptions(imdb=args.imdb, encoder=encoder, feature_cache=args.feature_cache,
                                 device=args.device, budget_s=args.finetune_budget),
    )
