"""Review loaders, the deterministic split, and the small sentiment set."""

import importlib.util
import json
from pathlib import Path

import pytest

from graders.build import REPO_ROOT
from graders.packs.bert.finetune.data import (
    SMALL_SENTIMENT_PATH, DataError, Review, load_imdb, load_reviews, load_small_sentiment, parse_label,
    split_train_valid,
)

REVIEWS = {
    ("train", "pos"): ["A joy from start to finish.", "Loved every <br />minute."],
    ("train", "neg"): ["Dull and far too long.", "I walked out."],
    ("test", "pos"): ["Wonderful cast."],
    ("test", "neg"): ["Terrible script."],
}


def make_acl_imdb(root: Path) -> Path:
    """The original archive's layout, with the unsupervised reviews it also holds."""
    for (split, polarity), texts in REVIEWS.items():
        folder = root / "aclImdb" / split / polarity
        folder.mkdir(parents=True)
        for i, text in enumerate(texts):
            (folder / f"{i}_{8 if polarity == 'pos' else 2}.txt").write_text(text)
    unsup = root / "aclImdb" / "train" / "unsup"
    unsup.mkdir()
    (unsup / "0_0.txt").write_text("No label here.")
    (root / "aclImdb" / "imdb.vocab").write_text("a\nb\n")
    return root / "aclImdb"


def expected() -> dict[str, list[Review]]:
    return {split: sorted(Review(text, int(polarity == "pos")) for (s, polarity), texts in REVIEWS.items()
                          if s == split for text in texts) for split in ("train", "test")}


def test_acl_imdb_layout(tmp_path):
    root = make_acl_imdb(tmp_path)
    assert load_imdb(root) == expected()
    assert load_imdb(tmp_path) == expected()  # the folder that holds aclImdb/ works too


def test_csv_pair_with_word_labels(tmp_path):
    for split, data in expected().items():
        lines = ["review,sentiment"] + [f'"{r.text}",{"positive" if r.label else "negative"}' for r in data]
        (tmp_path / f"{split}.csv").write_text("\n".join(lines) + "\n")
    assert load_imdb(tmp_path) == expected()


def test_single_jsonl_with_split_column(tmp_path):
    path = tmp_path / "imdb.jsonl"
    rows = [{"split": split, "text": r.text, "label": ["neg", "pos"][r.label]}
            for split, data in expected().items() for r in reversed(data)]
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    assert load_imdb(path) == expected()


def test_parquet_in_hub_layout(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    snapshot = tmp_path / "datasets--stanfordnlp--imdb" / "snapshots" / "abc123" / "plain_text"
    snapshot.mkdir(parents=True)
    for split, data in expected().items():
        table = pa.table({"text": [r.text for r in data], "label": [r.label for r in data]})
        pq.write_table(table, snapshot / f"{split}-00000-of-00001.parquet")
    pq.write_table(pa.table({"text": ["unlabelled"], "label": [-1]}), snapshot / "unsupervised-00000-of-00001.parquet")
    assert load_imdb(tmp_path / "datasets--stanfordnlp--imdb") == expected()


@pytest.mark.parametrize("file_name", [
    "plain_text/0.0.0/e6281661/imdb-{split}.arrow",  # the datasets library's cache
    "{split}/data-00000-of-00001.arrow",  # Dataset.save_to_disk
])
def test_arrow_files_of_the_datasets_library(tmp_path, file_name):
    pa = pytest.importorskip("pyarrow")

    for split, data in expected().items():
        path = tmp_path / "imdb" / file_name.format(split=split)
        path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.table({"text": [r.text for r in data], "label": [r.label for r in data]})
        with pa.ipc.new_stream(path, table.schema) as writer:
            writer.write_table(table)
    assert load_imdb(tmp_path / "imdb") == expected()


@pytest.mark.parametrize("content, message", [
    ("text,label\n", "empty"),
    ("text,label\nFine film.,maybe\n", ":2: label 'maybe'"),
    ("body,label\nFine film.,1\n", "needs a text column"),
    ("text,label\n,1\n", "empty or non-text"),
])
def test_malformed_csv_is_reported_with_its_line(tmp_path, content, message):
    (tmp_path / "train.csv").write_text(content)
    (tmp_path / "test.csv").write_text("text,label\nOk.,1\n")
    with pytest.raises(DataError, match=message):
        load_imdb(tmp_path)


def test_missing_and_unrecognised_paths(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_imdb(tmp_path / "nowhere")
    with pytest.raises(DataError, match="not an aclImdb folder"):
        load_imdb(tmp_path)
    (tmp_path / "train.jsonl").write_text('{"text": "Good.", "label": 1}\n')
    with pytest.raises(DataError, match="no test reviews"):
        load_imdb(tmp_path)
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(DataError, match="bad.jsonl:1: not valid JSON"):
        load_reviews(tmp_path / "bad.jsonl")


def test_acl_imdb_missing_a_polarity(tmp_path):
    root = make_acl_imdb(tmp_path)
    for f in (root / "test" / "neg").iterdir():
        f.unlink()
    with pytest.raises(DataError, match="no review files"):
        load_imdb(root)


def test_parquet_without_pyarrow_says_what_to_install(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    (tmp_path / "train-00000.parquet").write_bytes(b"")
    with pytest.raises(DataError, match="needs pyarrow"):
        load_reviews(tmp_path)


def test_labels():
    assert [parse_label(v) for v in (0, 1, "0", "1", "neg", "POS", " negative", "Positive", True, 1.0)] == \
        [0, 1, 0, 1, 0, 1, 0, 1, 1, 1]
    with pytest.raises(DataError):
        parse_label(2)


def test_split_is_deterministic_and_independent_of_input_order():
    train = [Review(f"review number {i}", i % 2) for i in range(100)]
    kept, held = split_train_valid(train, n_valid=30)
    assert len(kept) == 70 and len(held) == 30
    assert sorted(kept + held) == sorted(train)
    assert split_train_valid(list(reversed(train)), n_valid=30) == (kept, held)
    assert split_train_valid(train, n_valid=30, seed=7) != (kept, held)
    with pytest.raises(DataError):
        split_train_valid(train, n_valid=100)


def test_split_pinned():
    """The same reviews are held out on every machine, today and in future versions."""
    train = [Review(f"review number {i}", i % 2) for i in range(10)]
    _, held = split_train_valid(train, n_valid=3)
    assert [r.text for r in held] == ["review number 2", "review number 7", "review number 3"]


def test_small_sentiment_set_is_balanced_and_matches_its_generator():
    spec = importlib.util.spec_from_file_location(
        "make_small_sentiment", REPO_ROOT / "fixtures" / "bert" / "sentiment" / "make_small_sentiment.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    assert SMALL_SENTIMENT_PATH.read_text(encoding="utf-8") == generator.render(generator.generate())

    splits = load_small_sentiment()
    assert {name: len(reviews) for name, reviews in splits.items()} == {"train": 400, "valid": 200, "test": 200}
    for reviews in splits.values():
        assert sum(r.label for r in reviews) == len(reviews) // 2
    texts = [r.text for reviews in splits.values() for r in reviews]
    assert len(set(texts)) == len(texts)


def test_the_rehearsal_writes_imdb_that_the_loader_reads(tmp_path):
    """benchmarks/bench_gpu_rehearsal.py's synthetic IMDB: aclImdb's layout, balanced labels, and
    IMDB-like lengths (its GPU run is owed; its data is checked here, on the CPU)."""
    import statistics

    spec = importlib.util.spec_from_file_location("rehearsal", REPO_ROOT / "benchmarks" / "bench_gpu_rehearsal.py")
    rehearsal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rehearsal)
    rehearsal.write_synthetic_imdb(tmp_path, 200)
    splits = load_imdb(tmp_path / "aclImdb")
    assert {name: len(reviews) for name, reviews in splits.items()} == {"train": 200, "test": 200}
    assert sum(r.label for r in splits["train"]) == 100
    words = [len(r.text.split()) for r in splits["train"]]
    assert 120 < statistics.median(words) < 250 and max(words) <= 2500
