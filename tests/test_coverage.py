"""`grade coverage`: every pack's checks exercise its whole declared contract, graded on the
reference; the report finds the gap a missing check leaves (its positive control); the recorder
binds what the checks send to the contracts' signatures."""

import torch
import pytest

from graders.assignment import load
from graders.checks.space import EVAL, TRAINING, Contract, Situation, size
from graders.cli import main as run
from graders.coverage import CoverageRecorder, gaps, public_names, report_json, report_text
from tests.checks_inprocess import Handle as InProcessHandle
from tests.course import PACKS

GPT = load("gpt")


def recorder_for(*contracts):
    GPT.import_tasks()
    return CoverageRecorder(list(contracts), GPT.reference_module)


def collate_call(recorder, check, batch):
    recorder.record(check, "call", ("gpt", "lm_collate_fn", batch), {}, None)


def pair(n):
    return torch.zeros(n, dtype=torch.long), torch.zeros(n, dtype=torch.long)


def test_a_callable_never_called_and_a_missing_differential_are_gaps():
    recorder = recorder_for(Contract("gpt.lm_collate_fn", "gpt.collate_pads"))
    found = [gap.what for gap in gaps(recorder, registered=["gpt.other"])]
    assert found == ["its differential check gpt.collate_pads did not run", "never called"]
    collate_call(recorder, "gpt.other", [pair(2)])
    found = [gap.what for gap in gaps(recorder, registered=["gpt.other", "gpt.collate_pads"])]
    assert found == ["its differential check gpt.collate_pads never called it"]


def test_a_keyword_left_at_its_default_is_a_gap_until_another_value_is_given():
    recorder = recorder_for(Contract("gpt.GPT.generate", "gpt.greedy"))
    model = InProcessHandle(torch.nn.Linear(1, 1))
    model.type_name = "gpt.GPT"
    prompt = torch.zeros(1, 2, dtype=torch.long)
    recorder.record("gpt.greedy", "call", (model, "generate", prompt, 3), {"temperature": 1.0}, None)
    recorder.record("gpt.greedy", "call", (model, "generate", torch.zeros(2, 3, dtype=torch.long), 3), {}, None)
    left = {gap.what for gap in gaps(recorder, ["gpt.greedy"])}
    assert left == {"temperature never given a value other than its default 1.0",
                    "do_sample never given a value other than its default False",
                    "top_k never given a value other than its default None"}
    recorder.record("gpt.greedy", "call", (model, "generate", prompt, 3, 0.5, True, 2), {}, None)
    assert gaps(recorder, ["gpt.greedy"]) == []


def test_one_shape_of_a_tensor_and_one_shape_per_object_are_gaps():
    contract = Contract("gpt.GPT.forward", "gpt.forward", several_shapes=True,
                        fixed={"targets": "not the point here", "finetune_classify": "not the point here"})
    recorder = recorder_for(contract)
    first, second = InProcessHandle(torch.nn.Linear(1, 1)), InProcessHandle(torch.nn.Linear(1, 2))
    for handle in (first, second):
        handle.type_name = "gpt.GPT"
        recorder.record("gpt.forward", "call", (handle, "__call__", torch.zeros(1, 3, dtype=torch.long)), {}, None)
    assert {gap.what for gap in gaps(recorder, ["gpt.forward"])} == {
        "idx given one shape only", "no object was called on two input shapes"}
    # another shape on one of them: the tensor saw two shapes, and that object two inputs
    recorder.record("gpt.forward", "call", (second, "__call__", torch.zeros(2, 5, dtype=torch.long)), {}, None)
    assert gaps(recorder, ["gpt.forward"]) == []
    recorder = recorder_for(contract)
    third = InProcessHandle(torch.nn.Linear(1, 1))
    third.type_name = "gpt.GPT"
    for shape in ((1, 3), (2, 5)):
        recorder.record("gpt.forward", "call", (third, "__call__", torch.zeros(*shape, dtype=torch.long)), {}, None)
    assert gaps(recorder, ["gpt.forward"]) == []


def test_situations_read_the_bound_call_its_mode_and_its_object_s_constructor():
    seen = []
    contract = Contract("gpt.GPT.forward", "gpt.forward", (
        Situation("a batch of one", lambda c: size(c["idx"], 0) == 1),
        Situation("in eval mode", lambda c: c.mode == EVAL),
        Situation("built with a config", lambda c: seen.append(c.built) or c.built is not None),
    ), fixed={"targets": "-", "finetune_classify": "-", "idx": "-"})
    recorder = recorder_for(contract, Contract("gpt.GPT", "gpt.forward"))
    model = InProcessHandle(torch.nn.Linear(1, 1))
    model.type_name = "gpt.GPT"
    recorder.record("gpt.forward", "construct", ("gpt", "GPT", "the config"), {}, model)
    recorder.record("gpt.forward", "call", (model, "__call__", torch.zeros(2, 3, dtype=torch.long)), {}, None)
    assert recorder.observed["gpt.GPT.forward"].modes == {TRAINING: 1}  # a module is built in training mode
    assert {gap.what for gap in gaps(recorder, ["gpt.forward"])} == {"never: a batch of one", "never: in eval mode"}
    recorder.record("gpt.forward", "call", (model, "eval"), {}, model)
    recorder.record("gpt.forward", "call", (model, "__call__", torch.zeros(1, 3, dtype=torch.long)), {}, None)
    assert gaps(recorder, ["gpt.forward"]) == []
    assert seen[-1] == {"config": "the config"}
    situations = report_json(recorder, [])["contracts"]["gpt.GPT.forward"]["situations"]
    assert situations == {"a batch of one": {"gpt.forward": 1}, "in eval mode": {"gpt.forward": 1},
                          "built with a config": {"gpt.forward": 2}}


def test_a_predicate_that_cannot_read_a_call_does_not_hold_and_does_not_stop_the_recording():
    contract = Contract("gpt.lm_collate_fn", "gpt.collate", (Situation("unreadable", lambda c: c["batch"][9][9]),))
    recorder = recorder_for(contract)
    collate_call(recorder, "gpt.collate", [pair(1)])
    collate_call(recorder, "gpt.collate", [pair(2), pair(3)])
    assert [gap.what for gap in gaps(recorder, ["gpt.collate"])] == ["never: unreadable"]


def test_calls_that_do_not_fit_the_signature_are_counted_apart():
    recorder = recorder_for(Contract("gpt.lm_collate_fn", "gpt.collate"))
    recorder.record("gpt.collate", "call", ("gpt", "lm_collate_fn"), {"no_such_argument": 1}, None)
    assert recorder.observed["gpt.lm_collate_fn"].unbound == 1
    assert report_json(recorder, [])["contracts"]["gpt.lm_collate_fn"]["unbound_calls"] == 1


def test_a_public_name_needs_a_contract_or_a_reason():
    recorder = recorder_for(Contract("gpt.lm_collate_fn", "gpt.collate"))
    collate_call(recorder, "gpt.collate", [pair(1)])
    collate_call(recorder, "gpt.collate", [pair(2)])
    found = [gap for gap in gaps(recorder, ["gpt.collate"], {"gpt.GPTConfig": "given whole"}, public_names(GPT))]
    assert {gap.contract for gap in found} == {"gpt.GPT", "gpt.LanguageModelingDataset", "gpt.generate"}
    assert "gpt.GPTConfig" not in {gap.contract for gap in found}


def test_the_text_report_says_each_parameter_and_every_gap():
    recorder = recorder_for(Contract("gpt.lm_collate_fn", "gpt.collate", (Situation("a batch of two", lambda c: len(c["batch"]) == 2),)))
    collate_call(recorder, "gpt.collate", [pair(1)])
    text = report_text(recorder, gaps(recorder, ["gpt.collate"]), "gpt")
    assert "gpt.lm_collate_fn  [GAP]  1 calls from 1 checks; differential: gpt.collate" in text
    assert "NEVER a batch of two" in text
    assert text.rstrip().endswith("gpt.lm_collate_fn: never: a batch of two")


@pytest.mark.parametrize("pack", [pack.name for pack in PACKS])
def test_every_pack_declares_a_contract_for_every_public_name(pack):
    assignment = load(pack)
    declared = {".".join(contract.name.split(".")[:2]) for contract in assignment.contracts()}
    declared |= {f"{c.module}.{c.name.split('.')[-1]}" for c in assignment.contracts()}
    missing = set(public_names(assignment)) - declared - set(assignment.given_names())
    assert not missing, f"{pack}: public names without a contract: {sorted(missing)}"
    for contract in assignment.contracts():
        checks = {chk.id for part in assignment.registry().values() for chk in part}
        assert contract.differential in checks, f"{contract.name}: no check {contract.differential}"


def test_grade_coverage_refuses_an_unknown_check_or_part(capsys):
    assert run(["coverage", "--assignment", "gpt", "--without", "gpt.no_such_check"]) == 2
    assert "gpt has no check gpt.no_such_check" in capsys.readouterr().err
    assert run(["coverage", "--assignment", "gpt", "--parts", "attention"]) == 2
    assert "gpt has no part attention (it has gpt)" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("pack", [pack.name for pack in PACKS])
def test_every_pack_s_checks_exercise_its_whole_contract(pack, capsys, tmp_path):
    code = run(["coverage", "--assignment", pack, "--unsafe-no-sandbox", "--json", str(tmp_path / "coverage.json")])
    out = capsys.readouterr().out
    assert code == 0, out[-3000:]
    assert "no gaps: every callable, parameter and situation of the contract was exercised" in out
    assert (tmp_path / "coverage.json").read_text().count('"gaps": []') == 1


@pytest.mark.slow
def test_a_pack_with_a_check_left_out_has_a_gap(capsys):
    """The positive control: without the differential check of lm_collate_fn, coverage exits 1 and
    says the function is left uncovered."""
    code = run(["coverage", "--assignment", "gpt", "--unsafe-no-sandbox", "--without", "gpt.collate_pads"])
    out = capsys.readouterr().out
    assert code == 1
    assert "gpt.lm_collate_fn: its differential check gpt.collate_pads did not run" in out
    assert "gpt.lm_collate_fn: never called" in out  # no other check calls it: nothing else covers it
