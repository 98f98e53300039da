"""One options model: every option of `grade` exists in `grade batch` and means the same there,
budgets are computed in one place, and the feature cache is found the same way everywhere."""

import argparse
from pathlib import Path

import pytest

from graders.batch.cli import _batch_parser, config_from_args
from graders.cli import _grade_parser
from graders.packs.bert.finetune.cache import default_cache_root
from graders.options import grading_options
from graders.packs.bert.options import DEFAULT_ENCODER, feature_cache_root
from tests.course import BERT

OPTIONS = ["--seed", "7", "--parts", "attention", "finetune", "--timeout", "12", "--timeout-per-submission", "300",
           "--device", "cpu", "--finetune-budget", "45", "--feature-cache", "/srv/cache", "--unsafe-no-sandbox"]


def option_names(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings} - {"-h", "--help"}


def test_every_option_of_grade_exists_in_grade_batch():
    # --out and --force are of one grade's folder; a batch has its own --out, and resumes what it holds
    missing = option_names(_grade_parser(BERT)) - {"--out", "--force"} - option_names(_batch_parser(BERT))
    assert not missing


def test_an_option_means_the_same_in_grade_and_in_grade_batch(tmp_path):
    grade_parser = _grade_parser(BERT)
    single = grading_options(grade_parser.parse_args(["submission.zip", *OPTIONS]), grade_parser, BERT)
    batch_parser = _batch_parser(BERT)
    config = config_from_args(batch_parser.parse_args([str(tmp_path), "--out", str(tmp_path / "o"), *OPTIONS]),
                              batch_parser, BERT)
    assert config.limits == single.limits()
    assert config.options == single.resolved().check_options()
    assert (config.parts, config.seed, config.unsafe) == (list(single.parts), single.seed, single.unsafe)


def test_the_finetune_budget_extends_the_submission_budget_everywhere():
    parser = _grade_parser(BERT)
    plain = grading_options(parser.parse_args(["s.zip"]), parser, BERT).limits()
    extended = grading_options(parser.parse_args(["s.zip", "--finetune-budget", "45"]), parser, BERT).limits()
    assert extended.submission_budget_s == plain.submission_budget_s + 45
    custom = grading_options(parser.parse_args(["s.zip", "--timeout-per-submission", "300", "--finetune-budget", "45"]),
                             parser, BERT).limits()
    assert custom.submission_budget_s == 345


def test_the_feature_cache_is_the_flag_else_the_environment_else_the_default(monkeypatch, tmp_path):
    monkeypatch.delenv("TRANSFORMER_GRADER_CACHE", raising=False)
    assert feature_cache_root(None) == default_cache_root()
    monkeypatch.setenv("TRANSFORMER_GRADER_CACHE", str(tmp_path / "warm"))
    assert feature_cache_root(None) == tmp_path / "warm" / "finetune"
    assert feature_cache_root(tmp_path / "flag") == tmp_path / "flag"
    # a batch hands its jobs the cache `python -m graders.packs.bert.finetune` warmed, not one of its own
    parser = _batch_parser(BERT)
    config = config_from_args(parser.parse_args([str(tmp_path), "--out", str(tmp_path / "out")]), parser, BERT)
    assert config.options["feature_cache"] == tmp_path / "warm" / "finetune"


@pytest.mark.parametrize("argv, message", [
    (["--parts", "atention"], "no such part: atention"),
    (["--timeout", "0"], "must be more than 0"),
    (["--finetune-budget", "-5"], "must be more than 0"),
    (["--encoder", "bert-base-uncased"], "--encoder needs --imdb"),
    (["--imdb", "/no/such/imdb"], "no such file or folder"),
    (["--device", "tpu"], "invalid choice"),
])
def test_bad_options_are_usage_errors_in_both(argv, message, tmp_path, capsys):
    for parser, positional in ((_grade_parser(BERT), ["s.zip"]), (_batch_parser(BERT), [str(tmp_path), "--out", "o"])):
        with pytest.raises(SystemExit) as exited:
            grading_options(parser.parse_args([*positional, *argv]), parser, BERT)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


def test_imdb_without_an_encoder_means_the_default_encoder(tmp_path):
    parser = _grade_parser(BERT)
    options = grading_options(parser.parse_args(["s.zip", "--imdb", str(tmp_path)]), parser, BERT)
    assert options.assignment.encoder == DEFAULT_ENCODER
    assert Path(options.assignment.imdb) == tmp_path


def test_warming_the_cache_ahead_takes_the_fine_tuning_options_of_grade(tmp_path, capsys):
    """`python -m graders.packs.bert.finetune` (warm the feature cache on a runner) has grade's fine-tuning
    options, spelled and read the same, and fills the cache grade's --feature-cache names."""
    from graders.packs.bert.finetune.warm import command_parser, main

    warm_parser = command_parser()
    fine_tuning = {"--imdb", "--encoder", "--feature-cache", "--device"}
    assert fine_tuning <= option_names(warm_parser) and fine_tuning <= option_names(_grade_parser(BERT))
    argv = ["--imdb", str(tmp_path), "--encoder", "/models/bert", "--feature-cache", str(tmp_path / "c"), "--device", "cpu"]
    warm, graded = warm_parser.parse_args(argv), _grade_parser(BERT).parse_args(["submission.zip", *argv])
    for name in ("imdb", "encoder", "feature_cache", "device"):
        assert getattr(warm, name) == getattr(graded, name), name

    main(["--feature-cache", str(tmp_path / "cache"), "--device", "cpu"])  # the small set, the smoke encoder
    listed = capsys.readouterr().out
    assert str(tmp_path / "cache" / "features") in listed and any((tmp_path / "cache" / "features").iterdir())
