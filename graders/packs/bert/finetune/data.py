"""Labelled movie reviews: IMDB in the formats an instructor is likely to have, and the small set.

`load_imdb(path)` looks at what `path` holds and picks the reader:

    aclImdb/                      the original archive unpacked (train/pos, train/neg, test/pos, test/neg)
    *.parquet, folder of them     Hugging Face `datasets` files (hub cache or `save_to_disk`-style)
    *.arrow, folder of them       a local Hugging Face `datasets` cache (`~/.cache/huggingface/datasets/imdb`)
    train.csv + test.csv          or .jsonl; columns text|review and label|sentiment
    one .csv / .jsonl file        with a `split` column (train / test)

Everything comes back sorted by content, so that the train/valid split below does not depend on the
order in which a file system lists files.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from pathlib import Path
from typing import NamedTuple

from graders.assignment import load


class Review(NamedTuple):
    text: str
    label: int  # 1 = positive, 0 = negative


class DataError(ValueError):
    """The data at a path is missing, empty or not in a format we can read; the message says which."""


# Beside the reference solution, not in fixtures/ or graders/: its valid and test labels are held
# out from the student's code, and reference/ is what every layer of the sandbox hides from the
# worker, what a wheel installs beside the grader, and what never goes into the student bundle.
# Written by fixtures/bert/sentiment/make_small_sentiment.py.
SMALL_SENTIMENT_PATH = load(Path(__file__).resolve().parents[1]).reference_dir / "small_sentiment.jsonl"

_TEXT_COLUMNS = ("text", "review")
_LABEL_COLUMNS = ("label", "sentiment")
_LABEL_WORDS = {"0": 0, "1": 1, "neg": 0, "pos": 1, "negative": 0, "positive": 1}
_ACL_FILE_NAME = re.compile(r"^(\d+)_(\d+)\.txt$")  # <id>_<rating>.txt


# -----------------------------------------------------------------------------
# public entry points

def load_imdb(path: str | Path) -> dict[str, list[Review]]:
    """Train and test reviews of IMDB (25,000 each in the real set) from whatever `path` holds."""
    splits = load_reviews(path)
    missing = [name for name in ("train", "test") if not splits.get(name)]
    if missing:
        raise DataError(f"{path}: no {' and no '.join(missing)} reviews found (found splits: {sorted(splits)})")
    return {"train": splits["train"], "test": splits["test"]}


def load_small_sentiment(path: str | Path = SMALL_SENTIMENT_PATH) -> dict[str, list[Review]]:
    """The project's own small set (reference/small_sentiment.jsonl): train, valid and test splits."""
    splits = load_reviews(path)
    if set(splits) != {"train", "valid", "test"}:
        raise DataError(f"{path}: expected splits train, valid and test, found {sorted(splits)}")
    return splits


def load_reviews(path: str | Path) -> dict[str, list[Review]]:
    """Every split found at `path`, each sorted by (text, label)."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: no such file or folder")
    splits = _read_any(path)
    splits = {name: sorted(reviews) for name, reviews in splits.items() if reviews}
    if not splits:
        raise DataError(f"{path}: no labelled reviews found")
    return splits


def split_train_valid(train: list[Review], n_valid: int = 7500, seed: int = 1234) -> tuple[list[Review], list[Review]]:
    """Hold `n_valid` reviews out of `train`; the same reviews every run, whatever their input order."""
    kept, held = split_positions(train, n_valid, seed)
    return [train[i] for i in kept], [train[i] for i in held]


def split_positions(train: list[Review], n_valid: int = 7500, seed: int = 1234) -> tuple[list[int], list[int]]:
    """split_train_valid as positions in `train` (IMDB has duplicate reviews: positions are unambiguous).

    Each review's place is the hash of (seed, label, text): no random generator whose stream could
    change between library versions, and no dependence on how the list was ordered.
    """
    if not 0 < n_valid < len(train):
        raise DataError(f"cannot hold out {n_valid} of {len(train)} training reviews")

    def place(position: int) -> tuple[str, Review]:
        review = train[position]
        digest = hashlib.sha256(f"{seed}\0{review.label}\0{review.text}".encode()).hexdigest()
        return digest, review  # the review itself breaks ties between exact duplicates

    order = sorted(range(len(train)), key=place)
    return order[n_valid:], order[:n_valid]


def parse_label(value: object) -> int:
    """0/1, neg/pos or negative/positive (any case) -> 0/1; anything else raises DataError."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return int(value)
    label = _LABEL_WORDS.get(str(value).strip().lower())
    if label is None:
        raise DataError(f"label {value!r} is not one of 0/1, neg/pos, negative/positive")
    return label


# -----------------------------------------------------------------------------
# format detection

def _read_any(path: Path) -> dict[str, list[Review]]:
    if path.is_file():
        return _read_file(path)
    acl_root = _find_acl_imdb_root(path)
    if acl_root is not None:
        return _read_acl_imdb(acl_root)
    for suffix in (".parquet", ".arrow"):
        files = sorted(path.rglob(f"*{suffix}"))
        if files:
            return _read_split_files(files, _read_arrow_table)
    tables = sorted(p for p in path.iterdir() if p.suffix in (".csv", ".jsonl") and _split_of(p) is not None)
    if tables:
        return _read_split_files(tables, _read_table)
    raise DataError(
        f"{path}: not an aclImdb folder (train/pos, train/neg, test/pos, test/neg), and holds no .parquet, "
        ".arrow, or train/test .csv/.jsonl files"
    )


def _read_file(path: Path) -> dict[str, list[Review]]:
    if path.suffix in (".parquet", ".arrow"):
        return _read_split_files([path], _read_arrow_table)
    if path.suffix in (".csv", ".jsonl"):
        split = _split_of(path)
        rows = _read_table(path)
        if split is not None:
            return {split: [review for review, _ in rows]}
        return _group_by_split_column(path, rows)
    raise DataError(f"{path}: unknown file type {path.suffix!r} (expected .csv, .jsonl, .parquet or .arrow)")


def _split_of(path: Path) -> str | None:
    """train / valid / test from a file name (`train-00000-of-00001.parquet`, `imdb-test.arrow`), or from
    its folder for `save_to_disk`'s `train/data-00000-of-00001.arrow`; None for unsupervised data."""
    names = [path.name, path.parent.name] if path.name.startswith("data-") else [path.name]
    for name in names:
        words = set(re.split(r"[^a-z]+", name.lower()))
        if words & {"unsupervised", "unsup"}:
            return None
        for split, names in (("train", {"train"}), ("valid", {"valid", "validation", "dev"}), ("test", {"test"})):
            if words & names:
                return split
    return None


def _read_split_files(files: list[Path], read) -> dict[str, list[Review]]:
    by_split: dict[str, list[Path]] = {}
    for file in files:
        split = _split_of(file)
        if split is not None:
            by_split.setdefault(split, []).append(file)
    if not by_split:
        raise DataError(f"none of {[str(f) for f in files]} names a split (train, valid or test)")
    for split, split_files in by_split.items():
        folders = sorted({str(f.parent) for f in split_files})
        if len(folders) > 1:  # e.g. two snapshots of the same hub dataset: counting both would double it
            raise DataError(f"{split} files found in several folders {folders}: point at one of them")
    return {split: [review for file in split_files for review, _ in read(file)]
            for split, split_files in by_split.items()}


def _group_by_split_column(path: Path, rows: list[tuple[Review, str | None]]) -> dict[str, list[Review]]:
    splits: dict[str, list[Review]] = {}
    for review, split in rows:
        if split is None:
            raise DataError(f"{path}: a file that does not name its split in its file name needs a `split` column")
        name = _split_of(Path(split))
        if name is None:
            raise DataError(f"{path}: unknown split {split!r} (expected train, valid or test)")
        splits.setdefault(name, []).append(review)
    return splits


# -----------------------------------------------------------------------------
# readers

def _find_acl_imdb_root(path: Path) -> Path | None:
    for root in (path, path / "aclImdb"):
        if (root / "train" / "pos").is_dir() or (root / "test" / "pos").is_dir():
            return root
    return None


def _read_acl_imdb(root: Path) -> dict[str, list[Review]]:
    splits = {}
    for split in ("train", "test"):
        reviews = []
        for polarity, label in (("neg", 0), ("pos", 1)):
            folder = root / split / polarity
            if not folder.is_dir():
                raise DataError(f"{root}: missing folder {split}/{polarity}")
            files = [f for f in folder.iterdir() if _ACL_FILE_NAME.match(f.name)]
            if not files:
                raise DataError(f"{folder}: no review files named <id>_<rating>.txt")
            reviews += [Review(f.read_text(encoding="utf-8"), label) for f in files]
        splits[split] = reviews
    return splits


def _read_arrow_table(path: Path) -> list[tuple[Review, None]]:
    try:
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise DataError(
            f"{path}: reading Hugging Face parquet/arrow files needs pyarrow: "
            "pip install 'transformer-grader[data]' (or pip install pyarrow)"
        ) from None
    try:
        if path.suffix == ".parquet":
            table = pyarrow.parquet.read_table(path)
        else:  # `datasets` writes its cache as Arrow IPC streams
            with pyarrow.ipc.open_stream(path) as stream:
                table = stream.read_all()
    except Exception as error:  # pyarrow raises several unrelated types for a damaged file
        raise DataError(f"{path}: not a readable {path.suffix} file ({error})") from None
    records = table.to_pylist()
    return [(_review_from_record(path, n, record), None) for n, record in enumerate(records, 1)]


def _read_table(path: Path) -> list[tuple[Review, str | None]]:
    """Rows of a .csv (with a header) or a .jsonl file, each with its `split` column when there is one."""
    if path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            records = list(csv.DictReader(f))
        first_line = 2  # the header is line 1
    else:
        records = [_json_line(path, n, line) for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                   if line.strip()]
        first_line = 1
    if not records:
        raise DataError(f"{path}: empty")
    return [(_review_from_record(path, n, record), record.get("split"))
            for n, record in enumerate(records, first_line)]


def _json_line(path: Path, line_number: int, line: str) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise DataError(f"{path}:{line_number}: not valid JSON ({error.msg})") from None
    if not isinstance(record, dict):
        raise DataError(f"{path}:{line_number}: expected a JSON object, got {type(record).__name__}")
    return record


def _review_from_record(path: Path, line_number: int, record: dict) -> Review:
    text = next((record[c] for c in _TEXT_COLUMNS if c in record), None)
    label = next((record[c] for c in _LABEL_COLUMNS if c in record), None)
    where = f"{path}:{line_number}"
    if text is None or label is None:
        raise DataError(f"{where}: needs a text column ({'/'.join(_TEXT_COLUMNS)}) and a label column "
                        f"({'/'.join(_LABEL_COLUMNS)}); found {sorted(record)}")
    if not isinstance(text, str) or not text.strip():
        raise DataError(f"{where}: empty or non-text review")
    try:
        return Review(text, parse_label(label))
    except DataError as error:
        raise DataError(f"{where}: {error}") from None
