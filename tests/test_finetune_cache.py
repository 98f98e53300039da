"""Encoder loading (offline only), tokenization, and the feature cache: built once, reused, invalidated."""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from graders.atomic import fill_folder_atomically
from graders.packs.bert.finetune.cache import build_features, hash_texts, open_features
from graders.packs.bert.finetune.data import load_small_sentiment
from graders.packs.bert.finetune.encoder import EncoderNotFound, load_encoder, smoke_encoder_path, tokenize

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def smoke_folder(tmp_path_factory) -> Path:
    return smoke_encoder_path(tmp_path_factory.mktemp("encoders"))


@pytest.fixture(scope="module")
def encoder(smoke_folder):
    return load_encoder(smoke_folder)


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [r.text for r in load_small_sentiment()["valid"]][:64]


class ForwardCounter:
    """Counts the encoder's forward calls: the test's view of whether the cache ran it."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_hook(lambda *_: setattr(self, "calls", self.calls + 1))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


# -----------------------------------------------------------------------------
# encoder

def test_smoke_encoder_is_saved_by_transformers_and_deterministic(smoke_folder, encoder, tmp_path):
    assert (smoke_folder / "config.json").is_file() and (smoke_folder / "tokenizer.json").is_file()
    assert not any(p.requires_grad for p in encoder.model.parameters()) and not encoder.model.training
    again = load_encoder(smoke_encoder_path(tmp_path))  # built afresh elsewhere
    assert again.weights_hash == encoder.weights_hash and again.tokenizer_hash == encoder.tokenizer_hash


def test_tokenize_adds_cls_sep_and_truncates(encoder):
    tokenizer = encoder.tokenizer
    ids, mask = tokenize(tokenizer, ["The plot was dull.", "word " * 600], max_length=512)
    assert ids.shape == mask.shape == (2, 512)
    assert ids[0, 0] == ids[1, 0] == tokenizer.cls_token_id
    short = int(mask[0].sum())
    assert ids[0, short - 1] == tokenizer.sep_token_id and ids[1, 511] == tokenizer.sep_token_id
    assert (ids[0, short:] == tokenizer.pad_token_id).all() and mask[1].all()


def test_unknown_encoder_name_says_where_to_put_it():
    with pytest.raises(EncoderNotFound, match="--encoder"):
        load_encoder("no-such-org/no-such-model")


def test_folder_without_a_model_is_refused(tmp_path):
    with pytest.raises(EncoderNotFound, match="config.json"):
        load_encoder(tmp_path)


def test_name_resolved_in_a_local_hub_cache(smoke_folder, encoder, tmp_path, monkeypatch):
    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--course--tiny-bert"
    shutil.copytree(smoke_folder, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert load_encoder("course/tiny-bert").weights_hash == encoder.weights_hash


# -----------------------------------------------------------------------------
# feature cache

def test_built_once_then_reused(encoder, texts, tmp_path):
    with ForwardCounter(encoder.model) as first:
        built = build_features(encoder, texts, cache_root=tmp_path)
    with ForwardCounter(encoder.model) as second:
        reused = build_features(encoder, texts, cache_root=tmp_path)
    assert first.calls > 0 and built.built_now
    assert second.calls == 0 and not reused.built_now
    assert reused.folder == built.folder and len(reused) == len(texts)
    assert np.array_equal(reused.hidden, built.hidden)
    assert [p.name for p in (tmp_path / "features").iterdir()] == [built.folder.name]  # no temporary left


def test_features_are_the_encoders_output(encoder, texts, tmp_path):
    features = build_features(encoder, texts, cache_root=tmp_path)
    rows = np.array([5, 2, 40])
    ids, mask = tokenize(encoder.tokenizer, [texts[i] for i in rows])
    cached_ids, cached_mask = features.batch_ids(rows)
    assert torch.equal(cached_ids, ids) and torch.equal(cached_mask, mask)
    with torch.no_grad():
        real = encoder.model(input_ids=ids, attention_mask=mask)[0]  # (3, T, H)
    served = features.batch_hidden(rows)
    assert served.shape == real.shape
    torch.testing.assert_close(served, real * mask[..., None], atol=1e-5, rtol=1e-4)


def test_subset_views_the_same_rows(encoder, texts, tmp_path):
    features = build_features(encoder, texts, cache_root=tmp_path)
    part = features.subset([10, 3])
    assert len(part) == 2 and list(part.lengths) == [features.lengths[10], features.lengths[3]]
    assert torch.equal(part.batch_hidden([1]), features.batch_hidden([3]))


def test_a_changed_dataset_rebuilds(encoder, texts, tmp_path):
    first = build_features(encoder, texts, cache_root=tmp_path)
    with ForwardCounter(encoder.model) as counter:
        changed = build_features(encoder, texts[:-1] + [texts[-1] + " Really."], cache_root=tmp_path)
    assert counter.calls > 0 and changed.folder != first.folder
    assert hash_texts(["ab", "c"]) != hash_texts(["a", "bc"])


def test_a_changed_encoder_weight_rebuilds(smoke_folder, encoder, texts, tmp_path):
    first = build_features(encoder, texts, cache_root=tmp_path)
    model = load_encoder(smoke_folder).model
    with torch.no_grad():
        model.encoder.layer[0].output.dense.bias[0] += 0.01
    model.save_pretrained(tmp_path / "edited")
    encoder.tokenizer.save_pretrained(tmp_path / "edited")
    edited = load_encoder(tmp_path / "edited")
    assert edited.weights_hash != encoder.weights_hash and edited.tokenizer_hash == encoder.tokenizer_hash
    with ForwardCounter(edited.model) as counter:
        rebuilt = build_features(edited, texts, cache_root=tmp_path)
    assert counter.calls > 0 and rebuilt.folder != first.folder


def test_other_keys_rebuild(encoder, texts, tmp_path):
    folders = {build_features(encoder, texts, cache_root=tmp_path).folder,
               build_features(encoder, texts, cache_root=tmp_path, max_length=16).folder,
               build_features(encoder, texts, cache_root=tmp_path, storage_dtype="float16").folder}
    assert len(folders) == 3
    short = open_features(sorted(folders)[0])
    assert short.manifest["n_examples"] == len(texts)
    half = build_features(encoder, texts, cache_root=tmp_path, storage_dtype="float16")
    assert half.hidden.dtype == np.float16


def test_a_failed_build_leaves_nothing(tmp_path):
    target = tmp_path / "features" / "abc"

    def fail(folder):
        (folder / "half-written.npy").write_bytes(b"\0")
        raise RuntimeError("encoder crashed")

    with pytest.raises(RuntimeError):
        fill_folder_atomically(target, fail)
    assert os.listdir(tmp_path / "features") == []


def test_open_refuses_a_folder_that_is_not_a_cache(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a feature cache"):
        open_features(tmp_path)


# -----------------------------------------------------------------------------
# grader-side preparation

def test_prepare_imdb_views_one_training_cache(encoder, tmp_path):
    from graders.packs.bert.finetune.data import load_imdb
    from graders.packs.bert.finetune.prepare import prepare_imdb

    reviews = load_small_sentiment()
    for split, source in (("train", "train"), ("test", "test")):
        lines = ['{"text": %s, "label": %d}' % (json.dumps(r.text), r.label) for r in reviews[source][:30]]
        (tmp_path / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    data = prepare_imdb(tmp_path, encoder, n_valid=10, cache_root=tmp_path / "cache")
    assert (len(data.train), len(data.valid), len(data.test)) == (20, 10, 30) and not data.provisional
    assert data.train.folder == data.valid.folder != data.test.folder
    assert not set(data.train.rows) & set(data.valid.rows)
    train_all = load_imdb(tmp_path)["train"]  # rows of the cache follow this order
    for view, labels in ((data.train, data.train_labels), (data.valid, data.valid_labels)):
        texts = [train_all[row].text for row in view.rows]
        assert list(labels) == [train_all[row].label for row in view.rows]
        ids, _ = view.batch_ids(np.array([0]))
        assert torch.equal(ids[0], tokenize(encoder.tokenizer, texts[:1])[0][0])


def test_prepare_small_is_provisional(encoder, tmp_path):
    from graders.packs.bert.finetune.prepare import prepare_small

    data = prepare_small(encoder, cache_root=tmp_path)
    assert data.provisional and (len(data.train), len(data.valid), len(data.test)) == (400, 200, 200)
    assert data.valid_labels.sum() == 100
