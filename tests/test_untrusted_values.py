"""The grade always completes and is the student's own, whatever the submission hands back.

What the worker sends is bounded and checked before the grader builds anything of it: no
tensor of a dtype the protocol does not carry (a complex tensor passed a comparison that drops
its imaginary part and then stopped results.json), no more than MAX_TENSORS tensors (many tiny
ones took the grader from 250 MiB to 2 GiB) nor MAX_VALUES values, nothing nested deeper than
MAX_DEPTH. Whatever a check derives from the student's values (a NaN, a complex number) cannot
stop results.json. A malformed questions file is the submission's error, said to the student.
Each layer has its positive control: without it, the attack comes through.
"""

import importlib
import json
import math
import shutil
from pathlib import Path

import jsonschema
import numpy
import pytest
import safetensors.torch
import torch

import graders
from graders.build import REPO_ROOT
from graders.grading import grade, write_results
from graders.sandbox import Limits, ProtocolError, protocol
from graders.sandbox.protocol import LENGTH, MAX_DEPTH, decode, receive_message
from tests.course import REFERENCE_DIR

SCHEMA = json.loads((Path(graders.__file__).parent / "schemas" / "results.schema.json").read_text())
FAST = Limits(call_timeout_s=10, start_timeout_s=60, submission_budget_s=120)
ERROR, PASSED = "error", "passed"


def _checks(results):
    return {c["id"]: c for part in results["parts"] for c in part["checks"]}


def _copy_of_the_solution(tmp_path, name):
    folder = tmp_path / name
    shutil.copytree(REFERENCE_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


# ---------------------------------------------------------------- what the reply pipe may carry


def _reply_bytes(value, payload=b""):
    """A reply as a worker's code could write it to its pipe, whatever its own encoder allows."""
    header = json.dumps({"id": 1, "ok": True, "value": value, "payload_bytes": len(payload)}).encode()
    return LENGTH.pack(len(header)) + header + payload


def _receive(raw, tmp_path):
    path = tmp_path / "reply"
    path.write_bytes(raw)
    with path.open("rb") as pipe:
        return receive_message(pipe.fileno(), max_bytes=Limits().max_message_bytes,
                               max_header_bytes=Limits().max_header_bytes)


def test_the_reply_decoder_refuses_a_tensor_of_a_dtype_the_protocol_does_not_carry(tmp_path):
    payload = safetensors.torch.save({"t0": torch.ones(3, dtype=torch.complex64) * (1 + 1j)})
    raw = _reply_bytes({"__t": "tensor", "k": "t0"}, payload)
    assert safetensors.torch.load(payload)["t0"].is_complex()  # positive control: the library would build it
    with pytest.raises(ProtocolError, match="dtype 'C64'"):
        _receive(raw, tmp_path)


def test_the_reply_decoder_bounds_the_count_of_tensors_before_building_them(tmp_path, monkeypatch):
    many = protocol.MAX_TENSORS + 1
    payload = safetensors.torch.save({f"t{i}": torch.tensor(float(i)) for i in range(many)})
    raw = _reply_bytes([{"__t": "tensor", "k": f"t{i}"} for i in range(many)], payload)
    built = []
    monkeypatch.setattr(safetensors.torch, "load", lambda data: built.append(1) or {})
    with pytest.raises(ProtocolError, match=f"more than {protocol.MAX_TENSORS:,} tensors"):
        _receive(raw, tmp_path)
    assert not built
    monkeypatch.setattr(protocol, "MAX_TENSORS", many)  # positive control: the same reply, unbounded
    _receive(raw, tmp_path)
    assert built


def test_the_reply_decoder_bounds_the_count_of_values_before_parsing_them(tmp_path, monkeypatch):
    many = protocol.MAX_VALUES
    raw = _reply_bytes([[]] * many)
    with pytest.raises(ProtocolError, match=f"more than {many:,} values"):
        _receive(raw, tmp_path)
    monkeypatch.setattr(protocol, "MAX_VALUES", many * 3)  # positive control
    header, _ = _receive(raw, tmp_path)
    assert len(header["value"]) == many


def test_the_reply_decoder_refuses_values_nested_too_deeply():
    nested = []
    for _ in range(MAX_DEPTH + 5):
        nested = [nested]
    with pytest.raises(ProtocolError, match="nested too deeply"):
        decode(nested, {}, lambda *_: None)


COMPLEX_RETURN = '''
import torch as _torch
import graders.sandbox.protocol as _protocol

# The worker runs this code in its own process: its encoder can be made to send anything.
_protocol.SAFETENSORS_DTYPES[_torch.complex64] = "C64"
_honest = scaled_dot_product


def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):
    values, attention = _honest(q, k, v, attn_drop_rate, mask)
    return values.to(_torch.complex64) * (1 + 1j), attention.to(_torch.complex64)
'''


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Casting complex values to real discards the imaginary part")  # the control's
def test_sandbox_a_complex_tensor_returned_fails_its_checks_and_results_are_written(tmp_path, monkeypatch):
    """Positive control: with the payload checked by safetensors alone, the complex tensor passes
    a comparison, and without `jsonable` the grade cannot be written."""
    folder = tmp_path / "complex"  # a student's homework with mistakes: failed checks say what they saw
    shutil.copytree(REPO_ROOT / "fixtures" / "bert" / "submissions" / "seed004_student", folder)
    attention = folder / "attention.py"
    attention.write_text(attention.read_text() + COMPLEX_RETURN)
    results = grade(folder, only_parts=["attention"], limits=FAST)
    write_results(results, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "results.json").read_text())
    jsonschema.validate(written, SCHEMA)
    assert written["status"] == "graded" and written["score"] == 0
    checks = _checks(written)
    assert all(c["status"] == ERROR for c in checks.values()), [(c["id"], c["status"]) for c in checks.values()]
    assert "dtype 'C64', which the protocol does not carry" in checks["attention.matches_reference"]["message"]

    monkeypatch.setattr(protocol, "load_safetensors", safetensors.torch.load)
    monkeypatch.setattr("graders.grading.jsonable", lambda results: results)
    unchecked = grade(folder, only_parts=["attention"], limits=FAST)
    # the imaginary part unseen (four_d_mask: a check this homework passes; its matches_reference fails on its own)
    assert _checks(unchecked)["attention.four_d_mask"]["status"] == PASSED
    with pytest.raises(TypeError, match="complex"):
        write_results(unchecked, tmp_path / "unprotected")


def test_results_are_strict_json_whatever_a_check_put_in_its_details(tmp_path):
    from graders.jsonable import jsonable

    deep = [1]
    for _ in range(200):
        deep = [deep]
    odd = {"nan": math.nan, "inf": [math.inf, -math.inf], "complex": (-1.0) ** 0.5, "tensor": torch.tensor([1 + 2j]),
           "scalar": numpy.float32(0.5), "numpy_nan": numpy.float64("nan"), (1, 2): "a tuple key",
           "object": object(), "deep": deep}
    results = {"status": "graded", "parts": [{"checks": [{"details": odd}]}]}
    with pytest.raises((TypeError, ValueError)):  # positive control: what json.dumps makes of it
        json.dumps(results, allow_nan=False)
    write_results(results, tmp_path)
    details = json.loads((tmp_path / "results.json").read_text())["parts"][0]["checks"][0]["details"]
    assert details["nan"] == "nan" and details["inf"] == ["inf", "-inf"] and details["numpy_nan"] == "nan"
    assert details["complex"] == str((-1.0) ** 0.5) and details["scalar"] == 0.5
    assert details["(1, 2)"] == "a tuple key" and details["tensor"].startswith("tensor(")
    assert jsonable({"kept": [1, 2.5, "x", None, True], 3: "int key"}) == {"kept": [1, 2.5, "x", None, True],
                                                                           3: "int key"}


# ---------------------------------------------------------------- the questions file


DEEP_ARRAYS = "[numeric]\nx = " + "[" * 5000 + "]" * 5000 + "\n"
DEEP_TABLES = "[numeric]\nx = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n"


@pytest.mark.parametrize("text, problem", [
    (DEEP_ARRAYS, "nests arrays or tables more than"),
    (DEEP_TABLES, "nests arrays or tables more than"),
    ("[numeric]\nx = " + "[" * 20 + "1" + "]" * 20 + "\n", "nests arrays or tables more than"),
    ("[written\nlayer_norm = ", "is not valid TOML"),
])
def test_a_malformed_questions_file_is_refused_with_a_reason(text, problem):
    import tomllib

    from graders.answers_file import UnreadableAnswers, parse_answers

    with pytest.raises(UnreadableAnswers, match=problem):
        parse_answers(text, "answers.toml")
    if text in (DEEP_ARRAYS, DEEP_TABLES):  # positive control: the parser alone
        with pytest.raises(RecursionError):
            tomllib.loads(text)


@pytest.mark.slow
def test_sandbox_a_deeply_nested_questions_file_is_the_submission_s_error(tmp_path):
    """It was a RecursionError out of grade(): status error, "the grader failed"."""
    folder = _copy_of_the_solution(tmp_path, "nested")
    (folder / "answers.toml").write_text(DEEP_ARRAYS)
    results = grade(folder, only_parts=["answers", "attention"], limits=FAST)
    jsonschema.validate(results, SCHEMA)
    assert results["status"] == "graded"
    answers = [c for c in _checks(results).values() if c["id"].startswith("answers.")]
    assert answers and all(c["status"] == ERROR and c["message"].startswith("answers.toml nests arrays or tables")
                           for c in answers), [(c["id"], c["status"], c["message"]) for c in answers]
    assert all(c["status"] == PASSED for cid, c in _checks(results).items() if cid.startswith("attention."))


# ---------------------------------------------------------------- the environment blamed for the submission


SABOTAGES = {
    "sys.modules": {"attack.py": "import sys\nsys.modules['transformers'] = None\n\n\ndef build():\n"
                                 "    import transformers\n"},
    "a file of its name": {"transformers.py": "raise ModuleNotFoundError(\"No module named 'transformers'\", "
                                              "name='transformers')\n",
                           "attack.py": "def build():\n    import transformers\n"},
}


def _sabotaged(tmp_path, files):
    folder = tmp_path / "submission"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("bubblewrap", [True, False], ids=["full", "no-namespaces"])
@pytest.mark.parametrize("sabotage", sorted(SABOTAGES))
def test_a_submission_that_breaks_a_grader_dependency_is_charged_for_it(tmp_path, monkeypatch, sabotage, bubblewrap):
    """It was "the grader's environment lacks transformers" and status error. Positive control:
    without the probe of a worker without the submission, the environment is blamed."""
    from graders.sandbox import MissingDependency, StudentError, Worker

    folder = _sabotaged(tmp_path, SABOTAGES[sabotage])
    with Worker(folder, limits=FAST, use_bwrap=bubblewrap, require_isolation=bubblewrap) as worker:
        with pytest.raises(StudentError, match="transformers cannot be imported beside your code"):
            worker.call("attack", "build")
    monkeypatch.setattr(Worker, "_imports_without_the_submission", lambda self, module: False)
    with Worker(folder, limits=FAST, use_bwrap=bubblewrap, require_isolation=bubblewrap) as worker:
        with pytest.raises(MissingDependency, match="lacks transformers"):
            worker.call("attack", "build")


@pytest.mark.slow
def test_a_dependency_the_clean_probe_cannot_import_either_stays_the_environment_s(tmp_path, monkeypatch):
    from graders.sandbox import MissingDependency, Worker, client

    monkeypatch.setattr(client, "dependency_module", lambda module: None)  # the probe imports the package
    monkeypatch.setattr(client, "import_name", lambda distribution: "a_module_this_environment_lacks")
    folder = _sabotaged(tmp_path, SABOTAGES["sys.modules"])
    with Worker(folder, limits=FAST) as worker:
        with pytest.raises(MissingDependency, match="lacks transformers"):
            worker.call("attack", "build")


def test_a_broken_dependency_is_named_by_the_innermost_module_that_raised(tmp_path, monkeypatch):
    """A package that imports lazily (transformers) fails in a module inside it: that module is
    what a probe must import to see the same failure. It was the package's name."""
    from graders import dependencies

    package = tmp_path / "lazydep"
    (package / "models").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "models" / "__init__.py").write_text("")
    (package / "models" / "outer.py").write_text("from lazydep import cache\n")
    (package / "cache.py").write_text("raise OSError('the compiler cache is not writable')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(dependencies, "_dependency_folders", lambda: [("lazydep", f"{package}/")])
    with pytest.raises(OSError) as raised:
        importlib.import_module("lazydep.models.outer")
    assert dependencies.broken_dependency(raised.value) == ("lazydep.cache",
                                                            "OSError: the compiler cache is not writable")
    assert dependencies.dependency_module("lazydep.models.outer") == "lazydep.models.outer"
    for not_a_file_of_it in ("lazydep.absent", "lazydep.models;import os", "os.path", "lazydep." + "x" * 200):
        assert dependencies.dependency_module(not_a_file_of_it) is None


def test_the_probe_imports_the_module_that_failed_not_only_its_package(tmp_path, monkeypatch):
    """A module inside transformers that cannot import in the worker's environment, while
    `import transformers` (lazy) can: the student was told their code broke it (seen on a GPU
    runner, for the reference solution). The probe now imports that module. Positive control:
    the probe of the package alone succeeds, and would blame the submission."""
    from graders.sandbox import MissingDependency, Worker, client

    probed = []

    class EnvironmentWhereOneModuleIsBroken:
        def __init__(self, folder, **settings):
            self.text = (Path(folder) / f"{client.ENVIRONMENT_PROBE}.py").read_text()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def import_module(self, name):
            probed.append(self.text)
            if "modeling_bert" in self.text:
                raise MissingDependency("the grader's environment cannot import it", module="transformers")

    monkeypatch.setattr(client, "EnvironmentProbe", EnvironmentWhereOneModuleIsBroken)
    worker = Worker(tmp_path, limits=FAST)  # never started: only its probe is asked
    assert worker._imports_without_the_submission("transformers.models.bert.modeling_bert") is False
    assert worker._imports_without_the_submission("transformers") is True
    assert worker._imports_without_the_submission("transformers.no_such_module") is True  # its package, cached
    assert probed == ["import transformers.models.bert.modeling_bert\n", "import transformers\n"]
