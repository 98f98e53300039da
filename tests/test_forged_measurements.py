"""Issue 11, item 4: a submission that patches the grader's code inside its own worker cannot buy
points by forging what the worker measures about it.

Each attack is the reference with a bug or a few (BERT not frozen, a train() that never steps, a
dataset that is not a Dataset, a wrong parameter count...) plus an `__init__.py` that, when the
worker imports the submission, replaces the harness tasks the checks used to score (in
graders.sandbox.harness.TASKS and in the pack's tasks module) and the worker's `parameters`
operation with versions reporting the values an honest, correct submission would give. Graded
through the real sandbox, the bugs must still cost their points, and a forged submission must
score like its honest twin; where a check can only rest on such a measurement, results.json and
the report must say so (`worker_measured`).

Everything is built here from reference/ at test time; each submission starts one worker.
"""

import functools
import json
import shutil
from pathlib import Path

import jsonschema
import pytest
import torch

import graders
from tests.course import BERT, CAUSAL_LM, GPT, HOMEWORK, PACKS
from graders.checks.framework import Context, check_seed, run_check
from graders.reports.summary import format_points
from graders.grading import SCHEMA_VERSION, TrackedStudent, part_json, secret_paths
from graders.oracles import ReferenceOracle
from graders.reports.html import render_html
from graders.sandbox import Limits, Worker
from graders.mutants import Edit, apply_edits
from graders.packs.bert.mutants import attention as attention_mutants
from graders.packs.bert.mutants import encoder_bert as bert_mutants
from graders.packs.bert.mutants import sentiment as sentiment_mutants
from graders.packs.causal_lm.mutants import causal_lm as lm_mutants
from graders.packs.gpt.mutants import gpt as gpt_mutants

# Grades or trains for long: left out of the inner loop (README, "Contributing"); CI runs it.
pytestmark = pytest.mark.slow

RESULTS_SCHEMA = json.loads((Path(graders.__file__).parent / "schemas" / "results.schema.json").read_text())

# ---------------------------------------------------------------- the forgeries (run inside the worker)

FORGERY = '''

# ---- the attack: runs in the worker when the submission is first imported
import math as _math
import sys as _sys

import torch as _torch
import torch.nn.functional as _F

_task_modules = [module for name, module in list(_sys.modules.items())
                 if name.startswith("graders.packs.") and name.endswith(".tasks")]
_harness = _sys.modules["graders.sandbox.harness"]
_worker = _sys.modules.get("__main__")


def _replace_task(name, function):
    _harness.TASKS[name] = function
    for module in _task_modules:
        setattr(module, name.replace(".", "_"), function)


def _replace_operation(name, wrap):
    operations = getattr(_worker, "OPERATIONS", None)
    if isinstance(operations, dict) and name in operations:
        operations[name] = wrap(operations[name])


# what an honest, correct submission makes each measurement report

def _frozen_step(ctx, model, text, mask):
    return {"bert_with_grad": [], "bert_changed": [], "head_changed": 6}


class _Steps:
    steps = 3


class _FinishedRun:
    def summary(self):
        return {"epochs": [], "stopped": "completed", "error": None, "trainable_parameters": 0, "gpu_peak_mib": None}


def _run_epoch(ctx, function, model, batches):
    training, n = function == "train", len(batches)
    return {"modes": [training] * n, "grad_enabled": [training] * n, "steps": n if training else 0,
            "head_changed": 6 if training else 0, "result": [0.69, 0.5], "expected": [0.69, 0.5]}


class _QuietWatch:
    def stop(self):
        return {"training": [False] * 3, "grad_enabled": [False] * 3}


def _bert_features(ctx, bert, text, mask):  # what a model that drops the attention mask sees
    bert.eval()
    with _torch.no_grad():
        return bert(text)[0]


def _pretrain_probe(ctx, *, text, vocab_size, seed, scale=20.0, lr=0.1):
    from .bert import mask_inputs

    _torch.manual_seed(seed)
    masked, labels = mask_inputs(text.clone(), vocab_size, vocab_size, 0, 0.15)
    logits = scale * _F.one_hot(masked.long().clamp(0, vocab_size), vocab_size + 1)[..., :vocab_size].float()
    loss = _F.cross_entropy(logits.reshape(-1, vocab_size), labels.flatten(), ignore_index=-100)
    return {"loss": loss.detach(), "inputs": masked, "n_calls": 1, "scale": float(scale), "param_changed": True,
            "grad_none": False}


def _pretrain_fresh(ctx, *, text, vocab_size, **kwargs):
    return {"loss": _torch.tensor(_math.log(vocab_size)), "n_params": 20, "n_changed": 20, "grad_none": False}


def _count_partly_frozen(ctx, sizes, frozen):
    a, b, c = sizes
    return sum([a * b + b, b * c + c][frozen:])


def _dataset_mro(ctx, dataset):
    return [f"{type(dataset).__module__}.{type(dataset).__qualname__}", "torch.utils.data.dataset.Dataset",
            "typing.Generic", "builtins.object"]


def _honest_parameters(original):
    def operation(request):
        answer = original(request)
        params = [p for p in answer["parameters"] if not p["name"].startswith("layer.")]  # an extra layer copy
        tables = [p for p in params if p["name"].split(".")[-1] == "pe"]  # a table trained as a parameter
        params = [p for p in params if p not in tables]
        answer["buffers"] = answer["buffers"] + [dict(name=p["name"], shape=p["shape"], dtype=p["dtype"], persistent=True)
                                                 for p in tables]
        names = {p["name"] for p in params}
        if "qkv_proj.weight" in names and "o_proj.weight" not in names:  # a missing output projection
            qkv = next(p for p in params if p["name"] == "qkv_proj.weight")
            E = qkv["shape"][1]
            params += [dict(name="o_proj.weight", shape=[E, E], dtype=qkv["dtype"], requires_grad=True),
                       dict(name="o_proj.bias", shape=[E], dtype=qkv["dtype"], requires_grad=True)]
        answer["parameters"] = params
        return answer
    return operation


_replace_task("sentiment.frozen_step", _frozen_step)
_replace_task("sentiment.count_steps", lambda ctx, optimizer: _Steps())
_replace_task("sentiment.run_epoch", _run_epoch)
_replace_task("sentiment.watch", lambda ctx, model: _QuietWatch())
_replace_task("sentiment.bert_features", _bert_features)
_replace_task("bert.pretrain_probe", _pretrain_probe)
_replace_task("bert.pretrain_fresh", _pretrain_fresh)
_replace_task("causal_lm.count_partly_frozen", _count_partly_frozen)
_replace_task("gpt.dataset_mro", _dataset_mro)
_replace_operation("parameters", _honest_parameters)
'''

# One step further, against the builders the checks use now: an optimizer that also steps when
# its gradients are cleared, so that a loop that forgets optimizer.step() still moves weights.
ADAPTIVE = '''

def _optimizer(ctx, model, kind, lr, names=None, **options):
    base = {"Adam": _torch.optim.Adam, "AdamW": _torch.optim.AdamW, "SGD": _torch.optim.SGD}[kind]

    class Forged(base):
        def zero_grad(self, set_to_none=True):
            self.step()
            super().zero_grad(set_to_none)

    named = dict(model.named_parameters())
    params = [named[n] for n in names] if names is not None else [p for p in model.parameters() if p.requires_grad]
    return Forged(params, lr=lr, **options)


_replace_task("optimizer", _optimizer)
'''

SENT, LM = sentiment_mutants.SENT, lm_mutants.LM
BERT_NOT_FROZEN = Edit(SENT, "        with torch.no_grad():\n            embedded", "        if True:\n            embedded")
EVALUATE_WITH_GRAD = Edit(SENT, sentiment_mutants.EVAL_NO_GRAD,
                          sentiment_mutants.EVAL_NO_GRAD.replace("    with torch.no_grad():\n", "    if True:\n"))

# One step further, against the grader reading the weights back: a state_dict that shows BERT's
# weights as they were first read, whatever they are now.
STEADY_STATE_DICT = '''

_first_read = {}


def _steady_state_dict(original):
    def operation(request):
        answer = original(request)
        seen = _first_read.setdefault(id(request.object()), {})
        for name, value in list(answer.items()):
            if name.startswith("bert."):
                answer[name] = seen.setdefault(name, value.detach().clone())
        return answer
    return operation


_replace_operation("state_dict", _steady_state_dict)
'''

# bugs whose checks score outputs now: each must cost its points despite the forgeries
SCORED_BUGS = (
    Edit(attention_mutants.F, "        self.o_proj = nn.Linear(embed_dim, embed_dim)\n", ""),
    Edit(attention_mutants.F, "        nn.init.xavier_uniform_(self.o_proj.weight)\n        self.o_proj.bias.data.fill_(0)\n", ""),
    Edit(attention_mutants.F, attention_mutants.PROJECT, "return values"),
    Edit(bert_mutants.BERT, bert_mutants.STEP, ""),
    Edit(SENT, sentiment_mutants.BERT_CALL, "embedded = self.bert(text)[0]"),
    BERT_NOT_FROZEN,
    Edit(SENT, sentiment_mutants.STEP, "        loss.backward()"),
    Edit(SENT, sentiment_mutants.TRAIN_MODE, "    epoch_loss, epoch_acc = 0.0, 0.0"),
    Edit(SENT, sentiment_mutants.EVAL_MODE, "    epoch_loss, epoch_acc = 0.0, 0.0"),
    Edit(LM, lm_mutants.COUNT, "return sum(p.numel() for p in module.parameters())"),
    Edit(LM, lm_mutants.LAYER + "\n", lm_mutants.LAYER.replace("layer = ", "self.layer = ") + "\n        layer = self.layer\n"),
    Edit(gpt_mutants.GPT, gpt_mutants.DATASET_CLASS, "class LanguageModelingDataset:"),
)
SCORED = {  # check -> what its bug is
    "mha.parameter_count": "no output projection (the parameter list forged to show one)",
    "pretraining.step_updates_parameters": "pretrain_step never calls optimizer.step()",
    "pretraining.loss_on_selected_tokens": "pretrain_step never calls optimizer.step()",
    "sentiment.attention_mask": "BERT run without the attention mask (BERT's features forged to match)",
    "sentiment.bert_frozen": "BERT not frozen (the frozen-step report forged)",
    "sentiment.train_steps": "train() never calls optimizer.step()",
    "sentiment.train_mode": "train() never calls model.train()",
    "sentiment.evaluate_mode": "evaluate() never calls model.eval()",
    "causal_lm.count_parameters": "count_parameters counts frozen parameters",
    "causal_lm.model_parameters": "an extra copy of the encoder layer (hidden from the parameter list)",
    "gpt.dataset_is_dataset": "LanguageModelingDataset is a plain class",
}
# sentiment.evaluate_values is not among them: it starts the model in eval mode, so a missing
# model.eval() is charged once, in sentiment.evaluate_mode (tests/test_bert_charged_once.py).

# bugs only a worker measurement can see: their checks are forged into passing, and say so
MEASURED_BUGS = (Edit(bert_mutants.ENC, bert_mutants.PE_BUFFER, "self.pe = nn.Parameter(pe)"),)
MEASURED = {"positional_encoding.buffer": "the positional table is a parameter"}
WORKER_MEASURED = {"positional_encoding.buffer"}


def submission(tmp_path, name, bugs, forgery, pack=HOMEWORK):
    """The pack's reference with those of `bugs` that edit its files, and `forgery` run at import."""
    folder = tmp_path / name
    shutil.copytree(pack.reference_dir, folder, ignore=shutil.ignore_patterns("__pycache__"))
    apply_edits(folder, [bug for bug in bugs if bug.file in pack.expected_files])
    init = folder / "__init__.py"
    init.write_text(init.read_text() + forgery)
    return folder


def grade_checks(folder, check_ids, *, max_examples=5, pack=HOMEWORK):
    """The pack's chosen checks, graded as `grade` grades them: one real sandboxed worker, the
    reference oracle, per-check seeds, results through part_json. Returns ({check id: result
    json}, results)."""
    rubric, registry = pack.rubric, pack.registry()
    parts = []
    with Worker(folder, limits=Limits(), secret_paths=secret_paths(pack), task_modules=pack.task_modules) as worker:
        for part in rubric.parts:
            results = []
            for chk in registry.get(part.id, []):
                if chk.id not in check_ids:
                    continue
                student = TrackedStudent(worker)
                ctx = Context(student, ReferenceOracle(pack), check_seed(rubric.seed, chk.id), max_examples=max_examples)
                results.append(run_check(chk, ctx, before=functools.partial(worker.seed, ctx.seed)))
                student.release()
            if results:
                parts.append(part_json(part, results, registry))
    score = round(sum(p["score"] for p in parts), 4)
    results = {"schema_version": SCHEMA_VERSION, "status": "graded", "reason": None, "mode": "instructor",
               "score": score, "max_score": round(sum(p["max_score"] for p in parts), 4),
               "submission": {"sha256": "0" * 64, "name": folder.name, "kind": "folder", "notes": []},
               "versions": {}, "timings": {}, "parts": parts}
    return {c["id"]: c for p in parts for c in p["checks"]}, results


# ---------------------------------------------------------------- tests


def test_the_checks_that_rest_on_a_worker_measurement_are_the_known_ones():
    flagged = {c.id for pack in PACKS for checks in pack.registry().values() for c in checks if c.worker_measured}
    assert flagged == WORKER_MEASURED


def _checks_of(pack, check_ids):
    return {c.id for checks in pack.registry().values() for c in checks} & set(check_ids)


@pytest.mark.parametrize("pack", [BERT, CAUSAL_LM, GPT], ids=lambda pack: pack.name)
def test_forged_measurements_do_not_hide_the_bugs(tmp_path, pack):
    folder = submission(tmp_path, "attack", SCORED_BUGS, FORGERY + ADAPTIVE, pack)
    checks, _ = grade_checks(folder, _checks_of(pack, SCORED), pack=pack)
    kept = {cid: (c["status"], c["message"]) for cid, c in checks.items() if c["score"] > 0 or c["status"] == "passed"}
    assert not kept, f"forged measurements kept points: {kept}"
    assert set(checks) == _checks_of(pack, SCORED) != set()
    assert {c["status"] for c in checks.values()} == {"failed"}, {cid: c["message"] for cid, c in checks.items()}
    expected_diagnoses = {
        "mha.parameter_count": "output_projection_missing",
        # the forged optimizer steps at zero_grad, on the gradient left from an earlier step: the message
        # says no step on this batch's gradient was taken, and claims no missing optimizer.step()
        "pretraining.step_updates_parameters": None,
        "sentiment.attention_mask": "no_attention_mask",
        "sentiment.bert_frozen": "bert_not_frozen",
        "sentiment.train_steps": None,  # the forged optimizer steps at zero_grad: not every step is missing
        "sentiment.train_mode": "train_no_train_mode",
        "sentiment.evaluate_mode": "evaluate_no_eval_mode",
        "causal_lm.count_parameters": "count_includes_frozen",
        "causal_lm.model_parameters": "extra_layer_copy",
        "gpt.dataset_is_dataset": "dataset_wrong_class",
    }
    for cid, diagnosis in expected_diagnoses.items():
        if cid not in checks:
            continue  # another pack's
        got = (checks[cid]["diagnosis"] or {}).get("id")
        if diagnosis is not None:
            assert got == diagnosis, (cid, got, checks[cid]["message"])


def test_the_same_forgeries_cost_a_correct_submission_nothing(tmp_path):
    """The control: the reference with the report forgeries passes the same checks, so the
    failures above are the bugs', and no check leans on a forged report either way."""
    for pack in PACKS:
        folder = submission(tmp_path, f"honest-{pack.name}", (), FORGERY, pack)
        checks, _ = grade_checks(folder, _checks_of(pack, {*SCORED, *MEASURED}), pack=pack)
        not_passed = {cid: (c["status"], c["message"]) for cid, c in checks.items() if c["status"] != "passed"}
        assert checks and not not_passed


def test_a_forged_measurement_is_marked_in_results_and_report(tmp_path):
    folder = submission(tmp_path, "measured", MEASURED_BUGS, FORGERY)
    checks, results = grade_checks(folder, set(MEASURED) | {"sentiment.gru_summary"}, max_examples=2)
    for cid in MEASURED:  # the forgeries pass them: the results must say what the points rest on
        assert checks[cid]["status"] == "passed", (cid, checks[cid]["message"])
        assert checks[cid]["worker_measured"] is True
    assert checks["sentiment.gru_summary"]["worker_measured"] is False
    jsonschema.validate(results, RESULTS_SCHEMA)
    page = render_html(results)
    assert page.count(">worker-measured</span>") == len(MEASURED)
    # Positional encoding is worth 0 points: no point rests on the measurement, and no word of forging is said.
    assert sum(checks[cid]["max_score"] for cid in MEASURED) == 0 and "Worker-measured:" not in page
    for cid in MEASURED:  # re-weighted (an instructor may), the points that rest on it are said
        checks[cid].update(score=1.0, max_score=1.0)
    page = render_html(results)
    assert "Worker-measured:" in page and f"{format_points(len(MEASURED))} of these points" in page


def test_forged_worker_tasks_score_like_the_honest_twin(tmp_path):
    """Issue 30: BERT left trainable and an evaluate() that builds autograd graphs, with and without
    the forged reports. The frozen check reads the weights back itself; the grad mode no output
    shows is quoted as evidence, never scored: the forgery buys nothing. The positive control is
    the forgery's effect on that evidence: the twin's check quotes it, the forged one's does not."""
    checks = {"sentiment.bert_frozen", "sentiment.evaluate_mode"}
    bugs = (BERT_NOT_FROZEN, EVALUATE_WITH_GRAD)
    honest, _ = grade_checks(submission(tmp_path, "twin", bugs, ""), checks, max_examples=2)
    forged, _ = grade_checks(submission(tmp_path, "forged", bugs, FORGERY + ADAPTIVE), checks, max_examples=2)
    assert {cid: c["score"] for cid, c in forged.items()} == {cid: c["score"] for cid, c in honest.items()}
    assert honest["sentiment.bert_frozen"]["status"] == forged["sentiment.bert_frozen"]["status"] == "failed"
    assert forged["sentiment.bert_frozen"]["diagnosis"]["id"] == "bert_not_frozen"
    assert honest["sentiment.evaluate_mode"]["status"] == forged["sentiment.evaluate_mode"]["status"] == "passed"
    assert "gradients enabled" in honest["sentiment.evaluate_mode"]["message"]
    assert "gradients enabled" not in (forged["sentiment.evaluate_mode"]["message"] or "")
    assert not any(c["worker_measured"] for c in {**honest, **forged}.values())


def test_a_state_dict_that_hides_a_moving_bert_does_not_pass(tmp_path):
    """The read-back weights forged too: BERT's entries show the values first read. The model's own
    output, which changes when the grader loads BERT's weights back, still gives it away. Positive
    control: the forged state_dict did hide the change (the failure is the output's, not the
    weights')."""
    forged, _ = grade_checks(submission(tmp_path, "forged", (BERT_NOT_FROZEN,), FORGERY + STEADY_STATE_DICT),
                             {"sentiment.bert_frozen"}, max_examples=2)
    check = forged["sentiment.bert_frozen"]
    assert check["status"] == "failed" and check["score"] == 0
    assert "though the state_dict showed them unchanged" in check["message"]


def test_no_report_line_without_worker_measured_checks():
    results = {"schema_version": 1, "status": "graded", "mode": "instructor", "score": 1, "max_score": 1,
               "submission": {"sha256": "0" * 64, "name": "x"}, "versions": {}, "timings": {},
               "parts": [{"id": "p", "title": "P", "score": 1, "max_score": 1, "checks": [
                   {"id": "p.c", "title": "c", "status": "passed", "score": 1, "max_score": 1, "worker_measured": False}]}]}
    jsonschema.validate(results, RESULTS_SCHEMA)
    assert "Worker-measured" not in render_html(results)


def test_bert_features_are_transformers_bert():
    """The grader computes the tiny BERT's features itself; they must be what transformers computes."""
    transformers = pytest.importorskip("transformers")
    from graders.packs.bert.checks.sentiment import BERT, bert_features, bert_weights

    model = transformers.BertModel(transformers.BertConfig(**BERT, attn_implementation="eager"), add_pooling_layer=False)
    model.load_state_dict(bert_weights(), strict=True)
    model.eval()
    g = torch.Generator().manual_seed(0)
    text = torch.randint(1, BERT["vocab_size"], (3, 7), generator=g)
    mask = (torch.arange(7)[None, :] < torch.tensor([[7], [4], [1]])).long()
    with torch.no_grad():
        for m in (mask, None):
            assert torch.allclose(model(text * mask, attention_mask=m)[0], bert_features(text * mask, m), atol=1e-5)
