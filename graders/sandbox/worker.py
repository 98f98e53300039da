"""The worker: the one process that runs student code.

Started by `graders.sandbox.client.Worker` as `python -s -m graders.sandbox.worker CONFIG`
(CONFIG is JSON; see `Worker._launch`). Before any student code runs, it
  1. imports torch, numpy and safetensors (as a module, below); a self-check's worker started
     for a part that preloads (the rubric's `preload`) imports those modules too;
  2. mounts its private, size-limited writable space and copies the submission in (when the
     grader asks for private mounts: bubblewrap as root), applies its rlimits, makes network
     and IPC namespaces of its own and pins itself to its CPUs (as the grader's layers say),
     forbids gaining privileges, becomes the sandbox user if asked, arranges to die with the
     grader, and installs its seccomp filter (graders/sandbox/seccomp.py);
     a self-check's worker (`containment_only`) only applies the rlimits the platform has and
     arranges to die with the grader, with nothing Linux-only where it is not there;
  3. imports the harness task modules;
  4. makes the submission folder importable as the package `submission`;
  5. installs the audit hook (`graders.sandbox.audit`), except in a self-check;
then answers requests on its two protocol pipes until the grader closes them. Its stdout and
stderr are the student's: the grader drains them separately and never parses them.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import shutil
import signal
import stat
import threading
import sys
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import numpy
import safetensors.torch  # noqa: F401  (imported before the audit hook, like torch)
import torch

from graders.dependencies import broken_dependency, missing_module
from graders.sandbox import audit, seccomp
from graders.sandbox import tasks  # noqa: F401  (the built-in tasks are always available)
from graders.assignment import import_package
from graders.sandbox.harness import TASKS
from graders.sandbox.limits import Limits, apply_rlimits
from graders.sandbox.protocol import Handle, MessageEncoder, decode, receive_message, send_message

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWIPC, CLONE_NEWNET = 0x08000000, 0x40000000
MS_NOSUID, MS_NODEV = 2, 4
PACKAGE = "submission"
MAX_MESSAGE_CHARS = 2_000
MAX_TRACEBACK_CHARS = 20_000
# How often a self-check's worker without a parent-death signal looks for its grader.
PARENT_WATCH_INTERVAL_S = 1.0
# What the audit hook refused since the last reply; each reply carries it to the grader (a
# tripwire for review: the student's code shares this process and could empty it).
DENIALS = audit.DenialLog()


def main(argv: list[str]) -> None:
    # `-m` put the start directory (the worker's fresh working directory, which holds nothing
    # importable) first on sys.path; the submission gets its own entry below.
    if sys.path and sys.path[0] == os.getcwd():
        sys.path.pop(0)
    started_ahead = argv[1] == "--config-on-stdin"
    if started_ahead:  # a self-check's worker (graders/sandbox/spawn.py)
        preload(argv[2:])  # first: two threads importing torch's modules can deadlock on their locks
        warm_up_in_background()  # while the grader imports its own modules
        request_fd, reply_fd = protocol_from_stdio()
        try:
            config, _ = receive_message(request_fd)
        except EOFError:
            os._exit(0)  # started ahead for a self-check that did not happen
        os.environ.update(config["environment"])
    else:
        config = json.loads(argv[1])
        request_fd, reply_fd = config["request_fd"], config["reply_fd"]
    containment_only = config["containment_only"]
    limits = Limits.from_json(config["limits"])
    if config["private_source"]:
        make_private_space(Path(config["workdir"]), Path(config["private_source"]), limits, config["run_as"])
    apply_rlimits(limits, gpu=config["gpu"], best_effort=containment_only)
    if containment_only:
        die_with_parent(config["parent_pid"])
    else:
        harden_process(run_as=config["run_as"], parent_pid=config["parent_pid"], confinement=config["confinement"])
    torch.set_num_threads(limits.threads)
    torch.set_num_interop_threads(limits.threads)
    for name, folder in config.get("packages", {}).items():
        import_package(name, Path(folder))
    for name in config["task_modules"]:
        importlib.import_module(name)

    session = Session(Path(config["submission_dir"]), Path(config["workdir"]))
    session.make_submission_importable()
    if not containment_only:  # a tripwire against hostile code: the instructor's threat model
        audit.install(workdir=config["workdir"], secret_paths=config["secret_paths"], denials=DENIALS)
    os.chdir(session.submission_dir)
    if not started_ahead:
        warm_up_in_background()
    marker = bytes.fromhex(config["output_marker"]) if containment_only else None
    serve(session, request_fd, reply_fd, output_marker=marker)


def preload(modules: list[str]) -> None:
    """Import grader-side modules a part's tasks need (transformers' BERT: seconds) before the
    configuration comes, while the grader imports its own and grades other parts. One that
    fails is left to the task that needs it, which reports it with its fix."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - reported by the task that imports it again
            pass


def warm_up_in_background() -> None:
    """Pay torch.optim's first-use cost (its first optimizer pulls in the compiler stack, about
    a second) while the grader imports its modules (a worker started ahead) or runs its first
    checks, instead of inside the check that first needs it. Plain imports are thread-safe;
    transformers' lazy module is not, so it is not warmed here. Uses no random numbers, so the
    seeded draws of the student's code are unchanged."""

    def warm_up() -> None:
        # A short switch interval hands the interpreter back to the request loop within a
        # fraction of a millisecond whenever a request arrives during the warm-up.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(0.0002)
        try:
            torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
        finally:
            sys.setswitchinterval(interval)

    threading.Thread(target=warm_up, name="warm-up", daemon=True).start()


def make_private_space(workdir: Path, source: Path, limits: Limits, run_as: list[int] | None) -> None:
    """Size-limited tmpfs mounts for everything the student may write (this process is still
    root, inside bubblewrap's mount namespace): /dev/shm, and the working folder, which gets a
    copy of the read-only submission (/tmp is bubblewrap's, root's and small). A student filling
    them fills memory the limits bound, never the grader's disk, and all of it is gone with the
    namespace."""
    uid, gid = run_as if run_as is not None else (0, 0)
    mount_tmpfs(Path("/dev/shm"), limits.shm_bytes, limits.shm_files, "1777", 0, 0)
    workdir.mkdir(mode=0o711, parents=True, exist_ok=True)
    mount_tmpfs(workdir, limits.workdir_bytes, limits.workdir_files, "700", 0, 0)  # chowned once filled
    shutil.copytree(source, workdir / "submission")
    (workdir / "tmp").mkdir()
    # Bottom up: this process (root without CAP_DAC_OVERRIDE) can no longer enter what it gave away.
    for directory, subdirectories, files in os.walk(workdir, topdown=False):
        for name in [*subdirectories, *files]:
            os.lchown(os.path.join(directory, name), uid, gid)
    os.lchown(workdir, uid, gid)


def mount_tmpfs(target: Path, size: int, files: int, mode: str, uid: int, gid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    options = f"size={size},nr_inodes={files},mode={mode},uid={uid},gid={gid}".encode()
    if libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options) != 0:
        raise OSError(ctypes.get_errno(), f"mounting the worker's tmpfs on {target} failed")


def harden_process(*, run_as: list[int] | None, parent_pid: int | None, confinement: dict) -> None:
    """Everything below fails the start rather than run student code with a layer missing."""
    libc = ctypes.CDLL(None, use_errno=True)

    def prctl(option: int, value: int) -> None:
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}) failed")

    if confinement["unshare"]:  # as root still: network and SysV IPC of its own, gone with it
        if libc.unshare(CLONE_NEWNET | CLONE_NEWIPC) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET | CLONE_NEWIPC) failed")
    if confinement["cpus"] is not None:  # every thread: torch's, started at import, too
        for thread in os.listdir("/proc/self/task"):
            os.sched_setaffinity(int(thread), confinement["cpus"])
    if confinement["root"] is not None:  # container isolation: a file system of its own
        refuse_open_folders()
        audit.keep_proc_files()
        os.chroot(confinement["root"])
        os.chdir("/")
    # No setuid binary or file capability can give back what is dropped here.
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    if run_as is not None:
        uid, gid = run_as
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    # Changing user clears the parent-death signal and makes the process undumpable, so both are
    # set afterwards. Dumpable, its descriptors are readable to a process of its own uid (the
    # grader's write watch reads them so, as a container's root may not), to no other.
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if confinement["dumpable"]:
        prctl(PR_SET_DUMPABLE, 1)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)  # the grader died before the signal was armed
    if confinement["seccomp"]:  # last: it refuses sched_setaffinity
        seccomp.install(allow_unix_sockets=confinement["allow_unix_sockets"])


def refuse_open_folders() -> None:
    """A folder's descriptor open across the change of root would lead out of it (openat of
    ".." from there): none may be, and none is by design; fail the start if one is."""
    for name in os.listdir("/proc/self/fd"):
        try:
            opened = os.fstat(int(name))
        except OSError:
            continue  # the listing's own, closed by now
        if stat.S_ISDIR(opened.st_mode):
            raise OSError(f"descriptor {name} is a folder's: it would lead out of the worker's own root")


def linux_prctl() -> Callable[..., int] | None:
    """libc's prctl, or None on a system without it (macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(parent_pid: int) -> None:
    """Crash containment for a self-check: the worker must not outlive the grader, even while
    the student's code hangs. Linux has a parent-death signal; elsewhere a thread watches for
    the grader's exit (the worker is then re-parented, so its parent pid changes)."""
    prctl = linux_prctl()
    if prctl is not None and prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0:
        if os.getppid() != parent_pid:
            os._exit(1)  # the grader died before the signal was armed
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_WATCH_INTERVAL_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class BadRequest(Exception):
    """The grader's request cannot be carried out (not the student's fault)."""


class Session:
    """The worker's state: the submission package and the objects handed out as handles."""

    def __init__(self, submission_dir: Path, workdir: Path) -> None:
        self.submission_dir = submission_dir
        self.workdir = workdir
        self.objects: dict[int, Any] = {}
        self.next_id = 1

    def make_submission_importable(self) -> None:
        """Register the package `submission` without running the student's `__init__.py` yet
        (that happens on the first import, as student code answering a request)."""
        module_names = {entry.name if entry.is_dir() else entry.stem
                        for entry in self.submission_dir.iterdir()
                        if entry.is_dir() or entry.suffix == ".py"}
        sys.meta_path.insert(0, SubmissionAliasFinder(
            frozenset(name for name in module_names if name.isidentifier())))
        # As when the student runs the code from its folder. The finder comes first, so that
        # no second copy of a module is loaded from here.
        sys.path.insert(0, str(self.submission_dir))

    def student_module(self, name: str) -> ModuleType:
        if not all(part.isidentifier() for part in name.split(".")):
            raise BadRequest(f"{name!r} is not a module name")
        if PACKAGE not in sys.modules:
            init = self.submission_dir / "__init__.py"
            if init.is_file():
                spec = importlib.util.spec_from_file_location(
                    PACKAGE, init, submodule_search_locations=[str(self.submission_dir)])
            else:
                spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
                spec.submodule_search_locations = [str(self.submission_dir)]
            package = importlib.util.module_from_spec(spec)
            sys.modules[PACKAGE] = package
            try:
                if spec.loader is not None:
                    spec.loader.exec_module(package)
            except BaseException:
                del sys.modules[PACKAGE]
                raise
        return importlib.import_module(f"{PACKAGE}.{name}")

    def keep(self, obj: Any) -> Handle:
        kind = type(obj)
        type_name = f"{kind.__module__}.{kind.__qualname__}".removeprefix(f"{PACKAGE}.")
        handle = Handle(self.next_id, type_name[:300])
        self.objects[self.next_id] = obj
        self.next_id += 1
        return handle

    def lookup(self, handle_id: int, type_name: str) -> Any:
        try:
            return self.objects[handle_id]
        except KeyError:
            raise BadRequest(f"no object #{handle_id} ({type_name}) in this worker") from None


class SubmissionAliasFinder(importlib.abc.MetaPathFinder):
    """Makes `import attention` give the module `submission.attention` itself.

    Students import their own modules both relatively and absolutely. With only the folder on
    sys.path, `import attention` would load a second copy of the file, whose classes are not
    the ones the grader constructed (isinstance checks and monkeypatches then disagree).
    """

    def __init__(self, top_level_names: frozenset[str]) -> None:
        self.top_level_names = top_level_names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] not in self.top_level_names:
            return None
        return importlib.machinery.ModuleSpec(fullname, AliasLoader(f"{PACKAGE}.{fullname}"))


class AliasLoader(importlib.abc.Loader):
    def __init__(self, real_name: str) -> None:
        self.real_name = real_name

    def create_module(self, spec):
        return importlib.import_module(self.real_name)

    def exec_module(self, module) -> None:
        pass  # already executed under its real name


class WorkerTaskContext:
    """The `ctx` of harness tasks (see `graders.sandbox.harness.TaskContext`)."""

    def __init__(self, session: Session) -> None:
        self.submission_dir = session.submission_dir
        self.workdir = session.workdir
        self.student_module = session.student_module


# ---------------------------------------------------------------------------- requests

class Request:
    def __init__(self, header: dict, tensors: dict, session: Session) -> None:
        self.header = header
        self.tensors = tensors
        self.session = session

    def text(self, field: str) -> str:
        value = self.header.get(field)
        if type(value) is not str:
            raise BadRequest(f"the request needs a string {field!r}")
        return value

    def value(self, field: str, default: Any = None) -> Any:
        if field not in self.header:
            return default
        return decode(self.header[field], self.tensors, self.session.lookup)

    def arguments(self) -> tuple[list, dict]:
        args, kwargs = self.value("args", []), self.value("kwargs", {})
        if type(args) is not list or type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
            raise BadRequest("malformed arguments")
        return args, kwargs

    def object(self) -> Any:
        """The object the request's handle names."""
        if "handle" not in self.header:
            raise BadRequest("the request names no object")
        return self.value("handle")

    def target(self) -> Any:
        """The object a call or getattr addresses: a module of the submission, or a handle."""
        if "module" in self.header:
            return self.session.student_module(self.text("module"))
        return self.object()


def op_ping(request: Request) -> Any:
    return "pong"


def op_import(request: Request) -> Any:
    request.session.student_module(request.text("module"))


def op_construct(request: Request) -> Any:
    args, kwargs = request.arguments()
    cls = getattr(request.session.student_module(request.text("module")), request.text("name"))
    return request.session.keep(cls(*args, **kwargs))


def op_call(request: Request) -> Any:
    args, kwargs = request.arguments()
    return getattr(request.target(), request.text("name"))(*args, **kwargs)


def op_getattr(request: Request) -> Any:
    return getattr(request.target(), request.text("name"))


def op_state_dict(request: Request) -> Any:
    return request.object().state_dict()


def op_load_state_dict(request: Request) -> Any:
    result = request.object().load_state_dict(request.value("state_dict"),
                                              strict=bool(request.value("strict", True)))
    return {"missing_keys": list(getattr(result, "missing_keys", [])),
            "unexpected_keys": list(getattr(result, "unexpected_keys", []))}


def op_parameters(request: Request) -> Any:
    module = request.object()
    persistent = set(module.state_dict())
    return {
        "parameters": [{"name": name, "shape": list(p.shape), "dtype": p.dtype,
                        "requires_grad": p.requires_grad}
                       for name, p in module.named_parameters()],
        "buffers": [{"name": name, "shape": list(b.shape), "dtype": b.dtype,
                     "persistent": name in persistent}
                    for name, b in module.named_buffers()],
    }


def op_seed(request: Request) -> Any:
    seed = request.value("seed")
    if type(seed) is not int:
        raise BadRequest("the seed must be an int")
    seed_torch(seed)
    random.seed(seed)
    numpy.random.seed(seed % 2**32)


def seed_torch(seed: int) -> None:
    """What torch.manual_seed seeds, on the devices a worker can use. torch.manual_seed also
    queues a lazy seeding for every accelerator backend built in, absent or not, each keeping a
    copy of the Python stack: a millisecond, before every check of a grade."""
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    if torch.backends.mps.is_available():
        torch.mps.manual_seed(seed)


def op_task(request: Request) -> Any:
    name = request.text("name")
    if name not in TASKS:
        raise BadRequest(f"no harness task named {name!r}")
    args, kwargs = request.arguments()
    return TASKS[name](WorkerTaskContext(request.session), *args, **kwargs)


def op_free(request: Request) -> Any:
    ids = request.value("ids", [])
    if type(ids) is not list or not all(type(i) is int for i in ids):
        raise BadRequest("malformed handle ids")
    for handle_id in ids:
        request.session.objects.pop(handle_id, None)


OPERATIONS: dict[str, Callable[[Request], Any]] = {
    "ping": op_ping, "import": op_import, "construct": op_construct, "call": op_call,
    "getattr": op_getattr, "state_dict": op_state_dict, "load_state_dict": op_load_state_dict,
    "parameters": op_parameters, "seed": op_seed, "task": op_task, "free": op_free,
    "shutdown": op_ping,
}


def protocol_from_stdio() -> tuple[int, int]:
    """A self-check's worker gets its protocol pipes as stdin and stdout, the way every
    platform hands pipes to a child. They move to descriptors of their own; stdin becomes
    empty and stdout joins stderr (the output pipe), so that what the student's code prints
    never reaches the protocol. (Nothing prints while the modules above are imported.)"""
    request_fd, reply_fd = os.dup(0), os.dup(1)
    if sys.platform == "win32":
        import msvcrt

        for fd in (request_fd, reply_fd):
            msvcrt.setmode(fd, os.O_BINARY)  # no newline translation of the protocol's bytes
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.close(empty)
    os.dup2(2, 1)
    return request_fd, reply_fd


def end_of_output(marker: bytes | None) -> None:
    """Tell a self-check's grader where the output of this request ends (see
    graders/sandbox/channel.py): the output is read by a thread there, not beside the reply."""
    if marker is None:
        return
    try:
        os.write(2, marker)
    except OSError:
        pass  # the student's code closed fd 2: the grader stops waiting after a moment


def serve(session: Session, request_fd: int, reply_fd: int, *, output_marker: bytes | None = None) -> None:
    flush_student_output()
    end_of_output(output_marker)
    send_message(reply_fd, {"id": 0, "ok": True, "value": "ready"}, {})
    while True:
        try:
            header, tensors = receive_message(request_fd)
        except EOFError:
            os._exit(0)  # the grader is gone
        reply, reply_tensors, exit_code = answer(session, header, tensors)
        if exit_code is None and header.get("op") == "shutdown":
            exit_code = 0
        flush_student_output()
        end_of_output(output_marker)
        denials = DENIALS.take()
        if denials is not None:
            reply["audit"] = denials
        send_message(reply_fd, reply, reply_tensors)
        if exit_code is not None:
            # Straight out: no atexit handler or finalizer of the student's runs any more.
            os._exit(exit_code)


def answer(session: Session, header: dict, tensors: dict) -> tuple[dict, dict, int | None]:
    """The reply to one request, its tensors, and the exit code if the student's code asked
    the process to exit."""
    request_id = header.get("id")
    operation = OPERATIONS.get(header.get("op"))

    def failure(error: dict) -> tuple[dict, dict, None]:
        return {"id": request_id, "ok": False, "error": error}, {}, None

    try:
        if operation is None:
            raise BadRequest(f"unknown operation {header.get('op')!r}")
        result = operation(Request(header, tensors, session))
    except BadRequest as error:
        return failure({"kind": "request", "message": str(error)})
    except SystemExit as exit_request:
        code, shown = exit_status(exit_request.code)
        return {"id": request_id, "ok": False, "error": {"kind": "exit", "code": shown}}, {}, code
    except BaseException as error:  # noqa: BLE001  everything the student's code raises
        missing = missing_module(error)
        if missing is not None:  # transformers & co. are the grader's to provide, whoever imports them
            return failure({"kind": "environment", "module": missing})
        broken = broken_dependency(error)
        if broken is not None:
            return failure({"kind": "environment", "module": broken[0], "problem": broken[1]})
        return failure(describe_exception(error, session.submission_dir))
    encoder = MessageEncoder(session.keep)
    try:
        value = encoder.encode(result)
    except BaseException as error:  # noqa: BLE001  a result that cannot travel, or whose
        # conversion ran student code (a dict subclass, a tensor subclass) that raised
        described = describe_exception(error, session.submission_dir)
        described["message"] = f"the result cannot be sent to the grader: {described['message']}"
        return failure(described)
    return {"id": request_id, "ok": True, "value": value}, encoder.tensors, None


def exit_status(code: Any) -> tuple[int, str]:
    """What sys.exit(code) exits with, and how the student wrote it."""
    if code is None:
        return 0, "None"
    if type(code) is int:
        return code & 0xFF, str(code)
    print(safe_str(code), file=sys.stderr)
    return 1, safe_repr(code)


def describe_exception(error: BaseException, submission_dir: Path) -> dict:
    root = os.path.join(str(submission_dir), "")  # with the platform's separator at the end
    kind = type(error)
    module = kind.__module__ or ""
    name = kind.__qualname__ if module == "builtins" else f"{module}.{kind.__qualname__}"
    student_frames = traceback.StackSummary.from_list(
        [frame for frame in traceback.StackSummary.extract(traceback.walk_tb(error.__traceback__),
                                                           lookup_lines=False)
         if frame.filename.startswith(root)])
    try:
        exception_lines = traceback.format_exception_only(kind, error)
        full = "".join(traceback.format_exception(kind, error, error.__traceback__))
    except BaseException:  # noqa: BLE001  a student exception whose __str__ itself fails
        exception_lines = [f"{name}: {safe_str(error)}\n"]
        full = exception_lines[0]
    student_traceback = "".join(["Traceback (most recent call last):\n", *student_frames.format(),
                                 *exception_lines]) if student_frames else "".join(exception_lines)
    return {
        "kind": "student",
        "type": name.removeprefix(f"{PACKAGE}."),
        "message": safe_str(error).replace(root, "")[:MAX_MESSAGE_CHARS],
        "traceback": student_traceback.replace(root, "")[-MAX_TRACEBACK_CHARS:],
        "debug_traceback": full[-MAX_TRACEBACK_CHARS:],
    }


def safe_str(value: Any) -> str:
    try:
        return str(value)
    except BaseException:  # noqa: BLE001
        return f"<{type(value).__name__} that cannot be printed>"


def safe_repr(value: Any) -> str:
    try:
        return repr(value)[:MAX_MESSAGE_CHARS]
    except BaseException:  # noqa: BLE001
        return f"<{type(value).__name__}>"


def flush_student_output() -> None:
    """Output printed during a request must be in the pipe before the reply is, so that the
    grader can attribute it to the request."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001  the student may have replaced or closed it
            pass


if __name__ == "__main__":
    main(sys.argv)
