"""The fine-tuning check (seed 004, part 7): the student's BERTGRUSentiment, hyper-parameters,
train and evaluate, trained on IMDB over a frozen BERT, scored by validation accuracy, linearly
from 0 at 50% to full marks at 90%.

The frozen encoder runs once per dataset (graders/finetune/cache.py); the worker trains on its
cached features and returns logits, and accuracy is computed here from labels the worker never
sees. Without IMDB and an encoder (a laptop, CI), smoke mode trains on the project's small
sentiment set over a tiny CPU encoder: it shows that the pipeline trains and beats chance, and
the part is marked provisional.
"""

from functools import lru_cache
from pathlib import Path

import torch

from graders.checks.framework import HIDDEN, CheckFailed, CheckOutcome, check
from graders.diagnoses import DIAGNOSES

FULL_BUDGET_S = 600.0
# Smoke mode shows that the loop runs and learns; it cannot show 90%. It keeps the student's
# model, learning rate and code, and trains a fixed amount so that the same submission gets the
# same score on any machine: the budget is only a cap for a runaway loop, never the usual stop.
# The small set has 400 training reviews: batch size 16 gives 25 optimizer steps an epoch.
SMOKE_OVERRIDES = {"batch_size": 16, "n_epochs": 4}
SMOKE_BUDGET_S = 120.0
SMOKE_PROBE_REVIEWS = 64  # the reviews evaluate() is observed on each epoch (the whole set otherwise)
# Above chance by a wide margin on 200 validation reviews (chance is 50% +- 3.5%), reached by
# any sane model in four epochs.
SMOKE_PASS_ACCURACY = 0.6
PROVISIONAL_NOTE = (
    "Provisional: trained in smoke mode on the project's small sentiment set over a tiny CPU encoder. "
    "Batch size 16 and 4 epochs replace the student's for this set. "
    "The real check needs IMDB, bert-base-uncased and a GPU: "
    "grade SUBMISSION --imdb PATH --encoder PATH (docs/finetune.md)."
)
# graders.finetune.training.diagnose ids -> the catalogue's
HARNESS_DIAGNOSES = {
    "no-optimizer-step": "train_no_step",
    "weights-not-moving": "train_no_step",
    "train-mode-missing": "train_no_train_mode",
    "eval-mode-missing": "evaluate_no_eval_mode",
    "no-grad-missing": "evaluate_grad_enabled",
    "sigmoid-before-loss": "double_sigmoid",
    "zero-grad-missing": "zero_grad_missing",
    "attention-mask-missing": "no_attention_mask",
    "accuracy-mismatch": "accuracy_mismatch",
}


@lru_cache(maxsize=4)
def prepared(imdb, encoder, feature_cache, device):
    """Encoder and features for one configuration, built (or found in the cache) once per process."""
    from transformers.utils import logging as transformers_logging

    from graders.finetune.encoder import SMOKE, load_encoder
    from graders.finetune.prepare import prepare_imdb, prepare_small

    transformers_logging.disable_progress_bar()  # the grade's own output stays readable

    smoke = imdb is None or encoder is None
    cache_root = Path(feature_cache) if feature_cache else None
    dtype = torch.float16 if device == "cuda" else torch.float32
    loaded = load_encoder(SMOKE if smoke else encoder, device=device, dtype=dtype, cache_root=cache_root)
    if smoke:
        return loaded, prepare_small(loaded, cache_root=cache_root)
    return loaded, prepare_imdb(imdb, loaded, cache_root=cache_root, progress=True)


def worker_readable_paths(options) -> list[Path]:
    """What the worker reads in this part: the feature cache (made now if new, since a sandbox is
    built before the check runs) and the encoder's folder."""
    from graders.finetune.cache import default_cache_root
    from graders.finetune.encoder import EncoderNotFound, resolve_encoder_path

    cache_root = Path(options["feature_cache"]) if options.get("feature_cache") else default_cache_root()
    try:
        cache_root.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError:
        pass  # the check says so when it builds the features
    paths = [cache_root]
    if options.get("encoder") and options.get("imdb"):
        try:
            paths.append(resolve_encoder_path(options["encoder"]))
        except EncoderNotFound:
            pass  # the check says so when it loads the encoder
    return paths


def _device(options):
    return options.get("device") or ("cuda" if torch.cuda.is_available() else "cpu")


def _frozen_probe(ctx, encoder, data):
    """One small labelled training batch, tokenised here, for the frozen-encoder probe."""
    from graders.finetune.encoder import tokenize
    from graders.finetune.data import load_small_sentiment

    texts = [review.text for review in load_small_sentiment()["train"][:8]]
    ids, mask = tokenize(encoder.tokenizer, texts, max_length=64)
    return ids, mask, torch.tensor(data.train_labels[:8], dtype=torch.float32)


def _views(data):
    return {name: (str(view.folder), view.rows.tolist())
            for name, view in (("train", data.train), ("valid", data.valid), ("test", data.test))}


@check("finetune.accuracy", "Fine-tuned over the frozen encoder: validation accuracy, 0 at 50%, full at 90%",
       visibility=HIDDEN, worker_measured=True)
def finetune_accuracy(ctx):
    # The accuracy is computed here from logits and labels the worker never sees; the frozen-encoder
    # gate before it (`finetune.check_frozen`) is the worker's measurement of where gradients go.
    from graders.finetune.training import accuracy, diagnose, score_accuracy

    options = ctx.options or {}
    device = _device(options)
    encoder, data = prepared(options.get("imdb"), options.get("encoder"), options.get("feature_cache"), device)
    note = PROVISIONAL_NOTE if data.provisional else None
    frozen = ctx.student.task("finetune.check_frozen", str(encoder.source), *_frozen_probe(ctx, encoder, data))
    if frozen["violations"]:
        raise CheckFailed("; ".join(frozen["violations"]), diagnosis="bert_not_frozen", provisional_note=note,
                          details={"numbers": {k: v for k, v in frozen.items() if k != "violations"}})

    budget = options.get("time_budget_s") or (SMOKE_BUDGET_S if data.provisional else FULL_BUDGET_S)
    run = ctx.student.task("finetune.train", features=_views(data), train_labels=torch.tensor(data.train_labels),
                           time_budget_s=budget, device=device, seed=ctx.seed, timeout=budget + 120,
                           overrides=SMOKE_OVERRIDES if data.provisional else {},
                           probe_size=SMOKE_PROBE_REVIEWS if data.provisional else None)
    summary, valid_logits, test_logits = run["summary"], run["valid_logits"], run["test_logits"]
    epochs = summary["epochs"]
    valid_acc = [accuracy(logits, data.valid_labels) for logits in valid_logits]
    test_acc = [accuracy(logits, data.test_labels) for logits in test_logits]
    found = [HARNESS_DIAGNOSES[d["id"]] for d in diagnose(summary) if d["id"] in HARNESS_DIAGNOSES]
    details = {
        "training_curve": {
            "epoch": [e["epoch"] for e in epochs],
            "train_loss": [e["train"]["reported_loss"] for e in epochs],
            "train_acc": [e["train"]["reported_accuracy"] for e in epochs],
            "valid_acc": valid_acc,
            "test_acc": test_acc,
        },
        "numbers": {"stopped": summary["stopped"], "trainable_parameters": summary["trainable_parameters"],
                    "seconds": round(sum(e["seconds"] for e in epochs), 1)},
    }
    if not valid_acc:
        raise CheckFailed(f"no epoch finished ({summary['stopped']}): {summary.get('error') or ''}".strip(),
                          diagnosis=found[0] if found else None, details=details, provisional_note=note)
    best = max(range(len(valid_acc)), key=valid_acc.__getitem__)
    message = (f"best validation accuracy {valid_acc[best]:.1%} (epoch {best + 1} of {len(valid_acc)}), "
               f"test accuracy {test_acc[best]:.1%}")
    if data.provisional:
        fraction = 1.0 if valid_acc[best] >= SMOKE_PASS_ACCURACY else score_accuracy(valid_acc[best])
    else:
        fraction = score_accuracy(valid_acc[best])
    if fraction < 1.0 and found:
        raise CheckFailed(message, diagnosis=found[0], details=details, fraction=fraction, provisional_note=note)
    if found:  # the accuracy made it, but the loop has a known flaw worth fixing
        details["observed_mistakes"] = found
        message += ". Also seen while training: " + " ".join(DIAGNOSES[d] for d in dict.fromkeys(found))
    return CheckOutcome(fraction=fraction, message=message, details=details, provisional_note=note)
