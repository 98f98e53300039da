"""Issue 45: the fine-tuning's data prepared once for a whole batch. The record a job reads gives it
what it would have prepared itself, and is used only where it was made for the job's own options
and what it names is still there: otherwise the job prepares its own."""

import json
import shutil

import numpy as np
import pytest

import graders.packs.bert.checks.finetune as finetune_check
from graders.packs.bert.finetune import record
from graders.packs.bert.finetune.prepare import prepare_for_check
from graders.packs.bert.options import prepare_batch

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke set as the check prepares it, in a cache of its own: (cache root, data)."""
    cache = tmp_path_factory.mktemp("cache")
    data, _ = prepare_for_check(None, None, cache, "cpu")
    return cache, data


def _written(tmp_path, smoke, **changes):
    cache, data = smoke
    path = tmp_path / record.RECORD_NAME
    record.write_record(path, data, record.identity(None, None, cache, "cpu"), {})
    if changes:
        content = json.loads(path.read_text())
        for name, change in changes.items():
            change(content["splits"][name])
        path.write_text(json.dumps(content))
    return path


def _same(a, b, moved=None):
    """The same data; `moved`: (from, to), a copy of the cache elsewhere."""
    for name in ("train", "valid", "test"):
        expected = str(getattr(b, name).folder)
        assert str(getattr(a, name).folder) == (expected.replace(*moved) if moved else expected)
        assert np.array_equal(getattr(a, name).rows, getattr(b, name).rows)
        assert np.array_equal(getattr(a, name).lengths, getattr(b, name).lengths)
        assert np.array_equal(getattr(a, f"{name}_labels"), getattr(b, f"{name}_labels"))
    assert a.provisional == b.provisional


def test_a_record_gives_back_the_data_the_check_prepared(smoke, tmp_path):
    cache, data = smoke
    read = record.read_record(_written(tmp_path, smoke), record.identity(None, None, cache, "cpu"))
    _same(read, data)
    assert read.provisional and len(read.valid_labels) == 200


@pytest.mark.parametrize("other", [
    {"device": "cuda"}, {"imdb": "/data/aclImdb", "encoder": "bert-base-uncased"}, {"feature_cache": "/elsewhere"},
], ids=["device", "dataset", "cache"])
def test_a_record_made_for_other_options_is_not_used(smoke, tmp_path, other):
    cache, _ = smoke
    wanted = {**record.identity(None, None, cache, "cpu"), **other}
    with pytest.raises(record.RecordUnusable, match="other options"):
        record.read_record(_written(tmp_path, smoke), wanted)


@pytest.mark.parametrize("change, why", [
    ({"valid": lambda split: split.update(labels=[2] * len(split["labels"]))}, "does not fit"),
    ({"test": lambda split: split.update(rows=split["rows"][:-1])}, "does not fit"),
    ({"train": lambda split: split.update(rows=[10 ** 6])}, "does not fit"),
    ({"train": lambda split: split.update(folder="/tmp/features/elsewhere")}, "not in the cache"),
    ({"valid": lambda split: split.pop("labels")}, "KeyError"),
], ids=["labels", "lengths", "rows", "folder", "missing"])
def test_a_record_that_does_not_fit_its_features_is_not_used(smoke, tmp_path, change, why):
    cache, _ = smoke
    with pytest.raises(record.RecordUnusable, match=why):
        record.read_record(_written(tmp_path, smoke, **change), record.identity(None, None, cache, "cpu"))


def test_a_record_whose_features_are_gone_is_not_used(smoke, tmp_path):
    cache, data = smoke
    moved = tmp_path / "cache"
    shutil.copytree(cache, moved)
    path = tmp_path / record.RECORD_NAME
    content = json.loads(_written(tmp_path, smoke).read_text())
    content["identity"]["feature_cache"] = str(moved)
    for split in content["splits"].values():
        split["folder"] = split["folder"].replace(str(cache), str(moved))
    path.write_text(json.dumps(content))
    made_for = record.identity(None, None, moved, "cpu")
    _same(record.read_record(path, made_for), data, (str(cache), str(moved)))  # the control: where they are, it is used
    shutil.rmtree(moved / "features")
    with pytest.raises(record.RecordUnusable, match="not a feature cache"):
        record.read_record(path, made_for)


def test_the_check_prepares_its_own_where_the_record_is_unusable(smoke, tmp_path):
    cache, data = smoke
    options = {"feature_cache": cache, record.OPTION: str(_written(tmp_path, smoke))}
    read, timings = finetune_check.preparation(options, "cpu")
    assert timings["prepared_by"] == "the batch"
    _same(read, data)
    (tmp_path / record.RECORD_NAME).write_text("{")
    again, timings = finetune_check.preparation(options, "cpu")
    assert timings["prepared_by"].startswith(("this grade", "an earlier grade"))
    assert "the batch's record was not used" in timings["prepared_by"]
    _same(again, data)


def test_a_batch_without_the_fine_tuning_prepares_nothing(tmp_path):
    assert prepare_batch({}, tmp_path, parts=["attention", "mha"]) == {}
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_batch_prepares_in_a_process_of_its_own_what_the_check_would(smoke, tmp_path, capfd):
    cache, data = smoke
    options = {"imdb": None, "encoder": None, "feature_cache": cache, "device": "cpu", "time_budget_s": None}
    shared = prepare_batch(options, tmp_path / "shared", parts=None)
    assert shared == {record.OPTION: str(tmp_path / "shared" / record.RECORD_NAME)}
    _same(record.read_record(shared[record.OPTION], record.identity(None, None, cache, "cpu")), data)
    assert "once for every job" in capfd.readouterr().err


@pytest.mark.slow
def test_a_batch_whose_data_cannot_be_prepared_says_so_and_leaves_it_to_each_job(tmp_path, capfd):
    options = {"imdb": tmp_path / "no-imdb-here", "encoder": "bert-base-uncased", "feature_cache": tmp_path / "cache",
               "device": "cpu"}
    assert prepare_batch(options, tmp_path / "shared") == {}
    err = capfd.readouterr().err
    assert "EncoderNotFound" in err and "each job prepares its own" in err and "Traceback" not in err
