"""`Worker`: the grader's side of the sandbox.

    with Worker("submissions/alice", secret_paths=[hidden_fixtures]) as worker:
        layer = worker.construct("model", "Block", 32, 4, 0.0)
        out = worker.call(layer, "forward", x)          # a plain torch.Tensor
        values, weights = worker.call("model", "attend", q, k, v)

Every method sends one request and waits for its reply. Failures are exceptions from
`graders.sandbox.errors`; after a crash or a timeout the next request starts a fresh worker
(handles from the old one are refused), so grading goes on with the next check.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Iterable, NoReturn

import graders
from graders.dependencies import (
    broken_dependency_message, dependency_module, grader_distribution, import_name, missing_dependency_message,
)

from . import audit, isolation, rootfs, walk
from .channel import PollingChannel, ThreadedChannel, ThreadedOutputTail, new_marker
from .errors import (BudgetExhausted, MissingDependency, ProtocolError, RequestError, StudentError,
                     WorkerCrashed, WorkerTimeout)
from .isolation import IsolationUnavailable, Layers
from .limits import Limits
from .output import OutputTail
from .protocol import Handle, MessageEncoder, decode
from .spawn import base_environment, pipe, spawn, start_self_check_worker, take_prestarted

MAX_ERROR_TEXT = 50_000
ENVIRONMENT_PROBE = "environment_probe"  # the module a probe's empty submission holds
# How long a dead worker's processes get to release their pipes after the kill.
REAP_TIMEOUT_S = 5.0
SHUTDOWN_TIMEOUT_S = 1.0
# Audit-hook denials kept per Worker (over all its restarts); more are only counted.
MAX_AUDIT_DENIALS = 100
CONTAINER_NOTE = ("container isolation: a uid of its own that the OS denies every secret, rlimits, the audit hook, "
                  "a seccomp filter, pinned CPUs, a watched write bound, a file system of its own (a tree of links, "
                  "secrets absent), everything of its uid ended after it; no PID namespace (no /proc in its root: it "
                  "lists no process, and may signal only its uid's)")
CONTAINER_GPU_NOTE = CONTAINER_NOTE.replace(
    "a file system of its own (a tree of links, secrets absent)",
    "the machine's file system, its secrets unreadable by that uid (a GPU worker: CUDA in a root of links is untried)")


class Worker:
    """One sandboxed worker process for one submission.

    `require_isolation` (the default) refuses, with `IsolationUnavailable`, to start anything on
    a machine without every layer of `isolation_level` (`full`: bubblewrap, root to switch to a
    uid of the worker's own, the secrets unreadable by that uid; `container`: the same without
    bubblewrap, for a one-shot container, graders/sandbox/isolation.py): what grading others'
    code needs. False (a student's own
    code on their own machine, or an explicit unsafe grade) uses what the machine has.
    `secret_paths`: files and folders the worker must not read (hidden fixtures, the grader's
    output directory, datasets with labels); the reference solution, the repository's
    fixtures and other workers' directories are always added. `use_bwrap`: None uses
    bubblewrap where it works, True requires it, False runs without it. `task_modules`: extra
    modules that register harness tasks, imported in the worker before student code;
    `packages`: {import name: folder} of packages those modules are in that are not installed
    (an assignment pack given by its path), which must then be among `readable_paths`.
    `readable_paths`: what the worker may read besides the system folders and its own Python
    (feature caches, an encoder); under bubblewrap nothing else of the machine is there.
    `containment_only` (a self-check: the student's own code on the student's own machine,
    Linux, macOS, Windows or a notebook) contains crashes and hangs and nothing more: no
    bubblewrap, no user switch, no audit hook, rlimits where the platform has them, and pipes
    served by threads (graders/sandbox/channel.py); nothing Linux- or POSIX-only is needed
    (docs/selfcheck.md). `preload`: grader-side modules a self-check's worker imports before its
    configuration arrives (graders/sandbox/spawn.py).
    """

    def __init__(self, submission_dir: str | os.PathLike, *, limits: Limits = Limits(),
                 secret_paths: Iterable[str | os.PathLike] = (), allow_gpu: bool = False,
                 use_bwrap: bool | None = None, task_modules: Iterable[str] = (),
                 readable_paths: Iterable[str | os.PathLike] = (), require_isolation: bool = True,
                 containment_only: bool = False, preload: Iterable[str] = (),
                 packages: dict[str, str | os.PathLike] | None = None, isolation_level: str = isolation.FULL) -> None:
        self.submission_dir = Path(submission_dir).resolve()
        if not self.submission_dir.is_dir():
            raise NotADirectoryError(f"no submission folder at {self.submission_dir}")
        self.limits = limits
        self.secret_paths = sorted({os.path.realpath(p) for p in [*secret_paths, *default_secret_paths()]})
        self.readable_paths = sorted({os.path.realpath(p) for p in readable_paths})
        conflict = isolation.conflicting_secret(self.secret_paths, self.readable_paths)
        if conflict:
            raise ValueError(f"the secret path {conflict[0]} would hide {conflict[1]}, which the worker needs")
        self.allow_gpu = allow_gpu
        self.task_modules = list(task_modules)
        self.packages = {name: os.path.realpath(folder) for name, folder in (packages or {}).items()}
        self.containment_only = containment_only
        self.preload = tuple(preload)
        if containment_only:
            if require_isolation or use_bwrap:
                raise ValueError("containment_only runs without isolation: require_isolation=False, use_bwrap not True")
            self._uid_lease = self._lease_finalizer = None
            self.layers: Layers = Layers(False, None, note="self-check: the student's own code on their own machine, "
                                                           "contained (crashes, hangs), not isolated",
                                         containment_only=True)
        else:
            self._choose_isolation(limits, use_bwrap, require_isolation, isolation_level)
        self.last_output = ""  # what the student's code printed during the last request
        self.time_used_s = 0.0  # counted against limits.submission_budget_s
        self.starts = 0  # worker processes started so far; handles carry it as their generation
        # What the audit hook refused ({"event", "detail"}), as the worker reported it: a
        # tripwire for a person to review, not evidence (student code can tamper with it).
        self.audit_denials: list[dict[str, str]] = []
        self.audit_denials_dropped = 0
        self._lock = threading.RLock()
        self._stopping = threading.Lock()  # the write watch's stop, from its thread or the grader's
        self._closed = False
        self._environment_probes: dict[str, bool] = {}  # {dependency: imports without the submission}
        self._process: subprocess.Popen | None = None
        self._next_request_id = 1

    # ------------------------------------------------------------------ life cycle

    def start(self) -> None:
        """Start the worker if it is not running (requests do this by themselves)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this Worker has been closed")
            if self._process is not None:
                return
            started = time.monotonic()
            try:
                # Made once per grading process, brought up to date before the worker's clock
                # starts: seconds on first use, more where stale trees are removed first.
                root = self._own_root() if self.layers.own_root else None
                deadline, limit, budget_bound = self._deadline(self.limits.start_timeout_s)
                self._launch(root)
                self._await_reply(0, deadline, limit, budget_bound, starting=True)
                self._watch_space()
            finally:
                self.time_used_s += time.monotonic() - started

    def restart(self) -> None:
        with self._lock:
            if self._process is not None:
                self._stop()
            self.start()

    def abort(self) -> None:
        """From another thread than the one waiting on a request: kill the worker now, so that
        the request fails (as a crash) instead of running to its end. `close` still follows."""
        process = self._process
        if process is not None:
            _kill_group(process.pid, None)

    def close(self) -> None:
        """Stop the worker and everything it started, and remove its directory. Final."""
        with self._lock:
            if self._process is not None:
                self._ask_to_exit()
                self._stop()
            self._closed = True
            self._release_uid()

    def _choose_isolation(self, limits: Limits, use_bwrap: bool | None, require_isolation: bool, level: str) -> None:
        from . import uids  # POSIX-only (file locks): never imported by a self-check

        if require_isolation:
            if use_bwrap is False and level == isolation.FULL:
                raise ValueError("full isolation needs bubblewrap: use_bwrap=False goes with require_isolation=False")
            isolation.require_isolation(level)
            # Container isolation takes bubblewrap where it works after all: full is more.
            use_bwrap = True if level == isolation.FULL else use_bwrap
        self._uid_lease = (uids.lease(base_uid=limits.sandbox_uid, base_gid=limits.sandbox_gid,
                                      slots=limits.sandbox_slots)
                           if os.geteuid() == 0 else None)
        self._lease_finalizer = weakref.finalize(self, self._uid_lease.release) if self._uid_lease else None
        try:
            self.layers = isolation.choose_layers(
                use_bwrap=use_bwrap, sandbox_uid=self._uid_lease.uid if self._uid_lease else limits.sandbox_uid,
                slot=self._uid_lease.slot if self._uid_lease else 0, threads=limits.threads, gpu=self.allow_gpu)
            if require_isolation and self.layers.level == isolation.NONE:
                raise IsolationUnavailable(isolation.missing_layers_message(isolation.isolation_problems(level), level))
            if require_isolation and self.layers.level == isolation.CONTAINER:
                self.layers = dataclasses.replace(
                    self.layers, note=CONTAINER_NOTE if self.layers.own_root else CONTAINER_GPU_NOTE)
            self._protect_secrets(require_isolation)
        except BaseException:
            self._release_uid()
            raise
        if self.layers.sandbox_uid is None:
            # Root without a reachable interpreter (only without isolation: unsafe or a self-check);
            # `layers.note` says so in the results, and an unsafe grade warns in every output.
            self._release_uid()

    def _release_uid(self) -> None:
        if self._lease_finalizer is not None:
            self._lease_finalizer()  # releases the lease once, now

    def _protect_secrets(self, required: bool) -> None:
        """The OS layer under the namespaces: secrets unreadable by the worker's uid itself, so
        that they stay out of reach where a bind or a mask of bubblewrap would miss them."""
        if self.layers.sandbox_uid is None:
            return
        readable = isolation.deny_to_sandbox_user(isolation.os_protected(self.secret_paths), uid=self.layers.sandbox_uid,
                                                 gid=self._uid_lease.gid)
        if readable and required:
            raise IsolationUnavailable(
                f"refusing to grade: the sandbox user (uid {self.layers.sandbox_uid}) can still read {readable[0]} "
                "after its permissions for others were removed (an ACL? `getfacl` shows it); make it readable "
                "by its owner only")

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def running(self) -> bool:
        return self._process is not None

    @property
    def budget_left_s(self) -> float:
        return max(0.0, self.limits.submission_budget_s - self.time_used_s)

    # ------------------------------------------------------------------ requests

    def ping(self) -> None:
        self._request("ping")

    def import_module(self, module: str) -> None:
        """Import a module of the submission (`"attention"`); StudentError if it fails."""
        self._request("import", texts={"module": module})

    def construct(self, module: str, cls: str, /, *args: Any, **kwargs: Any) -> Handle:
        return self._request("construct", texts={"module": module, "name": cls},
                             values={"args": list(args), "kwargs": kwargs})

    def call(self, target: str | Handle, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Call a function of a submission module (`target` its name) or a method of an object
        in the worker (`target` its handle; `name="__call__"` calls the object itself)."""
        texts, values = _target(target)
        return self._request("call", texts={"name": name, **texts},
                             values={"args": list(args), "kwargs": kwargs, **values})

    def getattr(self, target: str | Handle, name: str) -> Any:
        """An attribute of a submission module or of an object in the worker."""
        texts, values = _target(target)
        return self._request("getattr", texts={"name": name, **texts}, values=values)

    def state_dict(self, handle: Handle) -> dict[str, Any]:
        """What the object's `state_dict()` returns: normally names to plain tensors."""
        return self._request("state_dict", values={"handle": handle})

    def load_state_dict(self, handle: Handle, state_dict: dict[str, Any], strict: bool = True) -> dict[str, list[str]]:
        """Returns `{"missing_keys": [...], "unexpected_keys": [...]}`."""
        result = self._request("load_state_dict", values={"handle": handle, "state_dict": state_dict,
                                                          "strict": strict})
        self._expect(isinstance(result, dict) and set(result) == {"missing_keys", "unexpected_keys"}
                     and all(isinstance(key, str) for keys in result.values() for key in keys),
                     "load_state_dict")
        return result

    def parameters(self, handle: Handle) -> dict[str, list[dict[str, Any]]]:
        """`{"parameters": [{name, shape, dtype, requires_grad}], "buffers": [{name, shape, dtype,
        persistent}]}` of a `torch.nn.Module` in the worker."""
        result = self._request("parameters", values={"handle": handle})
        self._expect(isinstance(result, dict) and set(result) == {"parameters", "buffers"}
                     and all(isinstance(entry, dict) and isinstance(entry.get("name"), str)
                             and isinstance(entry.get("shape"), list) for entries in result.values()
                             for entry in entries),
                     "parameters")
        return result

    def seed(self, seed: int) -> None:
        """Seed torch, random and numpy in the worker."""
        self._request("seed", values={"seed": seed})

    def task(self, name: str, /, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        """Run a harness task (see `graders.sandbox.harness`), with its own wall-clock limit."""
        return self._request("task", texts={"name": name}, values={"args": list(args), "kwargs": kwargs},
                             timeout=timeout)

    def free(self, *handles: Handle) -> None:
        """Let the worker drop objects the grader no longer needs (handles of a previous
        worker are ignored: their objects died with it)."""
        with self._lock:
            ids = [h.id for h in handles if h.generation == self.starts]
            if ids and self._process is not None:
                self._request("free", values={"ids": ids})

    # ------------------------------------------------------------------ internals

    def _request(self, op: str, *, texts: dict[str, str] | None = None,
                 values: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        with self._lock:
            self.start()
            encoder = MessageEncoder(_refuse_to_send, generation=self.starts)
            header: dict[str, Any] = {"id": self._next_request_id, "op": op, **(texts or {})}
            for field, value in (values or {}).items():
                header[field] = encoder.encode(value)
            self._next_request_id += 1
            deadline, limit, budget_bound = self._deadline(timeout or self.limits.call_timeout_s)
            started = time.monotonic()
            try:
                try:
                    self._channel.send(header, encoder.tensors, deadline)
                except BrokenPipeError:
                    pass  # the worker is gone; reading its reply tells how it went
                except TimeoutError:
                    self._timed_out(limit, budget_bound)
                return self._await_reply(header["id"], deadline, limit, budget_bound)
            finally:
                self.time_used_s += time.monotonic() - started

    def _deadline(self, limit: float) -> tuple[float, float, bool]:
        """The deadline of a request of at most `limit` seconds, the limit that applies, and
        whether the submission's budget is what binds."""
        left = self.budget_left_s
        if left <= 0:
            raise BudgetExhausted(f"the submission used up its time budget of {self.limits.submission_budget_s:g} s",
                                  timeout_s=self.limits.submission_budget_s)
        return time.monotonic() + min(limit, left), min(limit, left), left < limit

    def _await_reply(self, request_id: int, deadline: float, limit: float, budget_bound: bool,
                     starting: bool = False) -> Any:
        try:
            header, tensors = self._channel.receive(deadline)
        except TimeoutError:
            self._timed_out(limit, budget_bound, starting)
        except (EOFError, OSError):
            self._died(starting)
        except ProtocolError as error:
            self._malformed(str(error))
        if self._space_watch is not None and (exceeded := self._space_watch.check(pids=[self._process.pid])):
            self._stop_writer(exceeded)  # past its write bound: the reply is not used
            self._died(starting)
        self.last_output = self._output.take()
        try:
            return self._interpret(header, tensors, request_id)
        except ProtocolError as error:
            self._malformed(str(error), self.last_output)

    def _expect(self, condition: bool, what: str) -> None:
        if not condition:
            self._malformed(f"unexpected reply to {what}", self.last_output)

    def _malformed(self, problem: str, earlier_output: str = "") -> NoReturn:
        # Whatever runs in the worker no longer answers as the worker does; stop trusting it.
        output = earlier_output + (self._stop() if self._process is not None else "")
        raise ProtocolError(f"the worker sent a malformed reply and was stopped: {problem}",
                            output=output) from None

    def _interpret(self, header: dict, tensors: dict, request_id: int) -> Any:
        if header.get("id") != request_id or type(header.get("ok")) is not bool:
            raise ProtocolError("the reply does not answer the request")
        if "audit" in header:
            denials, dropped = _audit_report(header.pop("audit"))
            room = max(0, MAX_AUDIT_DENIALS - len(self.audit_denials))
            self.audit_denials.extend(denials[:room])
            self.audit_denials_dropped += dropped + max(0, len(denials) - room)
        if header["ok"]:
            if set(header) != {"id", "ok", "value"}:
                raise ProtocolError("unexpected fields in a reply")
            return decode(header["value"], tensors, self._handle)
        error = header.get("error")
        if type(error) is not dict or set(header) != {"id", "ok", "error"}:
            raise ProtocolError("malformed error reply")
        kind = error.get("kind")
        if kind == "student":
            raise StudentError(_text(error, "type"), _text(error, "message"), _text(error, "traceback"),
                               debug_traceback=_text(error, "debug_traceback"), output=self.last_output)
        if kind == "request":
            raise RequestError(_text(error, "message"), output=self.last_output)
        if kind == "environment":
            module = _text(error, "module")
            message = missing_dependency_message(module)
            if message is not None and error.get("problem") is not None:
                message = broken_dependency_message(module, _text(error, "problem"))
            if message is None:  # only a dependency of the grader's may be blamed on the environment
                raise ProtocolError(f"the worker blamed the environment for {module[:100]!r}, not a grader dependency")
            if self._imports_without_the_submission(module):
                top = module.partition(".")[0]
                problem = " ".join(_text(error, "problem").split())[:300]
                said = f" ({problem})" if problem else ""
                raise StudentError("ImportError", f"{module} cannot be imported beside your code{said}, though the "
                                   "grader's environment imports it without your code: does a file of your submission "
                                   f"have the name of {top} or of a module it imports ({top}.py, say), or does your "
                                   "code change sys.modules or the import system?", "", output=self.last_output)
            raise MissingDependency(message, module=module, output=self.last_output)
        if kind == "exit":
            code = _text(error, "code")
            try:
                status = self._process.wait(REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                status = None
            output = self.last_output + self._stop()
            raise WorkerCrashed(f"the student's code called sys.exit({code})", exit_status=status, output=output)
        raise ProtocolError(f"unknown error kind {kind!r}")

    def _imports_without_the_submission(self, module: str) -> bool:
        """Whether the grader dependency that `module` belongs to imports in a worker like this one
        but for the submission (an empty folder): where it does, the worker that reported it
        missing or broken was broken by the submission's code. Asked once per dependency; a probe
        that cannot run proves nothing, and the environment stays blamed."""
        # The module that failed when the grader can find it among its dependency's files (the
        # package alone may import lazily, and prove nothing about a module inside it), else the
        # package. The name is then the grader's own, never the worker's text.
        top = dependency_module(module) or import_name(grader_distribution(module))
        if top not in self._environment_probes:
            try:
                with tempfile.TemporaryDirectory(prefix="probe-") as empty:
                    # The module's name is the grader's own (graders/dependencies.py), never the worker's text.
                    Path(empty, ENVIRONMENT_PROBE + ".py").write_text(f"import {top}\n")
                    # Importing a library is a start's work: the probe gets the start's time for it.
                    limits = dataclasses.replace(self.limits, call_timeout_s=self.limits.start_timeout_s,
                                                 submission_budget_s=2 * self.limits.start_timeout_s)
                    with EnvironmentProbe(empty, limits=limits, secret_paths=self.secret_paths,
                                          readable_paths=self.readable_paths, require_isolation=False,
                                          use_bwrap=None if self.containment_only else self.layers.bwrap,
                                          containment_only=self.containment_only) as probe:
                        probe.import_module(ENVIRONMENT_PROBE)
                self._environment_probes[top] = True
            except Exception:  # noqa: BLE001  missing, broken, or no probe at all: the environment's
                self._environment_probes[top] = False
        return self._environment_probes[top]

    def _handle(self, handle_id: int, type_name: str) -> Handle:
        return Handle(handle_id, type_name, self.starts)

    def _timed_out(self, limit: float, budget_bound: bool, starting: bool = False) -> NoReturn:
        output = self._stop()
        if budget_bound:
            raise BudgetExhausted(
                f"the submission used up its time budget of {self.limits.submission_budget_s:g} s",
                timeout_s=limit, output=output) from None
        what = "starting the worker" if starting else "the call"
        raise WorkerTimeout(f"{what} timed out after {limit:g} s; the worker was stopped",
                            timeout_s=limit, output=output) from None

    def _died(self, starting: bool) -> NoReturn:
        process = self._process
        try:
            status = process.wait(REAP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            status = None  # its pipes closed but it lingers: _stop kills it
        output = self._stop()
        reason = self._space_exceeded or describe_exit(status, via_bwrap=self.layers.bwrap,
                                                       cpu_seconds=self.limits.cpu_seconds)
        if starting:  # no student code has run yet: this is the installation's problem, show why
            last_lines = "\n".join(output.strip().splitlines()[-15:])
            reason = f"the worker failed to start: {reason}; its last output:\n{last_lines}"
        elif status is not None and status >= 0 and reason.endswith(f"status {status}"):
            reason += f" (did the student's code call os._exit({status})?)"
        raise WorkerCrashed(reason, exit_status=status, output=output) from None

    def _launch(self, root: Path | None) -> None:
        """Start the worker process (`root`: its own root, container isolation)."""
        run_as = (self.layers.sandbox_uid, self._uid_lease.gid) if self.layers.sandbox_uid is not None else None
        private = self.layers.private_mounts
        workdir = isolation.make_workdir(self.submission_dir, owner=None if private else run_as,
                                         parent=None if root is None else root / rootfs.WORKERS)
        # Where the worker finds its folder: inside its own root, if it has one.
        seen_as = workdir if root is None else rootfs.inner_path(root, workdir)
        config = {
            "submission_dir": str(seen_as / "submission"), "workdir": str(seen_as),
            "secret_paths": self.secret_paths, "task_modules": self.task_modules, "packages": self.packages,
            "limits": self.limits.to_json(), "gpu": self.allow_gpu, "run_as": run_as,
            "private_source": isolation.SUBMISSION_SOURCE if private else None,
            # Without bwrap the worker's parent is this process, and it checks that it still is.
            "parent_pid": None if self.layers.bwrap else os.getpid(),
            "containment_only": self.containment_only,
            "confinement": {**self.layers.confinement(), "root": None if root is None else str(root)},
        }
        try:
            if self.containment_only:
                process, channel, output = self._start_contained(workdir, config)
            else:
                process, channel, output = self._start_isolated(workdir, config, seen_as)
        except BaseException:
            walk.discard(workdir)
            raise
        self._process = process
        self._workdir = workdir
        self._space_exceeded = ""
        self._space_watch = None  # from its first reply on (`_watch_space`)
        self._channel = channel
        self._output = output
        # A Worker dropped without close() must not leave its process behind.
        self._finalizer = weakref.finalize(self, _kill_group, process.pid, workdir)
        self.starts += 1
        self.last_output = ""

    def _start_isolated(self, workdir: Path, config: dict,
                        seen_as: Path) -> tuple[subprocess.Popen, PollingChannel, OutputTail]:
        """The worker (in bubblewrap where the layers say so) with its protocol pipes as
        inherited descriptors, in a session of its own: POSIX. `seen_as`: where the worker
        finds `workdir` once in its own root."""
        request_read, request_write = pipe()
        reply_read, reply_write = pipe()
        output_read, output_write = os.pipe()
        config = {**config, "request_fd": request_read, "reply_fd": reply_write}
        command = [sys.executable, "-s", "-m", "graders.sandbox.worker", json.dumps(config)]
        if self.layers.bwrap:
            command = [*isolation.bwrap_command(isolation.find_bwrap(), workdir=workdir,
                                                secret_paths=self.secret_paths,
                                                readable_paths=self.readable_paths, gpu=self.allow_gpu,
                                                task_modules=self.task_modules,
                                                private_mounts=self.layers.private_mounts,
                                                tmp_bytes=self.limits.tmp_bytes),
                       *command]
        process = spawn(command, ours=(request_write, reply_read, output_read),
                        theirs=(request_read, reply_write, output_write),
                        stdin=subprocess.DEVNULL, stdout=output_write, stderr=output_write,
                        pass_fds=(request_read, reply_write), cwd=workdir, env=self._environment(seen_as))
        channel = PollingChannel(request_write, reply_read, max_bytes=self.limits.max_message_bytes,
                                 max_header_bytes=self.limits.max_header_bytes)
        return process, channel, OutputTail(output_read, self.limits.max_output_bytes)

    def _start_contained(self, workdir: Path, config: dict) -> tuple[subprocess.Popen, ThreadedChannel,
                                                                     ThreadedOutputTail]:
        """A self-check's worker (graders/sandbox/spawn.py): the one started ahead by `grade
        check` if it runs with these settings, else a new one; then its configuration, the
        first message on its request pipe, with the folders of its own in its environment."""
        started = (take_prestarted(threads=self.limits.threads, preload=self.preload)
                   or start_self_check_worker(threads=self.limits.threads, preload=self.preload))
        marker = new_marker()
        own_folders = {"HOME": str(workdir), "TMPDIR": str(workdir / "tmp")}
        own_folders["TEMP"] = own_folders["TMP"] = own_folders["TMPDIR"]  # Windows's names for it
        config = {**config, "output_marker": marker.hex(), "environment": own_folders}
        channel = ThreadedChannel(started.request_write, started.reply_read, max_bytes=self.limits.max_message_bytes,
                                  max_header_bytes=self.limits.max_header_bytes)
        output = ThreadedOutputTail(started.output_read, self.limits.max_output_bytes, marker)
        channel.send(config, {}, time.monotonic() + self.limits.call_timeout_s)
        return started.process, channel, output

    def _environment(self, workdir: Path) -> dict[str, str]:
        environment = {**base_environment(self.limits.threads), "HOME": str(workdir),
                       "TMPDIR": str(workdir / "tmp")}
        if not self.allow_gpu:
            environment["CUDA_VISIBLE_DEVICES"] = ""  # empty hides every GPU; unset would show all
            return environment
        # batches of every length: growing segments leave fewer cached blocks unused in between
        environment["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        if self.layers.bwrap:  # its /dev holds exactly its own GPUs, named by UUID
            visible = isolation.gpu_view(os.environ.get("CUDA_VISIBLE_DEVICES")).visible
        else:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            environment["CUDA_VISIBLE_DEVICES"] = visible
        return environment

    def _own_root(self) -> Path:
        """The tree this worker changes its root to (container isolation), up to date: what
        bubblewrap would bind, without the secrets inside it."""
        sources, hidden = isolation.own_root_sources(self.readable_paths, self.task_modules)
        return rootfs.prepared_root(sources, [*self.secret_paths, *hidden], isolation.workdirs_parent())

    def _watch_space(self) -> None:
        """Without private mounts, the watch of what the worker's uid writes (container
        isolation). From the worker's first reply: no student code has run before it, and until
        then the worker, between its change of uid and making itself dumpable again, hides its
        descriptors from the watch, which would stop it (isolation.space_used fails closed)."""
        if self.layers.space_watch:
            self._space_watch = isolation.SpaceWatch(
                self._workdir, self.layers.sandbox_uid, self._uid_lease.gid, max_bytes=self.limits.workdir_bytes,
                max_files=self.limits.workdir_files, exceeded=self._stop_writer,
                shared_folders=() if self.layers.own_root else None)
            if exceeded := self._space_watch.check(pids=[self._process.pid]):  # the submission's copy
                self._stop_writer(exceeded)
                self._died(starting=True)

    def _stop_writer(self, reason: str) -> None:
        """From the space watch's thread, or on a reply: end every process of the worker's uid
        now; the request waiting on it fails with `reason`. The first reason stands (while the
        uid's processes are being ended, a count may meet the killer between its change of uid
        and its exec, whose descriptors it may not read)."""
        from . import uids

        with self._stopping:
            if self._space_exceeded:
                return
            self._space_exceeded = reason
        self.abort()
        uids.kill_processes_of(self._uid_lease.uid, self._uid_lease.gid)

    def _ask_to_exit(self) -> None:
        """Ask politely first; `_stop` kills whatever is still there right after."""
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT_S
        try:
            self._channel.send({"id": self._next_request_id, "op": "shutdown"}, {}, deadline)
            self._process.wait(max(0.0, deadline - time.monotonic()))
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _stop(self) -> str:
        """Kill the worker's process group, reap it, and return its last output."""
        process, self._process = self._process, None
        self._finalizer.detach()
        if self._space_watch is not None:
            self._space_watch.stop()
        _kill_group(process.pid, None)
        process.wait()
        if self._uid_lease is not None and self.layers.sandbox_uid is not None:
            from . import uids

            # Before any result is written: every process of the uid (those that left the group
            # too), then its keyrings, IPC objects and files in the shared folders.
            uids.end_everything_of(self._uid_lease.uid, self._uid_lease.gid)
        self._channel.close()
        # With bwrap the worker is in its own session inside a PID namespace; it dies with
        # bwrap. Waiting for the end of its output means every process that held it is gone.
        output = self._output.close(timeout=REAP_TIMEOUT_S)
        walk.discard(self._workdir)  # what the student made of it (however deep) cannot break the next worker
        return output


class EnvironmentProbe(Worker):
    """A worker that imports one grader dependency and nothing of a submission: what it reports
    missing or broken is the environment's."""

    def _imports_without_the_submission(self, module: str) -> bool:
        return False


def default_secret_paths() -> list[str]:
    """Always hidden from workers: the reference solution, the repository's fixtures (sample
    submissions, golden outputs) and the directories of other workers."""
    paths = [str(isolation.workdirs_parent())]
    reference = importlib.util.find_spec("reference")
    if reference is not None and reference.submodule_search_locations:
        paths += list(reference.submodule_search_locations)
    fixtures = Path(graders.__file__).resolve().parent.parent / "fixtures"
    if fixtures.is_dir():
        paths.append(str(fixtures))
    return paths


def describe_exit(status: int | None, *, via_bwrap: bool, cpu_seconds: int | None) -> str:
    """A sentence for a worker that ended with `status` (Popen.returncode; bwrap reports a
    child killed by signal N as exit status 128 + N)."""
    if status is None:
        return "the worker closed its channel and did not exit; it was killed"
    if status < 0:
        signal_number = -status
    elif via_bwrap and status > 128:
        signal_number = status - 128
    else:
        return f"the worker exited with status {status}"
    try:
        name = signal.Signals(signal_number).name
    except ValueError:
        name = f"signal {signal_number}"
    explanations = {  # by name: Windows has no SIGKILL, SIGXCPU or SIGBUS
        "SIGKILL": "out of memory?",
        "SIGXCPU": f"it used up its CPU time limit of {cpu_seconds} s",
        "SIGSEGV": "a crash in native code",
        "SIGBUS": "a crash in native code",
        "SIGABRT": "aborted, e.g. by a failed check in native code",
    }
    explanation = explanations.get(name)
    return f"the worker was killed by signal {signal_number} ({name}{': ' + explanation if explanation else ''})"


def _target(target: str | Handle) -> tuple[dict[str, str], dict[str, Handle]]:
    """The text and value fields that name a call's target."""
    if isinstance(target, Handle):
        return {}, {"handle": target}
    if isinstance(target, str):
        return {"module": target}, {}
    raise TypeError(f"a target is a module name or a Handle, not {type(target).__name__}")


def _refuse_to_send(value: Any) -> Handle:
    raise RequestError(f"a {type(value).__name__} cannot be sent to the worker "
                       "(only values, tensors, arrays and handles can)")


def _audit_report(report: Any) -> tuple[list[dict[str, str]], int]:
    """The denials a reply reports, checked as strictly as the rest of it."""
    if type(report) is not dict or set(report) != {"denials", "dropped"}:
        raise ProtocolError("malformed audit report")
    denials, dropped = report["denials"], report["dropped"]
    if type(denials) is not list or len(denials) > audit.MAX_DENIALS or type(dropped) is not int \
            or not 0 <= dropped <= 1 << 53:
        raise ProtocolError("malformed audit report")
    for entry in denials:
        if (type(entry) is not dict or set(entry) != {"event", "detail"}
                or type(entry["event"]) is not str or not 0 < len(entry["event"]) <= audit.MAX_EVENT_CHARS
                or type(entry["detail"]) is not str or len(entry["detail"]) > audit.MAX_DETAIL_CHARS):
            raise ProtocolError("malformed audit report")
    return [{"event": entry["event"], "detail": entry["detail"]} for entry in denials], dropped


def _text(error: dict, field: str) -> str:
    value = error.get(field, "")
    if type(value) is not str:
        raise ProtocolError(f"malformed {field!r} in an error reply")
    return value[-MAX_ERROR_TEXT:]


def _kill_group(pid: int, workdir: Path | None) -> None:
    if hasattr(os, "killpg"):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    else:  # Windows: no process group to signal; this terminates the worker itself
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass  # it has exited
    if workdir is not None:
        walk.discard(workdir)
