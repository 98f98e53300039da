"""A self-check's worker (`Worker(containment_only=True)`): the portable one. Its protocol runs
over the worker's stdin and stdout, served by threads with timeouts; its output comes through
a thread too, cut at the marker the worker writes before each reply. Crashes, hangs, exits,
large messages and output are handled as in the isolated worker; none of its layers is there."""

from __future__ import annotations

import os
import re
import time

import pytest
import torch

from graders.sandbox import ProtocolError, StudentError, Worker, WorkerCrashed, WorkerTimeout
from graders.sandbox.channel import ThreadedOutputTail

from test_sandbox import STUDENT_FILES, TEST_LIMITS, processes_mentioning, write_package


@pytest.fixture(scope="module")
def contained(tmp_path_factory):
    submission = write_package(tmp_path_factory.mktemp("subs") / "bob hw", STUDENT_FILES)
    with Worker(submission, limits=TEST_LIMITS, require_isolation=False, containment_only=True) as started:
        yield started


def test_values_and_large_tensors_travel_both_ways(contained):
    big = torch.randn(512, 1024)  # 2 MiB: more than any pipe holds, so both threads wait on the other side
    (echoed,), kwargs = contained.call("values", "echo", big, key=(1, "two"))
    assert torch.equal(echoed, big) and kwargs == {"key": (1, "two")}
    assert contained.call("encoder", "same_class") is True


def test_no_layer_but_containment(contained):
    layers = contained.layers.to_json()
    assert layers["bwrap"] is False and layers["sandbox_uid"] is None and layers["audit_hook"] is False
    assert contained.call("hostile", "write", "../outside.txt") == 1  # no audit hook refuses it
    os.remove(contained._workdir / "outside.txt")


def test_student_errors_keep_their_traceback(contained):
    with pytest.raises(StudentError) as caught:
        contained.call("values", "fails")
    assert caught.value.exc_type == "ValueError" and 'File "values.py"' in caught.value.traceback


def test_output_belongs_to_its_request_and_is_bounded(contained):
    assert contained.call("values", "flood", 10) == 10 and contained.last_output == "x" * 10
    assert contained.call("values", "echo", 1) == ((1,), {}) and contained.last_output == ""
    assert contained.call("values", "flood", 5_000_000) == 5_000_000
    assert contained.last_output.startswith("[... ") and contained.last_output.endswith("x" * 1000)
    assert len(contained.last_output) < TEST_LIMITS.max_output_bytes + 100
    assert contained.call("values", "flood", 3) == 3 and contained.last_output == "xxx"


@pytest.mark.parametrize("function, code, expected", [
    ("exit_now", 5, "called sys.exit(5)"),
    ("hard_exit", 6, "exited with status 6"),
])
def test_exits_crash_the_worker_which_restarts(contained, function, code, expected):
    starts = contained.starts
    with pytest.raises(WorkerCrashed, match=re.escape(expected)):
        contained.call("hostile", function, code)
    assert contained.call("values", "echo", 1) == ((1,), {}) and contained.starts == starts + 1


def test_garbage_on_the_reply_channel_is_a_protocol_error(contained):
    with pytest.raises(ProtocolError):
        contained.call("hostile", "garble_channel")
    assert contained.call("values", "echo", 4) == ((4,), {})


@pytest.mark.slow
def test_an_infinite_loop_times_out_and_leaves_no_process(contained):
    old_workdir = str(contained._workdir)
    started = time.monotonic()
    with pytest.raises(WorkerTimeout, match="timed out after 2 s"):
        contained.task("call_many", "hostile", "spin", [((), {})], timeout=2)
    assert time.monotonic() - started < 2 + 3
    assert processes_mentioning(old_workdir) == [] and not os.path.exists(old_workdir)
    assert contained.call("values", "echo", 6) == ((6,), {})


def test_output_cut_at_markers_split_across_reads():
    read, write = os.pipe()
    marker = b"\x00end:1234\x00"
    tail = ThreadedOutputTail(read, limit=100, marker=marker)
    for piece in (b"first", marker[:4], marker[4:] + b"sec", b"ond" + marker, b"rest"):
        os.write(write, piece)
        time.sleep(0.01)
    assert tail.take() == "first" and tail.take() == "second"
    os.close(write)
    assert tail.close(timeout=5) == "rest"


def test_folders_of_graders_without_a_start_time_are_kept_while_their_pid_lives(tmp_path):
    """A grader without /proc (macOS, Windows) names its workers' folders without a start time;
    a grader with /proc must not take them for orphans while that pid is alive."""
    from graders.sandbox import isolation

    alive, gone = tmp_path / f"w-{os.getpid()}--abcdefgh", tmp_path / "w-999999999--abcdefgh"
    alive.mkdir()
    gone.mkdir()
    isolation.remove_orphaned_workdirs(tmp_path)
    assert alive.exists() and not gone.exists()


@pytest.mark.slow
def test_a_worker_started_ahead_is_adopted_and_its_submission_arrives_after(tmp_path):
    from graders.sandbox import spawn

    spawn.prestart_self_check_worker(threads=TEST_LIMITS.threads)
    ahead = spawn._prestarted[()].process
    time.sleep(0.5)  # it has started, knowing nothing of a submission yet
    submission = write_package(tmp_path / "alice hw", STUDENT_FILES)
    with Worker(submission, limits=TEST_LIMITS, require_isolation=False, containment_only=True) as worker:
        assert worker._process is ahead
        assert worker.call("values", "echo", 1) == ((1,), {})
        home = worker.call("values", "environment", "HOME")
        assert home == str(worker._workdir)  # its own folders came with the configuration
    with Worker(submission, limits=TEST_LIMITS, require_isolation=False, containment_only=True) as later:
        assert later._process is not ahead and later.call("values", "echo", 2) == ((2,), {})


def test_a_worker_started_ahead_with_other_settings_is_ended_not_adopted():
    from graders.sandbox import spawn

    spawn.prestart_self_check_worker(threads=TEST_LIMITS.threads + 1)
    ahead = spawn._prestarted[()].process
    assert spawn.take_prestarted(threads=TEST_LIMITS.threads) is None
    assert ahead.poll() is not None  # it saw the end of its configuration pipe and exited


def test_a_worker_started_ahead_with_a_preload_goes_to_the_worker_that_asks_for_it(tmp_path):
    """A part whose tasks import for seconds (BERT) gets a worker of its own, started ahead with
    those modules imported before any configuration; a worker without the preload does not
    take it, and a module that cannot be imported is left to the task that needs it."""
    from graders.sandbox import spawn

    preload = ("xml.dom.minidom", "no_such_module_anywhere")
    spawn.prestart_self_check_worker(threads=TEST_LIMITS.threads, preload=preload)
    ahead = spawn._prestarted[preload].process
    submission = write_package(tmp_path / "carol hw", STUDENT_FILES)
    with Worker(submission, limits=TEST_LIMITS, require_isolation=False, containment_only=True) as plain:
        assert plain._process is not ahead
        assert plain.call("values", "imported", "xml.dom.minidom") is False
    with Worker(submission, limits=TEST_LIMITS, require_isolation=False, containment_only=True,
                preload=preload) as preloaded:
        assert preloaded._process is ahead
        assert preloaded.call("values", "imported", "xml.dom.minidom") is True
        assert preloaded.call("values", "echo", 3) == ((3,), {})
