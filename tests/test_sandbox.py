"""The sandboxed worker: protocol, isolation layers, failure handling.

One worker per layer configuration is shared by the tests of this module; tests that kill it
check that the next request brings up a fresh one.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import socket
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from graders.sandbox import (BudgetExhausted, Handle, Limits, ProtocolError, RequestError,
                             StudentError, Worker, WorkerCrashed, WorkerTimeout)
from graders.sandbox import audit, isolation
from graders.sandbox.protocol import (MessageEncoder, decode, load_safetensors, parse_header,
                                      receive_message, safetensors_buffers)

GiB = 1 << 30
BWRAP = isolation.find_bwrap()
BWRAP_WORKS = BWRAP is not None and isolation.bwrap_works(BWRAP, os.geteuid() == 0)
needs_bwrap = pytest.mark.skipif(not BWRAP_WORKS, reason="bubblewrap (bwrap) is not installed or "
                                 "cannot create namespaces on this machine")
# Small enough to reach quickly, large enough for torch.
TEST_LIMITS = Limits(call_timeout_s=5.0, address_space_bytes=4 * GiB, max_output_bytes=4_000)

STUDENT_FILES = {
    "attention.py": """
        import math
        import torch

        def scaled_dot_product(q, k, v, attn_drop_rate=0.1, mask=None):
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if mask is not None:
                scores = scores.masked_fill(mask.bool(), float("-inf"))
            attention = torch.nn.functional.dropout(torch.softmax(scores, dim=-1), attn_drop_rate)
            return attention @ v, attention

        class MultiHeadAttention(torch.nn.Module):
            def __init__(self, embed_dim, n_heads, attn_drop_rate=0.0):
                super().__init__()
                self.qkv_proj = torch.nn.Linear(embed_dim, 3 * embed_dim)
                self.o_proj = torch.nn.Linear(embed_dim, embed_dim)
                self.register_buffer("scale", torch.tensor(1.0), persistent=False)

            def forward(self, embedding, mask=None):
                return self.o_proj(embedding)
        """,
    "encoder.py": """
        from .attention import MultiHeadAttention
        import attention

        def same_class():
            return attention.MultiHeadAttention is MultiHeadAttention
        """,
    "values.py": """
        import os
        import sys
        import torch

        def echo(*args, **kwargs):
            return args, kwargs

        def environment(name):
            return os.environ.get(name)

        def imported(name):
            return name in sys.modules

        class Liar(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                return torch.zeros(1)  # every torch operation on it "returns" zeros

        def liar():
            return torch.arange(4.0).as_subclass(Liar)

        class Counter:
            def __init__(self, start):
                self.count = start

            def increment(self, by=1):
                self.count += by
                return self.count

        def total(*counters):
            return sum(counter.count for counter in counters)

        def fails():
            return helper()

        def helper():
            raise ValueError("shapes do not match")

        def flood(n):
            print("x" * n, end="", flush=True)
            return n

        def where():
            return __file__, os.getcwd(), os.environ.get("HOME")
        """,
    "hostile.py": """
        import os
        import sys

        def exit_now(code):
            sys.exit(code)

        def hard_exit(code):
            os._exit(code)

        def spin():
            while True:
                pass

        def allocate_tensor(n_bytes):
            import torch
            return torch.empty(n_bytes, dtype=torch.uint8).shape

        def allocate_bytes(n_bytes):
            return len(bytearray(n_bytes))

        def fork():
            os.fork()

        def run(command):
            import subprocess
            subprocess.run(command)

        def fork_exec_directly():
            import _posixsubprocess
            _posixsubprocess.fork_exec([b"/bin/true"])

        def reimport_fork_exec():
            del sys.modules["_posixsubprocess"]
            import _posixsubprocess

        def shell():
            os.system("true")

        def write(path, text="x"):
            with open(path, "w") as file:
                file.write(text)
            return os.path.getsize(path)

        def read(path):
            with open(path) as file:
                return file.read()

        def listdir(path):
            return os.listdir(path)

        def open_directory(path):
            return os.open(path, os.O_RDONLY)

        def connect(port):
            import socket
            socket.create_connection(("127.0.0.1", port), timeout=2)

        def symlink(target, name):
            os.symlink(target, name)

        def walk_gc():
            import gc
            return len(gc.get_objects())

        def call_libc():
            import ctypes
            ctypes.CDLL("libc.so.6").system(b"true")  # loading it is harmless, calling is not

        def load_library(name):
            import ctypes
            ctypes.CDLL(name)

        def identity():
            import resource
            return (os.getuid(), sorted(os.environ),
                    resource.getrlimit(resource.RLIMIT_AS)[0], resource.getrlimit(resource.RLIMIT_NPROC)[0])

        def garble_channel():
            # Write a bogus reply to every descriptor that takes it: one is the reply pipe.
            bogus = (5).to_bytes(8, "big") + b"hello"
            for fd in range(3, 64):
                try:
                    os.write(fd, bogus)
                except OSError:
                    pass
            return "done"

        def forge_results():
            # Patch the worker's encoder so that every later reply says something else.
            from graders.sandbox import protocol
            protocol.MessageEncoder.encode = lambda self, value, depth=0: {"__t": "score", "v": 100}
        """,
    "exits_on_import.py": "import sys\nsys.exit(3)\n",
    "os_exits_on_import.py": "import os\nos._exit(4)\n",
    "broken_syntax.py": "def f(:\n    pass\n",
}


def write_package(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (root / name).write_text(textwrap.dedent(source))
    return root


@pytest.fixture(scope="module")
def submission(tmp_path_factory) -> Path:
    # A folder name that is not a valid package name: the worker loads it as `submission`.
    return write_package(tmp_path_factory.mktemp("subs") / "alice-hw4 (final)", STUDENT_FILES)


@pytest.fixture(scope="module")
def secret(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hidden")
    (folder / "answers.txt").write_text("the reference answers")
    return folder


@pytest.fixture(scope="module")
def worker(submission, secret):
    """The default layers of this machine (bubblewrap where it works)."""
    with Worker(submission, limits=TEST_LIMITS, secret_paths=[secret]) as started:
        yield started


@pytest.fixture(scope="module")
def plain_worker(submission, secret):
    """No bubblewrap: rlimits, the sandbox user where possible, and the audit hook."""
    with Worker(submission, limits=TEST_LIMITS, secret_paths=[secret], use_bwrap=False,
                require_isolation=False) as started:
        yield started


@pytest.fixture
def any_worker(request):
    return request.getfixturevalue(request.param)


BOTH_LAYERS = pytest.mark.parametrize("any_worker", ["worker", "plain_worker"], indirect=True)


# ---------------------------------------------------------------------------- protocol (no worker)

def roundtrip(value):
    encoder = MessageEncoder(lambda obj: pytest.fail(f"unexpected handle for {obj!r}"))
    data = encoder.encode(value)
    payload = b"".join(bytes(part) for part in safetensors_buffers(encoder.tensors)) if encoder.tensors else b""
    return decode(data, load_safetensors(payload) if payload else {}, lambda i, t: Handle(i, t))


def test_values_survive_encoding():
    tensor = torch.randn(3, 4)
    value = {"t": tensor.t(), "pair": (1, "two", None), 3: [True, 2.5, float("inf"), -math.inf],
             ("a", 1): torch.bfloat16, "size": torch.Size([2, 3]), "device": torch.device("cpu"),
             "array": np.arange(6, dtype=np.int32).reshape(2, 3), "scalar": np.float64(0.5),
             "big": 2**80, "text": "ünïcode", "empty": torch.zeros(0, 3), "0d": torch.tensor(7)}
    back = roundtrip(value)
    assert torch.equal(back["t"], tensor.t()) and back["t"].is_contiguous()
    assert back["pair"] == (1, "two", None) and back[3] == [True, 2.5, math.inf, -math.inf]
    assert back[("a", 1)] is torch.bfloat16 and back["size"] == torch.Size([2, 3])
    assert isinstance(back["array"], np.ndarray) and back["array"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert back["scalar"] == 0.5 and back["big"] == 2**80 and back["text"] == "ünïcode"
    assert back["empty"].shape == (0, 3) and back["0d"].item() == 7
    assert math.isnan(roundtrip(float("nan")))


@pytest.mark.parametrize("data", [
    {"__t": "score", "v": 100},
    {"__t": "tensor", "k": "t9"},
    {"__t": "handle", "id": "1", "type": "x"},
    {"__t": "dtype", "v": "os.system"},
    {"__t": "dict", "v": [[[1, 2], 3]]},  # an unhashable key
    {"__t": "tuple", "v": [], "extra": 1},
    {"plain": "dict"},
])
def test_malformed_values_are_rejected(data):
    with pytest.raises(ProtocolError):
        decode(data, {}, lambda i, t: Handle(i, t))


def test_malformed_messages_are_rejected():
    with pytest.raises(ProtocolError):
        parse_header(b'{"value": NaN}')
    with pytest.raises(ProtocolError):
        parse_header(b"[" * 100_000)
    long_header = b'{"value": "' + b"x" * 600 + b'", "payload_bytes": 0}'
    for raw, problem in [
        (len(long_header).to_bytes(8, "big") + long_header, "exceeds the limit of 500"),
        ((10**9).to_bytes(8, "big"), "exceeds the limit of 500"),
        ((2).to_bytes(8, "big") + b"{}", "payload size"),
        ((2).to_bytes(8, "big") + b'{"', "not valid JSON"),
        ((24).to_bytes(8, "big") + b'{"payload_bytes": 4}    ' + b"junk", "tensor payload is malformed"),
        ((22).to_bytes(8, "big") + b'{"payload_bytes": 999}', "message of 1021 bytes exceeds"),
    ]:
        read, write = os.pipe()
        try:
            os.write(write, raw)
            with pytest.raises(ProtocolError, match=problem):
                receive_message(read, max_bytes=1000, max_header_bytes=500)
        finally:
            os.close(read)
            os.close(write)


def test_nothing_but_values_can_be_sent(worker):
    with pytest.raises(RequestError, match="cannot be sent"):
        worker.call("values", "echo", object())


# ---------------------------------------------------------------------------- values through the worker

def test_attention_roundtrip(worker):
    q = torch.randn(4, 4, 32, 16)
    values, weights = worker.call("attention", "scaled_dot_product", q, q, q, 0.0)
    assert type(values) is torch.Tensor and values.shape == (4, 4, 32, 16)
    assert torch.allclose(weights.sum(-1), torch.ones(4, 4, 32))


def test_structures_come_back_as_sent(worker):
    args = (torch.arange(6.0).reshape(2, 3).t(), (1, (2, 3)), {"k": [1.5, -math.inf]}, torch.float16,
            torch.Size([4]), torch.ones(2, dtype=torch.bool))
    back_args, back_kwargs = worker.call("values", "echo", *args, flag=True)
    assert torch.equal(back_args[0], args[0]) and back_args[1:4] == args[1:4]
    assert back_args[4] == torch.Size([4]) and back_args[5].dtype == torch.bool
    assert back_kwargs == {"flag": True}


def test_tensor_subclass_comes_back_plain(worker):
    result = worker.call("values", "liar")
    assert type(result) is torch.Tensor
    assert result.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_objects_stay_in_the_worker_as_handles(worker):
    counter = worker.construct("values", "Counter", 5)
    assert isinstance(counter, Handle) and counter.type_name == "values.Counter"
    assert worker.call(counter, "increment", by=2) == 7
    assert worker.getattr(counter, "count") == 7
    other = worker.construct("values", "Counter", 1)
    assert worker.call("values", "total", counter, other) == 8
    worker.free(counter, other)
    with pytest.raises(RequestError, match="no object"):
        worker.getattr(counter, "count")


def test_modules_parameters_and_state(worker):
    module = worker.construct("attention", "MultiHeadAttention", 8, 2)
    assert isinstance(worker.getattr(module, "qkv_proj"), Handle)
    described = worker.parameters(module)
    assert [p["name"] for p in described["parameters"]] == ["qkv_proj.weight", "qkv_proj.bias",
                                                            "o_proj.weight", "o_proj.bias"]
    assert described["parameters"][0]["shape"] == [24, 8]
    assert described["parameters"][0]["dtype"] is torch.float32
    assert described["buffers"] == [{"name": "scale", "shape": [], "dtype": torch.float32, "persistent": False}]
    state = worker.state_dict(module)
    zeroed = {name: torch.zeros_like(tensor) for name, tensor in state.items()}
    assert worker.load_state_dict(module, zeroed) == {"missing_keys": [], "unexpected_keys": []}
    output = worker.call(module, "__call__", torch.ones(1, 3, 8))
    assert torch.equal(output, torch.zeros(1, 3, 8))


def test_relative_and_absolute_imports_share_one_module(worker):
    worker.import_module("encoder")
    assert worker.call("encoder", "same_class") is True


def test_seed_makes_dropout_reproducible(worker):
    x = torch.ones(1, 1, 16, 2)
    weights = []
    for _ in range(2):
        worker.seed(1234)
        weights.append(worker.call("attention", "scaled_dot_product", x, x, x, 0.5)[1])
    assert torch.equal(weights[0], weights[1]) and (weights[0] == 0).any()


def test_a_workers_seed_draws_what_torch_manual_seed_draws():
    from graders.sandbox.worker import seed_torch

    seed_torch(77)
    ours = torch.rand(5), torch.randn(3), torch.randint(0, 100, (4,))
    torch.manual_seed(77)
    torchs = torch.rand(5), torch.randn(3), torch.randint(0, 100, (4,))
    assert all(torch.equal(a, b) for a, b in zip(ours, torchs))


def test_harness_tasks(worker):
    module = worker.construct("attention", "MultiHeadAttention", 8, 2)
    output = worker.task("forward", module, torch.ones(2, 3, 8))
    assert output.shape == (2, 3, 8) and not output.requires_grad
    x = torch.ones(1, 1, 2, 2)
    results = worker.task("call_many", "attention", "scaled_dot_product",
                          [((x, x, x), {"attn_drop_rate": 0.0}), ((2 * x, x, x), {"attn_drop_rate": 0.0})])
    assert len(results) == 2 and torch.equal(results[0][0], x)
    with pytest.raises(RequestError, match="no harness task"):
        worker.task("no_such_task")


def test_the_worker_sees_only_its_copy(worker, submission):
    file, cwd, home = worker.call("values", "where")
    assert str(submission) not in file + cwd
    assert file == os.path.join(cwd, "values.py") and cwd.startswith(home)


# ---------------------------------------------------------------------------- student failures

def test_student_exception_has_a_student_traceback(worker):
    with pytest.raises(StudentError) as caught:
        worker.call("values", "fails")
    error = caught.value
    assert error.exc_type == "ValueError" and error.message == "shapes do not match"
    assert 'File "values.py"' in error.traceback and "in helper" in error.traceback
    assert "graders" not in error.traceback and "site-packages" not in error.traceback
    assert "graders/sandbox/worker.py" in error.debug_traceback


def test_syntax_error_at_import(worker):
    with pytest.raises(StudentError) as caught:
        worker.import_module("broken_syntax")
    assert caught.value.exc_type == "SyntaxError" and "broken_syntax.py" in caught.value.traceback


def test_missing_module_is_a_student_error(worker):
    with pytest.raises(StudentError, match="ModuleNotFoundError"):
        worker.import_module("gpt")


@pytest.mark.parametrize("module, function, code, expected", [
    ("exits_on_import", None, None, "called sys.exit(3)"),
    ("os_exits_on_import", None, None, "exited with status 4"),
    ("hostile", "exit_now", 5, "called sys.exit(5)"),
    ("hostile", "hard_exit", 6, "exited with status 6"),
])
def test_exits_crash_the_worker_which_restarts(worker, module, function, code, expected):
    starts = worker.starts
    with pytest.raises(WorkerCrashed, match=re.escape(expected)):
        if function is None:
            worker.import_module(module)
        else:
            worker.call(module, function, code)
    assert not worker.running
    assert worker.call("values", "echo", 1) == ((1,), {})
    assert worker.starts == starts + 1


def test_a_restart_leaves_nothing_of_the_old_worker(worker):
    counter = worker.construct("values", "Counter", 0)
    old_workdir = str(worker._workdir)
    worker.restart()
    assert processes_mentioning(old_workdir) == [] and not os.path.exists(old_workdir)
    with pytest.raises(RequestError, match="restarted"):
        worker.call(counter, "increment")


@pytest.mark.parametrize("function", ["allocate_tensor", "allocate_bytes"])
def test_allocation_beyond_the_memory_limit_fails_cleanly(worker, function):
    with pytest.raises(StudentError):
        worker.call("hostile", function, 2 * TEST_LIMITS.address_space_bytes)
    assert worker.running and worker.call("values", "echo", 3) == ((3,), {})


def test_output_is_captured_and_bounded(worker):
    assert worker.call("values", "flood", 10) == 10 and worker.last_output == "x" * 10
    assert worker.call("values", "flood", 5_000_000) == 5_000_000
    assert worker.last_output.startswith("[... ") and worker.last_output.endswith("x" * 1000)
    assert len(worker.last_output) < TEST_LIMITS.max_output_bytes + 100


def test_garbage_on_the_reply_channel_is_a_protocol_error(worker):
    with pytest.raises(ProtocolError):
        worker.call("hostile", "garble_channel")
    assert worker.call("values", "echo", 4) == ((4,), {})


def test_a_patched_encoder_cannot_forge_results(worker):
    with pytest.raises(ProtocolError, match="'score'"):
        worker.call("hostile", "forge_results")  # its own reply is already forged
    assert worker.call("values", "echo", 5) == ((5,), {})


# ---------------------------------------------------------------------------- isolation

def test_layers_are_recorded(worker, plain_worker):
    assert worker.layers.bwrap == BWRAP_WORKS and not plain_worker.layers.bwrap
    recorded = worker.layers.to_json()
    assert recorded["audit_hook"] and recorded["rlimits"] and "sandbox_uid" in recorded


def test_environment_user_and_limits(worker):
    uid, variables, address_space, processes = worker.call("hostile", "identity")
    assert uid == (worker.layers.sandbox_uid if worker.layers.sandbox_uid is not None else os.geteuid())
    assert set(variables) <= {"PATH", "HOME", "TMPDIR", "LANG", "USER", "LOGNAME", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
                              "PYTHONFAULTHANDLER", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
                              "TORCHINDUCTOR_CACHE_DIR",  # set by torch itself in the worker's warm-up
                              "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                              "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                              "PWD"}
    assert address_space == TEST_LIMITS.address_space_bytes and processes == TEST_LIMITS.max_processes


@BOTH_LAYERS
@pytest.mark.parametrize("function, args", [
    ("fork", ()), ("run", (["true"],)), ("fork_exec_directly", ()), ("reimport_fork_exec", ()),
    ("shell", ()), ("call_libc", ()), ("load_library", ("libsomething-not-loaded.so",)),
    ("load_library", ("./libc.so.6",)),  # a look-alike of a loaded library
    ("walk_gc", ()), ("symlink", ("/etc/passwd", "passwd")), ("open_directory", ("/",)),
    ("write", ("/tmp/sandbox-escape.txt",)), ("write", ("../../outside.txt",)),
])
@pytest.mark.slow
def test_dangerous_operations_are_denied(any_worker, function, args):
    with pytest.raises(StudentError, match="PermissionError"):
        any_worker.call("hostile", function, *args)


def installed_library_not_loaded() -> str:
    """A native library of an installed package that no worker has mapped at its start."""
    import markupsafe

    return str(next(Path(markupsafe.__file__).parent.glob("_speedups*.so")))


@BOTH_LAYERS
def test_a_library_of_an_installed_package_may_be_loaded_late(any_worker):
    # torchvision loads its operators this way when transformers first imports it.
    assert any_worker.call("hostile", "load_library", installed_library_not_loaded()) is None


def test_a_library_inside_the_working_directory_is_never_installed(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    hook = audit.make_hook(workdir=str(work), secret_paths=(), loaded_libraries=frozenset(),
                           installed_folders=(str(tmp_path),))
    (tmp_path / "lib.so").write_bytes(b"")
    (work / "lib.so").write_bytes(b"")
    hook("ctypes.dlopen", (str(tmp_path / "lib.so"),))
    with pytest.raises(PermissionError):
        hook("ctypes.dlopen", (str(work / "lib.so"),))
    with pytest.raises(PermissionError):
        hook("ctypes.dlopen", (str(tmp_path / "elsewhere" / ".." / "work" / "lib.so"),))


def test_packages_a_pth_file_names_are_installed_but_never_a_writable_place(tmp_path, monkeypatch):
    """A GPU runner's PyTorch, torchvision and transformers live in a virtual environment of their
    own, which the grader's names in a .pth file: torchvision's operators, loaded late, were refused
    there, and every check that builds a BERT was skipped. A .pth naming the working directory
    (or a folder above it) still adds nothing."""
    import site

    site_folder, runner_packages, work = tmp_path / "site", tmp_path / "runner" / "site-packages", tmp_path / "work"
    for folder in (site_folder, runner_packages, work):
        folder.mkdir(parents=True)
    (site_folder / "runner.pth").write_text(f"# the runner's packages\n{runner_packages}\nimport sys\n{work}\n")
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(site_folder)])
    folders = audit.installed_folders(str(work))
    assert str(runner_packages.resolve()) in folders and str(site_folder.resolve()) in folders
    writable = str(work.resolve())
    assert not any(writable == folder or writable.startswith(folder + "/") for folder in folders), folders
    (site_folder / "runner.pth").unlink()  # positive control: without the .pth, not installed
    assert str(runner_packages.resolve()) not in audit.installed_folders(str(work))


def test_the_hook_guards_its_own_code(tmp_path):
    hook = audit.make_hook(workdir=str(tmp_path), secret_paths=(), loaded_libraries=frozenset())
    no_op = (lambda event, args: None).__code__
    with pytest.raises(PermissionError):
        hook("object.__setattr__", (hook, "__code__", no_op))
    hook("object.__setattr__", (test_the_hook_guards_its_own_code, "__code__", no_op))  # others may


@BOTH_LAYERS
def test_writing_inside_the_working_directory_is_allowed(any_worker):
    assert any_worker.call("hostile", "write", "notes.txt", "hello") == 5


@BOTH_LAYERS
def test_network_is_denied(any_worker):
    with socket.create_server(("127.0.0.1", 0)) as server:
        with pytest.raises(StudentError):
            any_worker.call("hostile", "connect", server.getsockname()[1])


@BOTH_LAYERS
def test_secret_paths_cannot_be_read(any_worker, secret):
    for function, path in [("read", secret / "answers.txt"), ("listdir", secret)]:
        with pytest.raises(StudentError, match="PermissionError|FileNotFoundError"):
            any_worker.call("hostile", function, str(path))


def test_the_reference_solution_is_secret_by_default(worker):
    import reference

    assert str(Path(reference.__file__).parent) in worker.secret_paths


@needs_bwrap
def test_bwrap_alone_hides_secrets_and_the_network(tmp_path, secret):
    workdir = tmp_path / "work"
    workdir.mkdir()
    command = isolation.bwrap_command(BWRAP, workdir=workdir, secret_paths=[str(secret)])
    shown = subprocess.run([*command, "/bin/sh", "-c", f"cat {secret}/answers.txt; ls -A {secret}; "
                            "tail -n +3 /proc/net/dev"], capture_output=True, text=True, timeout=30)
    assert "reference answers" not in shown.stdout and "answers.txt" not in shown.stdout
    interfaces = [line.split(":")[0].strip() for line in shown.stdout.splitlines() if ":" in line]
    assert interfaces == ["lo"]  # a network namespace of its own, with nothing in it


@needs_bwrap
def test_under_bwrap_the_rest_of_the_machine_is_absent(worker):
    """Another copy of the solution (a second checkout, a home folder) is not there to find,
    even where nobody listed it as secret: the worker's file system holds only what it needs."""
    import graders

    stray = Path(tempfile.mkdtemp(dir="/var/tmp"))  # outside /tmp, which is private anyway
    try:
        (stray / "attention.py").write_text("# a solution left lying around")
        repository = Path(graders.__file__).resolve().parent.parent
        for path in [stray / "attention.py", repository / "pyproject.toml"]:
            with pytest.raises(StudentError, match="FileNotFoundError"):
                worker.call("hostile", "read", str(path))
        assert worker.call("hostile", "listdir", "/usr/lib")  # the system folders are there
    finally:
        shutil.rmtree(stray)


@needs_bwrap
def test_readable_paths_are_there_with_the_folders_their_links_point_into(submission):
    """A Hugging Face cache: each file of a snapshot is a link into the blobs folder."""
    model = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        (model / "blobs").mkdir()
        (model / "blobs" / "1234").write_text('{"model_type": "bert"}')
        (model / "snapshots" / "main").mkdir(parents=True)
        (model / "snapshots" / "main" / "config.json").symlink_to("../../blobs/1234")
        with Worker(submission, limits=TEST_LIMITS, readable_paths=[model / "snapshots" / "main"]) as reader:
            assert reader.call("hostile", "read", str(model / "snapshots" / "main" / "config.json")) == \
                '{"model_type": "bert"}'
            with pytest.raises(StudentError, match="FileNotFoundError|PermissionError"):
                reader.call("hostile", "write", str(model / "snapshots" / "main" / "new.txt"))
    finally:
        shutil.rmtree(model)


def test_a_readable_path_inside_a_secret_is_refused(submission, secret):
    with pytest.raises(ValueError, match="would hide"):
        Worker(submission, limits=TEST_LIMITS, secret_paths=[secret], readable_paths=[secret / "answers.txt"])


def test_symlinks_in_a_submission_are_not_copied(tmp_path, secret):
    folder = write_package(tmp_path / "sub", {"ok.py": "X = 1\n"})
    (folder / "leak.txt").symlink_to(secret / "answers.txt")
    copy = tmp_path / "copy"
    isolation.copy_submission(folder, copy)
    assert sorted(os.listdir(copy)) == ["ok.py"]


def test_directories_of_dead_graders_are_removed(submission):
    parent = isolation.workdirs_parent()
    orphan = parent / "w-999999999-12345-abcdefgh"  # no such process
    orphan.mkdir()
    workdir = isolation.make_workdir(submission, owner=None)
    try:
        assert not orphan.exists() and workdir.name.startswith(f"w-{os.getpid()}-")
        isolation.remove_orphaned_workdirs(parent)
        assert workdir.exists()  # its grader, this process, is alive
    finally:
        shutil.rmtree(workdir)


def test_no_process_outlives_close(submission):
    worker = Worker(submission, limits=TEST_LIMITS)
    worker.start()
    workdir = str(worker._workdir)
    assert processes_mentioning(workdir)
    worker.close()
    assert processes_mentioning(workdir) == []
    assert not os.path.exists(workdir)
    with pytest.raises(RuntimeError, match="closed"):
        worker.ping()


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains `text` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def test_infinite_loop_times_out_and_the_next_call_works(plain_worker):
    started = time.monotonic()
    with pytest.raises(WorkerTimeout, match="timed out after 2 s"):
        plain_worker.task("call_many", "hostile", "spin", [((), {})], timeout=2)  # a task's own limit
    assert time.monotonic() - started < 2 + 3
    assert not plain_worker.running
    assert plain_worker.call("values", "echo", 6) == ((6,), {})


# Last: it stops the plain worker, and no later test needs it restarted.
def test_budget_bounds_the_whole_submission(plain_worker, submission):
    with pytest.raises(BudgetExhausted):
        Worker(submission, limits=Limits(submission_budget_s=0)).start()
    original = plain_worker.limits
    plain_worker.limits = dataclasses.replace(original, submission_budget_s=plain_worker.time_used_s + 1.0)
    try:
        started = time.monotonic()
        with pytest.raises(BudgetExhausted):
            plain_worker.call("hostile", "spin")
        assert time.monotonic() - started < 3
        with pytest.raises(BudgetExhausted):
            plain_worker.ping()
    finally:
        plain_worker.limits = original
