"""The fine-tuning's data prepared once for a whole batch, and the record its jobs read instead.

Without it every job of `grade batch` loads the encoder and reads, hashes and looks up every
review again before its training starts (on a GPU runner, seconds of each submission; with a cold
cache, every job at once running the encoder over the whole dataset). So the batch prepares once,
before its jobs start, in a process of its own (`prepare_for_batch`, which runs this module:
the GPU it used is free again when it ends), exactly as the check prepares
(`prepare.prepare_for_check`), and writes what the check needs into a record:

    python -m graders.packs.bert.finetune.record RECORD OPTIONS_JSON     (grade batch runs it)

A job reads the record back (`read_record`) only where it was made for the job's own options
(IMDB, encoder, feature cache, device) and every feature folder it names still opens as a cache;
otherwise the job prepares as it would have. The record holds the same feature folders, rows and
labels the job would have found, so it saves time and changes nothing that is graded.

The record holds the held-out labels (the check scores against them): it is the grader's alone,
inside the batch's own state folder, which no worker may read (graders/batch/run.py), and it is
JSON, read back as data.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from graders.atomic import write_atomically

from .cache import default_cache_root, open_features
from .prepare import PreparedData, prepare_for_check

FORMAT_VERSION = 1
RECORD_NAME = "finetune-data.json"
OPTION = "prepared_data"  # the check option that names the record
SPLITS = ("train", "valid", "test")
_PREPARING = ("imdb", "encoder", "feature_cache", "device")  # the check options that decide the data


class RecordUnusable(Exception):
    """The record was not made for these options, or what it names is gone; the reason says which."""


def identity(imdb, encoder, feature_cache, device: str) -> dict:
    """What decides the prepared data, as the check resolves it: a record made for another is not used."""
    return {"imdb": None if imdb is None else str(imdb), "encoder": None if encoder is None else str(encoder),
            "feature_cache": str(Path(feature_cache) if feature_cache else default_cache_root()), "device": device}


def write_record(path: Path, data: PreparedData, made_for: dict, seconds: dict) -> None:
    labels = {"train": data.train_labels, "valid": data.valid_labels, "test": data.test_labels}
    record = {
        "format_version": FORMAT_VERSION, "identity": made_for, "provisional": data.provisional, "seconds": seconds,
        "splits": {name: {"folder": str(getattr(data, name).folder), "rows": getattr(data, name).rows.tolist(),
                          "labels": labels[name].tolist()} for name in SPLITS},
    }
    write_atomically(path, json.dumps(record))


def read_record(path: str | Path, made_for: dict) -> PreparedData:
    """The prepared data of the record at `path`, made for `made_for` (`identity`); RecordUnusable
    otherwise."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as error:
        raise RecordUnusable(f"{path} cannot be read ({error})") from None
    if not isinstance(record, dict) or record.get("format_version") != FORMAT_VERSION:
        raise RecordUnusable(f"{path} is not a record of format {FORMAT_VERSION}")
    if record.get("identity") != made_for:
        raise RecordUnusable(f"{path} was made for other options ({record.get('identity')}, not {made_for})")
    features_root = Path(made_for["feature_cache"]) / "features"
    views, labels = {}, {}
    try:
        for name in SPLITS:
            split = record["splits"][name]
            folder = Path(split["folder"])
            if folder.parent != features_root:
                raise RecordUnusable(f"{path}: its {name} features ({folder}) are not in the cache {features_root}")
            rows = np.asarray(split["rows"], dtype=np.int64)
            labels[name] = np.asarray(split["labels"], dtype=np.int64)
            whole = open_features(folder)
            if rows.ndim != 1 or labels[name].shape != rows.shape or not len(rows) \
                    or rows.min() < 0 or rows.max() >= len(whole) or not np.isin(labels[name], (0, 1)).all():
                raise RecordUnusable(f"{path}: its {name} split does not fit its features")
            views[name] = whole.subset(rows)
    except (KeyError, TypeError, ValueError, OSError) as error:  # a record or a cache not as written
        raise RecordUnusable(f"{path}: {type(error).__name__}: {error}") from None
    return PreparedData(views["train"], labels["train"], views["valid"], labels["valid"], views["test"],
                        labels["test"], provisional=bool(record.get("provisional")))


def prepare_for_batch(options: dict, folder: Path, *, gpus: list[str] | None = None) -> dict:
    """Prepare the data once for every job of a batch (in a process of its own, on the batch's
    first GPU if it has some) into a record in `folder`: the check options that name it, or none
    where it could not be made (each job then prepares its own, and says why it fails, if it does)."""
    folder.mkdir(parents=True, exist_ok=True)
    record = folder / RECORD_NAME
    record.unlink(missing_ok=True)  # an earlier run's: the data may have changed since
    given = {key: None if options.get(key) is None else str(options[key]) for key in _PREPARING}
    # transformers' warnings on loading a checkpoint are for each job's log, not the batch's terminal
    environment = {**os.environ, "TRANSFORMERS_VERBOSITY": "error",
                   **({"CUDA_VISIBLE_DEVICES": gpus[0]} if gpus else {})}
    print("preparing the fine-tuning's data once for every job", file=sys.stderr, flush=True)
    # stderr passes through: a cold cache's progress bar, or the one line that says why it failed
    done = subprocess.run([sys.executable, "-m", __name__, str(record), json.dumps(given)], env=environment,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    if done.returncode != 0 or not record.is_file():
        print(f"the fine-tuning's data could not be prepared once for the batch (exit status {done.returncode}); "
              "each job prepares its own", file=sys.stderr)
        return {}
    return {OPTION: str(record)}


def main(argv: list[str]) -> int:
    record, given = Path(argv[0]), json.loads(argv[1])
    device = given["device"] or ("cuda" if torch.cuda.is_available() else "cpu")  # as the check decides it
    started = time.monotonic()
    try:
        data, seconds = prepare_for_check(given["imdb"], given["encoder"], given["feature_cache"], device)
    except (OSError, ValueError) as error:  # data.DataError, encoder.EncoderNotFound, a cache's errors
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    seconds["preparation_s"] = round(time.monotonic() - started, 3)
    write_record(record, data, identity(given["imdb"], given["encoder"], given["feature_cache"], device), seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
