"""The operating-system layers around a worker: bubblewrap, the sandbox user, its directory.

- bubblewrap (when installed and working): new network, PID, IPC and UTS namespaces (no
  network at all), and a file system of its own: the system folders, the worker's Python and
  packages and the paths the caller names, all read-only, a private /tmp, and the worker's own
  directory as the only writable place. Nothing else of the machine is there (another copy of
  the solution, home folders); an empty tmpfs (or /dev/null) covers secret paths inside what is.
- The sandbox user (when the grader runs as root): the worker drops to an unprivileged uid of
  its own (graders/sandbox/uids.py), so RLIMIT_NPROC binds per student and root-only files are
  out of reach. Without bubblewrap this needs the interpreter to be readable by that user; when
  it is not (a Python under /root), the worker stays root, which `Layers.note` records.
- Private writable space (bubblewrap as root): the worker's folder and /dev/shm are tmpfs mounts
  limited in bytes and files, made by the worker before it drops to its uid (/tmp is a small
  tmpfs of root's that the worker cannot write to); the
  submission arrives read-only and is copied in. Nothing the student writes reaches the disk.
- A fresh directory per worker, under a directory that other users cannot list, holding a
  copy of the submission: the worker never sees where the submission came from.

`require_isolation` is the fail-closed gate of instructor grading: it refuses, with the fix, on
a machine where any layer of the chosen level is missing. Two levels:

- `full` (the default): every layer above.
- `container`, chosen explicitly (`--isolation container`), for a container such as
  Gradescope's (one submission each, thrown away after it), where Docker's default seccomp
  profile forbids the namespaces bubblewrap needs; a batch on one machine too, one submission at a
  time where its workers get the GPU (`container_batch_refusal`). It is a boundary of its own, not a
  weaker full mode: the worker drops to a uid of its own that the operating system denies
  every secret (the reference, the hidden fixtures: checked, not assumed), under rlimits, the
  audit hook and a seccomp filter (no socket but AF_UNIX, no SysV IPC, keyring, io_uring or CPU
  change), pinned to its CPUs, in a fresh directory that TMPDIR and HOME point into; it makes
  network and IPC namespaces of its own where the kernel lets root `unshare` them; it changes
  its root to a tree of links that holds what bubblewrap would bind, secrets left out
  (graders/sandbox/rootfs.py, holding what graders/sandbox/exposure.py allows; not for a GPU
  worker); what its uid writes is watched against the bound of full isolation's tmpfs
  (`SpaceWatch`); and after it, every process, keyring key,
  IPC object and shared-folder file of its uid is ended (graders/sandbox/uids.py). Missing
  there: a PID namespace. It still fails closed: not root, or an interpreter the uid cannot
  reach, or a secret it can still read, refuses the grade.

Both levels keep the grader's outputs in a folder that no sandbox uid can create or open
(graders/atomic.py, `private_output_folder`).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import importlib.util
import os
import platform
import re
import shutil
import site
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import graders

from . import seccomp, walk
from .audit import pth_folders
from .exposure import SYSTEM_PATHS, exposure

BWRAP_CANDIDATES = ("bwrap", "/usr/bin/bwrap")
# Names the bubblewrap binary to use instead of searching PATH; empty: behave as if none exists.
BWRAP_ENVIRONMENT = "TRANSFORMER_GRADER_BWRAP"
# Inside the sandbox, where the read-only copy of the submission is bound when the worker builds
# its own writable folder (private mounts).
SUBMISSION_SOURCE = "/.submission"
# The isolation levels instructor grading may require (module docstring).
FULL, CONTAINER, NONE = "full", "container", "none"
LEVELS = (FULL, CONTAINER)


@dataclass(frozen=True)
class Layers:
    """Which sandbox layers a worker runs under; recorded with the results."""

    bwrap: bool
    sandbox_uid: int | None  # the uid the worker switches to; None: it keeps the grader's
    note: str = ""  # why a layer is missing
    private_mounts: bool = False  # its writable space is size-limited tmpfs (bwrap as root)
    # A self-check: crashes and hangs contained, nothing isolated; no audit hook, and rlimits
    # only where the platform has them.
    containment_only: bool = False
    # Without bubblewrap (as root): network and IPC namespaces the worker makes for itself
    # before it drops to its uid, where the kernel allows it (not in Docker's default profile).
    own_namespaces: bool = False
    # The seccomp filter (graders/sandbox/seccomp.py): with a sandbox uid, in both levels.
    seccomp: bool = False
    # The CPUs the worker is pinned to (and may not leave: the filter refuses sched_setaffinity).
    cpus: tuple[int, ...] | None = None
    # Without private mounts: a watcher of what the uid has written, which kills the worker
    # past Limits.workdir_bytes or workdir_files.
    space_watch: bool = False
    # Without bubblewrap (as root): a file system of its own, a tree of links the worker
    # changes its root to before it drops to its uid (graders/sandbox/rootfs.py).
    own_root: bool = False

    @property
    def full(self) -> bool:
        """Every layer: what instructor grading requires by default."""
        return self.bwrap and self.sandbox_uid is not None and self.private_mounts

    @property
    def level(self) -> str:
        """`full`, `container` (a uid of its own, rlimits, the audit hook; no namespaces), or
        `none` (the worker kept the grader's user: unsafe, or a self-check)."""
        if self.full:
            return FULL
        return CONTAINER if self.sandbox_uid is not None and not self.containment_only else NONE

    def to_json(self) -> dict:
        # Every worker but a self-check's has the rlimits and the audit hook.
        rlimits = not self.containment_only or importlib.util.find_spec("resource") is not None
        return {"bwrap": self.bwrap, "sandbox_uid": self.sandbox_uid, "private_mounts": self.private_mounts,
                "full_isolation": self.full, "level": self.level, "rlimits": rlimits,
                "audit_hook": not self.containment_only, "own_namespaces": self.own_namespaces,
                "seccomp": self.seccomp, "cpus": list(self.cpus) if self.cpus is not None else None,
                "space_watch": self.space_watch, "own_root": self.own_root, "note": self.note}

    def confinement(self) -> dict:
        """What the worker applies to itself before it drops to its uid (graders/sandbox/worker.py)."""
        return {"unshare": self.own_namespaces, "seccomp": self.seccomp,
                "cpus": list(self.cpus) if self.cpus is not None else None,
                # AF_UNIX sockets reach only what a network namespace of its own holds.
                "allow_unix_sockets": self.bwrap or self.own_namespaces,
                # The write watch reads its descriptors as its uid (isolation.space_used).
                "dumpable": self.space_watch}


class IsolationUnavailable(RuntimeError):
    """Instructor grading refused: a layer of the sandbox is missing on this machine."""


def choose_layers(*, use_bwrap: bool | None, sandbox_uid: int, slot: int = 0, threads: int = 1,
                  gpu: bool = False) -> Layers:
    """`use_bwrap`: None uses bubblewrap where it works, True requires it, False avoids it.
    `sandbox_uid`: the uid leased for this worker (used only when the grader is root), `slot`
    its place in the pool, which chooses its `threads` CPUs. `gpu`: a worker given the GPU,
    which gets no own root (CUDA in a root without /proc and /sys, which the driver reads, is
    untried): it keeps the machine's file system, its secrets unreadable by its uid."""
    layers = _chosen_layers(use_bwrap=use_bwrap, sandbox_uid=sandbox_uid)
    if layers.sandbox_uid is None:
        return layers
    return dataclasses.replace(layers, seccomp=True, cpus=cpus_for(slot, threads),
                               own_namespaces=not layers.bwrap and namespaces_work(),
                               space_watch=not layers.private_mounts,
                               own_root=not layers.bwrap and not gpu and own_root_works())


def cpus_for(slot: int, threads: int, available: list[int] | None = None) -> tuple[int, ...]:
    """`threads` of the grader's CPUs for the worker of pool slot `slot`: consecutive slots
    (the workers of a batch, running at the same time) get different CPUs while there are
    enough of them."""
    available = sorted(os.sched_getaffinity(0)) if available is None else available
    count = max(1, min(threads, len(available)))
    return tuple(sorted({available[(slot * count + index) % len(available)] for index in range(count)}))


CLONE_NEWIPC, CLONE_NEWNET = 0x08000000, 0x40000000
# Asked of a child (root, like the worker before it drops): the namespaces must not be the grader's.
_UNSHARE_PROBE = ("import ctypes, sys\n"
                  f"sys.exit(ctypes.CDLL(None, use_errno=True).unshare({CLONE_NEWNET | CLONE_NEWIPC}) != 0)")


@functools.lru_cache(maxsize=None)
def namespaces_work() -> bool:
    """Whether a root process may make network and IPC namespaces of its own here (not where a
    seccomp profile forbids unshare, like Docker's default, or without CAP_SYS_ADMIN)."""
    if os.geteuid() != 0:
        return False
    try:
        return subprocess.run([sys.executable, "-I", "-S", "-c", _UNSHARE_PROBE], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# Asked of a child (root, like the grader making the tree and the worker changing its root).
_OWN_ROOT_PROBE = ("import os, sys\n"
                   "os.mknod(sys.argv[1], 0o20666, os.makedev(1, 3))\n"
                   "os.chroot('/')")


@functools.lru_cache(maxsize=None)
def own_root_works() -> bool:
    """Whether root may make device nodes and change a process's root here (CAP_MKNOD and
    CAP_SYS_CHROOT, both in Docker's default capabilities): what a worker's own root needs
    without bubblewrap (graders/sandbox/rootfs.py)."""
    if os.geteuid() != 0:
        return False
    with tempfile.TemporaryDirectory(prefix="grader-root-probe-") as scratch:
        try:
            return subprocess.run([sys.executable, "-I", "-S", "-c", _OWN_ROOT_PROBE, os.path.join(scratch, "null")],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def _chosen_layers(*, use_bwrap: bool | None, sandbox_uid: int) -> Layers:
    as_root = os.geteuid() == 0
    bwrap = find_bwrap() if use_bwrap is not False else None
    with_bwrap = bwrap is not None and bwrap_works(bwrap, as_root)
    if use_bwrap and not with_bwrap:
        raise IsolationUnavailable(missing_layers_message(isolation_problems()))
    missing = "" if with_bwrap else "no bubblewrap: no namespaces, secret paths guarded by the audit hook only"
    if not as_root:
        return Layers(with_bwrap, None, note=_join(missing, "the grader is not root: the worker runs as the grader's user"))
    if with_bwrap:
        return Layers(True, sandbox_uid, private_mounts=True)
    unreachable = [path for path in interpreter_paths() if blocking_ancestor(path)]
    if unreachable:
        return Layers(False, None, note=_join(
            missing, f"the worker runs as ROOT: uid {sandbox_uid} cannot reach {unreachable[0]} "
                     f"(blocked at {blocking_ancestor(unreachable[0])})"))
    return Layers(False, sandbox_uid, note=missing)


# The fix of each missing layer, as the refusal and `grade doctor` both give it.
FIX_INSTALL_BWRAP = ("install it: `apt-get install bubblewrap` (Debian, Ubuntu), `dnf install bubblewrap` "
                     "(Fedora, RHEL), or run `bash setup.sh` as root")
FIX_ALLOW_NAMESPACES = ("in a container, allow it (Docker: `--security-opt seccomp=unconfined "
                        "--security-opt apparmor=unconfined --cap-add SYS_ADMIN`), or grade on the host")
FIX_RUN_AS_ROOT = "run the grader as root (`sudo .venv/bin/grade ...`); the worker never keeps root"


FIX_OWN_ROOT = ("give the container Docker's default capabilities back (`--cap-add SYS_CHROOT --cap-add MKNOD`), "
                "or grade with full isolation")
FIX_CONTAINER_PYTHON = ("install Python where every user may read it (the system's, or a virtual environment "
                        "outside /root), so that the worker can drop to a uid of its own")


def isolation_problems(level: str = FULL) -> list[tuple[str, str]]:
    """What keeps this machine from isolation at `level`, each with its fix; empty when nothing
    does. Where full isolation works, container isolation needs nothing more: a worker then
    takes bubblewrap after all."""
    problems = []
    as_root = os.geteuid() == 0
    bwrap = find_bwrap()
    if bwrap is None:
        problems.append(("bubblewrap is not installed", FIX_INSTALL_BWRAP))
    elif not bwrap_works(bwrap, as_root):
        problems.append((f"bubblewrap ({bwrap}) cannot create namespaces here", FIX_ALLOW_NAMESPACES))
    if not as_root:
        problems.append(("the grader is not root, so the worker cannot become an unprivileged user of its own "
                         "that the operating system denies every secret", FIX_RUN_AS_ROOT))
    if not seccomp.supported():
        problems.append((f"no seccomp filter for this machine's architecture ({platform.machine()}): the worker "
                         "could open sockets, SysV IPC and keyrings", "grade on x86-64 or aarch64 Linux"))
    if level == FULL or not problems:
        return problems
    problems = [problem for problem in problems  # namespaces: the container's
                if problem[1] not in (FIX_INSTALL_BWRAP, FIX_ALLOW_NAMESPACES)]
    if as_root and (unreachable := [path for path in interpreter_paths() if blocking_ancestor(path)]):
        problems.append((f"the worker's uid cannot reach {unreachable[0]} (blocked at "
                         f"{blocking_ancestor(unreachable[0])})", FIX_CONTAINER_PYTHON))
    if as_root and not own_root_works():
        problems.append(("root may not make device nodes or change a process's root here, so the worker would see "
                         "the machine's file system", FIX_OWN_ROOT))
    return problems


def missing_layers_message(problems: list[tuple[str, str]], level: str = FULL) -> str:
    lines = [f"refusing to grade: student code would not be isolated on this machine ({level} isolation)."]
    for problem, fix in problems:
        lines += [f"  - {problem}", f"    fix: {fix}"]
    if level == FULL and not any(problem.startswith("the grader is not root") for problem, _ in problems):
        lines.append("In a one-shot container that holds one submission (Gradescope's), `--isolation container` "
                     "grades without namespaces: the container is the boundary (docs/sandbox.md).")
    lines += [f"`grade doctor{' --isolation container' if level == CONTAINER else ''}` shows every layer. "
              "To run code you trust (your own) without isolation, add --unsafe-no-sandbox; every output then "
              "says the grade was not isolated."]
    return "\n".join(lines)


def require_isolation(level: str = FULL) -> None:
    """Raise IsolationUnavailable, with every fix, unless this machine isolates at `level`."""
    if level not in LEVELS:
        raise ValueError(f"no isolation level {level!r}: {' or '.join(LEVELS)}")
    problems = isolation_problems(level)
    if problems:
        raise IsolationUnavailable(missing_layers_message(problems, level))


# The exit status of a command that refused to run student code without isolation.
EXIT_NOT_ISOLATED = 3


def refuse_unless_isolated(unsafe: bool, prog: str = "grade", level: str = FULL) -> int | None:
    """The fail-closed gate of a command at isolation `level`, before anything is read:
    EXIT_NOT_ISOLATED, with every fix said on stderr, or None."""
    if unsafe:
        print(f"{prog}: WARNING: --unsafe-no-sandbox: student code runs without full isolation; "
              "this grade is marked as such in every output", file=sys.stderr)
        return None
    try:
        require_isolation(level)
    except IsolationUnavailable as refusal:
        print(f"{prog}: {refusal}", file=sys.stderr)
        return EXIT_NOT_ISOLATED
    return None



def container_batch_refusal(*, gpu: bool, one_at_a_time: bool) -> str | None:
    """Why a batch at container isolation would not hold every boundary between its
    submissions on one machine, with the fix; None where it holds. It holds for workers in a
    root of their own: each on its uid, nothing writable of another's, its write bound, its
    leftovers ended before the next on its slot. A worker given the GPU keeps the machine's file
    system (no own root: CUDA there is untried), so two of them at once share /tmp, /var/tmp and
    /dev/shm, a channel between two students' code."""
    if not gpu or one_at_a_time:
        return None
    return ("refusing to grade: at container isolation, workers given the GPU keep the machine's file system, so "
            "two submissions graded at once on one machine could pass files to each other (/tmp, /dev/shm).\n"
            "    fix: --jobs 1 (one submission at a time), or --device cpu, or full isolation (bubblewrap), or one "
            "container per submission (docs/sandbox.md, 'Container isolation')")


def _join(*notes: str) -> str:
    return "; ".join(note for note in notes if note)


def find_bwrap() -> str | None:
    if BWRAP_ENVIRONMENT in os.environ:
        chosen = os.environ[BWRAP_ENVIRONMENT]
        return shutil.which(chosen) if chosen else None
    for candidate in BWRAP_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


@functools.lru_cache(maxsize=None)
def bwrap_works(bwrap: str, as_root: bool) -> bool:
    """Try once: bwrap is installed on machines (containers) that forbid namespaces."""
    probe = [bwrap, *namespace_args(as_root), "--die-with-parent", "--ro-bind", "/", "/",
             "--dev", "/dev", "--proc", "/proc", "true"]
    try:
        return subprocess.run(probe, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def namespace_args(as_root: bool, *, private_mounts: bool = False) -> list[str]:
    if not as_root:
        return ["--unshare-all"]
    # As root, --unshare-all would add a user namespace in which the worker is root mapped to
    # real root: it could not become the sandbox user (unmapped there) and, as real root,
    # would escape RLIMIT_NPROC. So every namespace but the user one, and only the
    # capabilities the worker needs to mount its writable space and switch user (switching
    # drops them all, before any student code runs).
    mounting = ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_CHOWN"] if private_mounts else []
    return ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", *mounting]


def bwrap_command(bwrap: str, *, workdir: Path, secret_paths: list[str], readable_paths: list[str] = (),
                  gpu: bool = False, private_mounts: bool = False, tmp_bytes: int = 64 << 20,
                  task_modules=()) -> list[str]:
    """The bwrap command line (up to `--`) that runs the worker in `workdir`: a file system made
    of what it may see (graders/sandbox/exposure.py: the system folders, its Python and what it
    imports, `readable_paths`; all read-only), an empty /tmp and `workdir` (writable). The rest
    of the machine (other checkouts of the grader, its solution, home folders, caches) is simply
    absent. With `private_mounts` (as root), `workdir` is an empty mount point and the
    submission is bound read-only at SUBMISSION_SOURCE: the worker mounts its size-limited tmpfs
    there and copies the submission in."""
    as_root = os.geteuid() == 0
    command = [bwrap, *namespace_args(as_root, private_mounts=private_mounts), "--die-with-parent", "--new-session"]
    for path in SYSTEM_PATHS:
        if os.path.islink(path):  # merged /usr: /bin -> usr/bin
            command += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            command += ["--ro-bind", path, path]
    # /tmp: root's and size-limited; what is bound below it (a Python installed under /tmp) stays.
    command += ["--dev", "/dev", "--proc", "/proc", "--perms", "0755", "--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    seen = exposure(tuple(readable_paths), tuple(task_modules))
    made = {"/tmp"}
    mounted = [*SYSTEM_PATHS]
    # Parents first: a hidden folder's tmpfs goes over what was bound, what it shows on top of it.
    for path, shows in sorted([*((path, True) for path in seen.shown), *((path, False) for path in seen.hidden)],
                              key=lambda rule: (rule[0].count("/"), rule[0], not rule[1])):
        if not shows:
            if _inside(path, mounted) and os.path.isdir(path):
                command += ["--perms", "0755", "--tmpfs", path]
            continue
        if not _inside(path, mounted):
            command += _folders_on_the_way(path, made)
        command += ["--ro-bind", path, path]
        mounted.append(path)
    if gpu:
        for device in gpu_view(os.environ.get("CUDA_VISIBLE_DEVICES")).nodes:
            command += ["--dev-bind", device, device]
    visible = [*SYSTEM_PATHS, *seen.shown]
    for secret in secret_paths:  # only those inside something bound are there to hide
        if not _inside(secret, visible):
            continue
        if os.path.isdir(secret):
            command += ["--tmpfs", secret]
        elif os.path.lexists(secret):
            command += ["--ro-bind", "/dev/null", secret]
    if private_mounts:
        command += ["--ro-bind", str(workdir / "submission"), SUBMISSION_SOURCE,
                    *_folders_on_the_way(str(workdir), made), "--dir", str(workdir)]
    else:
        command += [*_folders_on_the_way(str(workdir), made), "--bind", str(workdir), str(workdir)]
    return [*command, "--chdir", str(workdir), "--"]


@dataclass(frozen=True)
class GpuView:
    """What a worker allowed a GPU is given: the device nodes bound into its /dev and its
    CUDA_VISIBLE_DEVICES (None: left unset)."""

    nodes: list[str]
    visible: str | None
    note: str = ""


_PER_GPU_NODE = re.compile(r"/dev/nvidia(\d+)")


def gpu_view(visible: str | None, gpus: list[tuple[str, str, str]] | None = None,
             nodes: list[str] | None = None) -> GpuView:
    """Exactly the GPUs of `visible` (the grader's CUDA_VISIBLE_DEVICES, a batch slot's GPU):
    the driver's shared nodes (nvidiactl, nvidia-uvm, ...) and the node of each of those GPUs,
    none of another's, and the same GPUs named by UUID, which means the same whatever order CUDA
    would count them in. An index counts as nvidia-smi counts (PCI bus order). `gpus`: (index,
    uuid, minor number) rows, read from the driver when not given. Every node when `visible` is
    unset, or names a GPU that cannot be mapped (a MIG instance): the worker then sees every GPU
    of the machine, and CUDA_VISIBLE_DEVICES alone picks its own, which the note says."""
    nodes = sorted(glob.glob("/dev/nvidia*")) if nodes is None else nodes
    shared = [node for node in nodes if not _PER_GPU_NODE.fullmatch(node)]
    if visible is None:
        return GpuView(nodes, None)
    wanted = [entry.strip() for entry in visible.split(",") if entry.strip()]
    if not wanted or wanted[0].lstrip("-").isdigit() and int(wanted[0]) < 0:
        return GpuView([], visible)  # CUDA_VISIBLE_DEVICES="" or -1: no GPU at all
    gpus = _driver_gpus() if gpus is None else gpus
    chosen = []
    for entry in wanted:
        match = [row for row in gpus if entry == row[0] or (entry.startswith("GPU-") and row[1].startswith(entry))]
        if len(match) != 1:
            return GpuView(nodes, visible, note=f"GPU {entry!r} of CUDA_VISIBLE_DEVICES not mapped to a device "
                                                "node: the worker sees every GPU's node")
        chosen.append(match[0])
    own = [f"/dev/nvidia{minor}" for _, _, minor in chosen]
    return GpuView([*shared, *(node for node in own if node in nodes)], ",".join(uuid for _, uuid, _ in chosen))


@functools.cache
def _driver_gpus(root: str = "/proc/driver/nvidia/gpus") -> list[tuple[str, str, str]]:
    """(index, uuid, minor number) of every GPU, as the NVIDIA driver lists them: one folder per
    GPU, named by its PCI address, whose order is nvidia-smi's (and CUDA's under
    CUDA_DEVICE_ORDER=PCI_BUS_ID)."""
    gpus = []
    for index, folder in enumerate(sorted(glob.glob(os.path.join(root, "*")))):
        try:
            information = Path(folder, "information").read_text(errors="replace")
        except OSError:
            return []
        uuid = re.search(r"^GPU UUID:\s*(\S+)", information, re.MULTILINE)
        minor = re.search(r"^Device Minor:\s*(\d+)", information, re.MULTILINE)
        if not (uuid and minor):
            return []
        gpus.append((str(index), uuid.group(1), minor.group(1)))
    return gpus


def _folders_on_the_way(path: str, made: set[str]) -> list[str]:
    """Empty folders down to `path`, enterable by the sandbox user (bwrap would make them 0700):
    a Python under /root shows nothing else of /root."""
    arguments = []
    for parent in map(str, reversed(Path(path).parents[:-1])):
        if parent not in made:
            made.add(parent)
            arguments += ["--perms", "0755", "--dir", parent]
    return arguments


def own_root_sources(readable_paths=(), task_modules=()) -> tuple[list[str], list[str]]:
    """What a worker's own root holds (container isolation): what bubblewrap would bind, but
    /sys, whose files cannot be linked; and the folders inside it that are emptied but for what
    is shown inside them (graders/sandbox/exposure.py)."""
    seen = exposure(tuple(readable_paths), tuple(task_modules))
    return ([*(path for path in SYSTEM_PATHS if path != "/sys" and os.path.lexists(path)), *seen.shown],
            list(seen.hidden))


def _inside(path: str, folders) -> bool:
    return any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in folders)


def interpreter_paths() -> list[str]:
    """What the worker's Python must read: its installation, its packages, the grader's code."""
    site_folders = site.getsitepackages()
    candidates = {sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
                  os.path.dirname(os.path.realpath(graders.__file__)), *site_folders,
                  *(folder for site_folder in site_folders for folder in pth_folders(site_folder))}
    return sorted({os.path.realpath(path) for path in candidates if os.path.isdir(path)})


def blocking_ancestor(path: str) -> str | None:
    """The first directory on the way to `path` that other users may not enter, if any."""
    current = "/"
    for part in Path(path).parts[1:]:
        current = os.path.join(current, part)
        if not os.stat(current).st_mode & stat.S_IXOTH:
            return current
    return None


def conflicting_secret(secret_paths: list[str], readable_paths=()) -> tuple[str, str] | None:
    """A secret path that would hide something the worker needs, and that thing."""
    for secret in secret_paths:
        for needed in [*interpreter_paths(), *readable_paths]:
            if _inside(needed, [secret]):
                return secret, needed
    return None


# ---------------------------------------------------------------------------- working directory

def workdirs_parent() -> Path:
    """Where this user's workers get their directories: others may pass through, not list it,
    so that a worker cannot find the directory (the submission) of another. (On Windows, the
    user's own temporary folder is private already, and there are no uids and modes to check.)"""
    if not hasattr(os, "geteuid"):
        return _made(Path(tempfile.gettempdir()) / "grader-sandbox")
    parent = _made(Path(tempfile.gettempdir()) / f"grader-sandbox-{os.geteuid()}")
    info = os.lstat(parent)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o066:
        raise RuntimeError(f"{parent} exists but is not a private directory of this user")
    return parent


def _made(folder: Path) -> Path:
    try:
        folder.mkdir(mode=0o711)
    except FileExistsError:
        pass
    return folder


def make_workdir(submission_dir: Path, *, owner: tuple[int, int] | None, parent: Path | None = None) -> Path:
    """A fresh directory in `parent` (workdirs_parent() by default; a worker's own root has
    its own): `submission/` (a copy of the submission) and `tmp/` (TMPDIR).

    Its name says which grader process made it, so that directories left by a grader that was
    killed (and so could not clean up) are removed by the next one.
    """
    parent = workdirs_parent() if parent is None else parent
    remove_orphaned_workdirs(parent)
    # 0700: the worker reaches it as its owner (`owner`), or through bubblewrap's binds, which are
    # made with root's capabilities; nobody else can enter it.
    workdir = Path(tempfile.mkdtemp(prefix=f"w-{_process_tag(os.getpid())}-", dir=parent))
    try:
        copy_submission(submission_dir, workdir / "submission")
        (workdir / "tmp").mkdir()
        if owner is not None:
            _give(workdir, owner)
    except BaseException:
        walk.discard(workdir)
        raise
    return workdir


def _give(folder: Path, owner: tuple[int, int]) -> None:
    """`folder` and everything in it to `owner` (uid, gid); links themselves, never their targets."""

    def chown(folder_fd: int, name: str, info: os.stat_result, _: bool) -> bool:
        os.chown(name, *owner, dir_fd=folder_fd, follow_symlinks=False)
        return True

    os.lchown(folder, *owner)
    walk.walk(folder, chown, True)


def remove_orphaned_workdirs(parent: Path) -> None:
    """Remove the directories whose grader process is gone. Whatever a worker left in one (a
    tree of any depth) is removed or quarantined (graders/sandbox/walk.py), never in the way of
    the worker about to start."""
    for entry in parent.iterdir():
        parts = entry.name.split("-")  # "w", pid, start time (empty without /proc), random (no "-")
        if len(parts) == 4 and parts[1].isdigit() and _grader_gone(int(parts[1]), parts[2]):
            walk.discard(entry)


def _grader_gone(pid: int, recorded_start: str) -> bool:
    """Whether the grader that made a directory has exited. The start time tells a reused pid
    from the grader itself where both are known (Linux); elsewhere only a pid that no process
    holds counts as gone, and a directory is left behind rather than taken from a live grader."""
    current_start = _start_time(pid)
    if current_start == "":
        return True  # /proc knows no such process
    if current_start is not None and recorded_start:
        return current_start != recorded_start  # a reused pid has another start time
    # No start time to compare (no /proc here, or none where the folder was made): the pid alone.
    if os.name != "posix":
        return False  # os.kill(pid, 0) would terminate the process on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    return False


def _start_time(pid: int) -> str | None:
    """The start time of a process, from /proc: "" for a pid that no process holds, None where
    there is no /proc to ask (macOS, Windows)."""
    try:
        stat_fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return "" if pid != os.getpid() and _start_time(os.getpid()) is not None else None
    return stat_fields[19]  # field 22 of proc(5), counted after the command name


def _process_tag(pid: int) -> str:
    """`pid-starttime`: unique among the processes of one boot, unlike a pid alone (the start
    time is empty where there is no /proc)."""
    return f"{pid}-{_start_time(pid) or ''}"


def copy_submission(source: Path, destination: Path) -> None:
    """Copy regular files and folders only. Symbolic links could point at anything on the
    grader's machine (and would be followed with the grader's rights), FIFOs would block the
    copy, and `__pycache__` bytecode need not match the source the grader sees."""

    def skipped(directory: str, names: list[str]) -> list[str]:
        result = []
        for name in names:
            mode = os.lstat(os.path.join(directory, name)).st_mode
            if name == "__pycache__" or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                result.append(name)
        return result

    shutil.copytree(source, destination, ignore=skipped)


# ---------------------------------------------------------------------------- the write bound without mounts

# The longest the watch goes without counting what a worker holds.
SPACE_WATCH_INTERVAL_S = 0.2
# How often it asks the file systems a worker may write how much they have free: a drop that
# could have taken the worker past its bound has it counted at once, not at the next interval.
SPACE_POLL_S = 0.01
# How often a count without a drop in free space looks at the uid's processes' descriptors too.
PROCESS_SCAN_INTERVAL_S = 1.0
# Walks in a row that met the worker's folder changing under them before the watch gives up.
RACED_WALKS = 3


class _CountedEnough(Exception):
    """The count is past the bound of files: no need to go on."""


@dataclass
class _SpaceCount:
    """What `walk.walk` adds up: entries of the worker's uid (all of them, in its own folder),
    each inode once, by the blocks it holds."""

    uid: int
    max_files: int
    used: int = 0
    files: int = 0
    inodes: set = dataclasses.field(default_factory=set)

    def visit(self, folder_fd: int, name: str, info: os.stat_result, all_its: bool) -> bool | None:
        its = all_its or info.st_uid == self.uid
        if its and (info.st_nlink < 2 or stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) not in self.inodes):
            if info.st_nlink > 1:
                self.inodes.add((info.st_dev, info.st_ino))
            self.files += 1
            self.used += info.st_blocks * 512
            if self.files > self.max_files:
                raise _CountedEnough
        # In a shared folder, only the uid's entries are its; it may write into a folder every
        # user may write (/tmp/.X11-unix) without owning it.
        if stat.S_ISDIR(info.st_mode) and (its or info.st_mode & stat.S_IWOTH):
            return its
        return None


def space_used(workdir: Path, uid: int, gid: int, *, max_files: int, pids: list[int] | None = None,
               shared_folders=None) -> tuple[int, int]:
    """(bytes allocated, files) of what a worker of `uid` holds on the machine's disks and
    memory file systems: its folder, whatever the uid owns in `shared_folders` (by default
    uids.SHARED_WRITABLE, the folders every user may write; none for a worker in a root of its
    own, which has no such folder), and files its processes (`pids`; None: every process of the
    uid) hold open after removing them (written through a descriptor, they are in no folder).
    Folders are walked by descriptor (graders/sandbox/walk.py), so no depth or path length
    hides a file; a file counts once however many links it has, by the blocks it holds (a
    preallocated file by all it reserved, a sparse one by what it holds). Counting stops past
    `max_files`. Raises walk.WalkFailed where a folder or a process's descriptors cannot be
    read: the bound fails closed."""
    from . import uids

    count = _SpaceCount(uid, max_files)
    try:
        walk.walk(workdir, count.visit, True)
        for folder in uids.SHARED_WRITABLE if shared_folders is None else shared_folders:
            if os.path.isdir(folder) and not os.path.islink(folder):
                walk.walk(folder, count.visit, False)
    except _CountedEnough:
        return count.used, count.files
    # /proc/<pid>/fd of another uid's process is readable only to a process of that uid (or
    # with CAP_SYS_PTRACE, which a container's root lacks): read as the uid (the worker makes
    # itself dumpable for this, graders/sandbox/worker.py).
    pids = uids.processes_of(uid) if pids is None else pids
    if pids:
        with uids.file_system_identity(uid, gid):
            count.used += sum(_held_after_removal(pid) for pid in pids)
    return count.used, count.files


def _held_after_removal(pid: int) -> int:
    """Bytes of the regular files that process `pid` holds open after they were removed."""
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return 0  # it ended
    except OSError as error:
        return _unless_exiting(pid, error, "the descriptors")
    held = 0
    for descriptor in descriptors:
        try:
            info = os.stat(f"/proc/{pid}/fd/{descriptor}")
        except FileNotFoundError:
            continue  # closed since, or the process ended
        except OSError as error:
            return _unless_exiting(pid, error, "a descriptor")
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 0:
            held += info.st_blocks * 512
    return held


def _unless_exiting(pid: int, error: OSError, what: str) -> int:
    """0 for a process that is ending (its memory, descriptors with it, released: its /proc
    entries are root's then); otherwise the watch cannot see what it holds, and fails closed."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    state = next((line.split()[1] for line in status.splitlines() if line.startswith("State:")), "")
    if state in ("Z", "X") or "\nVmSize:" not in status:
        return 0
    name = next((line.split(None, 1)[1] for line in status.splitlines() if line.startswith("Name:")), "?")
    raise walk.WalkFailed(f"cannot read {what} of process {pid} ({name.strip()}): {error.strerror}",
                          changed=False) from error


class SpaceWatch:
    """The write bound where there is no size-limited tmpfs (container isolation): a thread that
    counts what the worker of `uid` holds (`space_used`) and calls `exceeded(reason)` once past
    `max_bytes` or `max_files`; and `check`, which the grader calls on every reply before it
    uses it.

    It counts every SPACE_WATCH_INTERVAL_S, and at once when the free space (or free inodes) of
    the file systems the worker may write dropped, since it last counted, by as much as the
    worker had left of its bound: every SPACE_POLL_S it asks them (`statvfs`, a microsecond). So
    the worker is stopped within a poll, a count and a kill of passing its bound, however it
    writes: the seccomp filter refuses `fallocate`, so a file takes space only as fast as one
    CPU writes it (docs/sandbox.md has the measured overshoot). Space another process frees at
    the same time hides as much of the drop: then the interval is the bound on the delay (for
    a removed file held open, PROCESS_SCAN_INTERVAL_S). A folder it cannot read, or one that
    changes under RACED_WALKS counts in a row, stops the worker: the bound fails closed."""

    def __init__(self, workdir: Path, uid: int, gid: int, *, max_bytes: int, max_files: int, exceeded,
                 shared_folders=None) -> None:
        from . import uids

        self.workdir, self.uid, self.gid, self.max_bytes, self.max_files = workdir, uid, gid, max_bytes, max_files
        self.shared_folders = uids.SHARED_WRITABLE if shared_folders is None else tuple(shared_folders)
        self._file_systems = _one_per_file_system([str(workdir), *self.shared_folders])
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="space-watch", daemon=True, args=(exceeded,))
        self._thread.start()

    def _watch(self, exceeded) -> None:
        used, files = 0, 0
        free, counted_at, processes_at = self._free(), time.monotonic(), 0.0
        while not self._stopped.is_set():
            time.sleep(SPACE_POLL_S)  # half the CPU of an Event's wait, at a hundred a second
            now_free = self._free()
            dropped_bytes = sum(max(0, then[0] - now[0]) for then, now in zip(free, now_free))
            dropped_files = sum(max(0, then[1] - now[1]) for then, now in zip(free, now_free))
            dropped = used + dropped_bytes > self.max_bytes or files + dropped_files > self.max_files
            now = time.monotonic()
            if not dropped and now - counted_at < SPACE_WATCH_INTERVAL_S:
                continue
            free, counted_at = now_free, now  # what is written while counting, the next count sees
            # The uid's processes (most of a count's cost: /proc) where the disk dropped, else once a
            # PROCESS_SCAN_INTERVAL_S: what a removed file takes shows in the drop too.
            every_process = dropped or now - processes_at >= PROCESS_SCAN_INTERVAL_S
            processes_at = now if every_process else processes_at
            reason, used, files = self._measure(None if every_process else [])
            if reason:
                exceeded(reason)
                return

    def _free(self) -> list[tuple[int, int]]:
        """(bytes, inodes) free on each file system the worker may write."""
        free = []
        for path in self._file_systems:
            try:
                info = os.statvfs(path)
            except OSError:
                free.append((0, 0))
                continue
            free.append((info.f_bfree * info.f_frsize, info.f_ffree))
        return free

    def check(self, pids: list[int] | None = None) -> str:
        """Why the worker is past its bound, or "" (open files removed from their folder are
        looked for in `pids`, every process of the uid by default)."""
        return self._measure(pids)[0]

    def _measure(self, pids: list[int] | None = None) -> tuple[str, int, int]:
        for _ in range(RACED_WALKS):
            try:
                used, files = space_used(self.workdir, self.uid, self.gid, max_files=self.max_files, pids=pids,
                                         shared_folders=self.shared_folders)
                break
            except walk.WalkFailed as failure:
                if not failure.changed:
                    return (f"the watch of the worker's writable space could not read what it wrote ({failure}); "
                            "the worker was stopped"), 0, 0
        else:
            return ("the worker's files changed faster than the watch of its writable space could count them; "
                    "the worker was stopped"), 0, 0
        if used <= self.max_bytes and files <= self.max_files:
            return "", used, files
        return (f"the student's code wrote past the bound of its writable space ({self.max_bytes // (1 << 20)} MiB, "
                f"{self.max_files} files): {used // (1 << 20)} MiB, {files}{'+' if files > self.max_files else ''} "
                "files; the worker was stopped"), used, files

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


def _one_per_file_system(paths: list[str]) -> list[str]:
    """One of `paths` (those that exist) for each file system they lie on."""
    chosen: dict[int, str] = {}
    for path in paths:
        try:
            chosen.setdefault(os.stat(path).st_dev, path)
        except OSError:
            continue
    return list(chosen.values())


# ---------------------------------------------------------------------------- secrets at the OS level

# Prints each argument that the running user can read (a file) or read or enter (a folder).
READABLE_SCRIPT = 'for p do if [ -d "$p" ]; then [ -r "$p" ] || [ -x "$p" ]; else [ -r "$p" ]; fi && printf "%s\\0" "$p"; done; true'


def readable_by(uid: int, gid: int, paths: list[str]) -> list[str]:
    """Those of `paths` that a process of `uid`/`gid` (no supplementary groups) can read or, for
    a folder, enter: asked of the kernel itself, by a shell run as that user, so that ACLs and
    every folder on the way count. One process for all the paths."""
    present = [path for path in paths if os.path.lexists(path)]
    if not present:
        return []
    shell = next((candidate for candidate in ("/bin/sh", "/usr/bin/sh") if os.path.exists(candidate)), None)
    if shell is None:
        raise IsolationUnavailable("no /bin/sh to check what the sandbox user can read")
    probe = subprocess.run([shell, "-c", READABLE_SCRIPT, "sh", *present], user=uid, group=gid, extra_groups=[],
                           stdin=subprocess.DEVNULL, capture_output=True, cwd="/", timeout=60)
    if probe.returncode != 0:
        raise IsolationUnavailable(f"could not check what the sandbox user can read: {probe.stderr[-300:]!r}")
    readable = set(os.fsdecode(name) for name in probe.stdout.split(b"\0") if name)
    return [path for path in present if path in readable]


def os_protected(secret_paths: list[str]) -> list[str]:
    """The secrets the OS layer guards: all but the workers' parent folder, which others may pass
    through by design (the worker without bubblewrap must) and whose entries are private to the
    grader (see make_workdir)."""
    workers = str(workdirs_parent())
    return [path for path in secret_paths if path != workers]


def deny_to_sandbox_user(paths: list[str], *, uid: int, gid: int) -> list[str]:
    """Make every secret in `paths` unreadable by the sandbox user at the OS level (as root):
    take away the permissions of "others" (and of the group, should it be the sandbox user's)
    from each secret that user can reach. Its owner's access is unchanged. Returns the secrets
    still readable afterwards (an ACL, a file system without permissions): grading must stop."""
    reachable = readable_by(uid, gid, paths)
    if not reachable:
        return []
    for path in reachable:
        info = os.lstat(path)
        taken = 0o007 | (0o070 if info.st_gid == gid else 0)
        if not stat.S_ISLNK(info.st_mode):
            os.chmod(path, stat.S_IMODE(info.st_mode) & ~taken)
    return readable_by(uid, gid, reachable)
