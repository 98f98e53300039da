"""Audit-hook denials as integrity flags: the hook records each refusal (bounded), the worker
sends them with its replies, the grader decodes them strictly. No worker is started here."""

from __future__ import annotations

import os

import pytest

from graders.sandbox import ProtocolError, StudentError, audit
from graders.sandbox.client import MAX_AUDIT_DENIALS, Worker


def make_hook(tmp_path, log):
    """The hook, and a function that raises an event from "student code" (a file of the
    worker's directory)."""
    secret = tmp_path / "secret"
    secret.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    hook = audit.make_hook(workdir=str(work), secret_paths=(str(secret),), loaded_libraries=frozenset(),
                           denials=log)
    namespace = {"hook": hook}
    exec(compile("def student(event, args):\n    hook(event, args)\n", str(work / "submission" / "attention.py"),
                 "exec"), namespace)
    return namespace["student"], hook, work, secret


def test_each_denial_of_student_code_is_recorded_with_its_event_and_argument(tmp_path):
    log = audit.DenialLog()
    student, _, work, secret = make_hook(tmp_path, log)
    student("open", (str(work / "notes.txt"), "w", os.O_WRONLY | os.O_CREAT))  # allowed: not recorded
    student("os.listdir", (str(work),))
    assert log.take() is None
    for event, args in [("os.system", (b"ls",)), ("open", (str(secret / "answers.py"), "r", os.O_RDONLY)),
                        ("open", ("/tmp/x", "w", os.O_WRONLY)), ("import", ("_posixsubprocess",)),
                        ("_posixsubprocess.fork_exec", ())]:
        with pytest.raises(PermissionError):
            student(event, args)
    assert log.take() == {"denials": [
        {"event": "os.system", "detail": ""},
        {"event": "open", "detail": str(secret / "answers.py")},
        {"event": "open", "detail": "/tmp/x"},
        {"event": "import", "detail": "_posixsubprocess"},
        {"event": "_posixsubprocess.fork_exec", "detail": ""},
    ], "dropped": 0}
    assert log.take() is None  # taken once, then gone


def test_denials_of_the_graders_own_code_are_not_recorded(tmp_path):
    """The harness imports transformers in the worker, which probes the system with subprocess
    and ctypes: refused, but not the student's doing, so no flag."""
    log = audit.DenialLog()
    _, hook, _, _ = make_hook(tmp_path, log)
    with pytest.raises(PermissionError):
        hook("subprocess.Popen", ("ldconfig", ["ldconfig", "-p"], None, None))
    assert log.take() is None


def test_the_record_is_bounded_and_runs_no_student_code(tmp_path):
    log = audit.DenialLog()
    student, _, _, _ = make_hook(tmp_path, log)
    for i in range(audit.MAX_DENIALS + 50):
        with pytest.raises(PermissionError):
            student("open", (f"/tmp/{i}-" + "x" * 1000, "w", os.O_WRONLY))
    report = log.take()
    assert len(report["denials"]) == audit.MAX_DENIALS and report["dropped"] == 50
    assert all(len(d["detail"]) <= audit.MAX_DETAIL_CHARS for d in report["denials"])

    class Sneaky(str):
        def __repr__(self):
            raise AssertionError("the hook ran the student's __repr__")

        __str__ = __format__ = __repr__

    with pytest.raises(PermissionError):
        student("import", (Sneaky("_posixsubprocess"), None, None, None, None))
    assert log.take()["denials"] == [{"event": "import", "detail": "<Sneaky>"}]


def test_a_direct_fork_exec_raises_an_event_and_refuses(monkeypatch):
    import _posixsubprocess
    import subprocess
    import sys

    monkeypatch.setattr(_posixsubprocess, "fork_exec", _posixsubprocess.fork_exec)
    monkeypatch.setattr(subprocess, "_fork_exec", subprocess._fork_exec)
    events = []
    monkeypatch.setattr(sys, "audit", lambda event, *args: events.append(event))
    audit.disable_fork_exec()
    with pytest.raises(PermissionError):
        _posixsubprocess.fork_exec()
    assert events == ["_posixsubprocess.fork_exec"]


# ----------------------------------------------------------------------------- the grader's side


@pytest.fixture
def worker(tmp_path):
    """A Worker that is never started: only its reply decoding is used."""
    w = Worker.__new__(Worker)
    w.audit_denials, w.audit_denials_dropped = [], 0
    w.last_output, w.starts = "", 1
    return w


def report(n=1, dropped=0, **entry):
    return {"denials": [{"event": "open", "detail": f"/tmp/{i}", **entry} for i in range(n)], "dropped": dropped}


def test_denials_travel_with_any_reply_and_accumulate_bounded(worker):
    assert worker._interpret({"id": 3, "ok": True, "value": 7, "audit": report(2)}, {}, 3) == 7
    with pytest.raises(StudentError):
        worker._interpret({"id": 4, "ok": False, "audit": report(1, dropped=5),
                           "error": {"kind": "student", "type": "PermissionError", "message": "m", "traceback": "t",
                                     "debug_traceback": "d"}}, {}, 4)
    assert worker.audit_denials == [{"event": "open", "detail": "/tmp/0"}, {"event": "open", "detail": "/tmp/1"},
                                    {"event": "open", "detail": "/tmp/0"}]
    assert worker.audit_denials_dropped == 5
    for request in range(5, 8):
        worker._interpret({"id": request, "ok": True, "value": None, "audit": report(audit.MAX_DENIALS)}, {}, request)
    assert len(worker.audit_denials) == MAX_AUDIT_DENIALS
    assert worker.audit_denials_dropped == 5 + 3 * audit.MAX_DENIALS + 3 - MAX_AUDIT_DENIALS


@pytest.mark.parametrize("bad", [
    None, [], "open", {"denials": []}, {"denials": [], "dropped": 0, "score": 8},
    {"denials": [], "dropped": -1}, {"denials": [], "dropped": True}, {"denials": [], "dropped": 1.0},
    {"denials": {}, "dropped": 0}, report(audit.MAX_DENIALS + 1), {"denials": ["open"], "dropped": 0},
    report(detail="x" * (audit.MAX_DETAIL_CHARS + 1)), report(event=""), report(event="e" * 1000),
    report(event=3), report(extra="x"), {"denials": [{"event": "open"}], "dropped": 0},
])
def test_a_malformed_audit_report_is_a_protocol_error(worker, bad):
    with pytest.raises(ProtocolError):
        worker._interpret({"id": 1, "ok": True, "value": None, "audit": bad}, {}, 1)
    assert worker.audit_denials == []
