"""`grade doctor`: every layer of the sandbox on this machine, each with its state and its fix.

The last findings come from a real worker started with no student code: it reports its own uid,
capabilities, writable space, network and which secrets exist for it (`sandbox.probe`), so what
is printed is what a student's code would meet, not what the configuration intends.
"""

from __future__ import annotations

import glob
import os
import tempfile
from dataclasses import dataclass

from . import isolation, rootfs, uids, walk
from .errors import SandboxError
from .limits import Limits

MiB = 1 << 20


@dataclass(frozen=True)
class Finding:
    layer: str
    ok: bool | None  # None: for information, neither good nor bad
    detail: str
    fix: str = ""


# What only bubblewrap's namespaces give: at container isolation these are the container's to
# give, and their findings are information, not failures.
NAMESPACE_LAYERS = ("bubblewrap installed", "namespaces usable", "writable space limited", "no network",
                    "other processes invisible", "secrets absent from the worker's file system",
                    "worker sees exactly its own GPUs")


def diagnose(*, secret_paths=(), readable_paths=(), gpu: bool = False, limits: Limits = Limits(),
             level: str = isolation.FULL, modules=()) -> list[Finding]:
    """Every layer's finding, judged for isolation at `level` (graders/sandbox/isolation.py), and
    whether a worker imports `modules` (what the assignment's checks import in it)."""
    findings = _findings(secret_paths, readable_paths, gpu, limits, modules)
    if level != isolation.CONTAINER:
        return findings
    return [Finding(f.layer, None, f"{f.detail} (container isolation: the container is the boundary)")
            if f.ok is False and f.layer.startswith(NAMESPACE_LAYERS) else f for f in findings]


def _findings(secret_paths, readable_paths, gpu: bool, limits: Limits, modules=()) -> list[Finding]:
    findings = []
    bwrap = isolation.find_bwrap()
    as_root = os.geteuid() == 0
    findings.append(Finding("bubblewrap installed", bwrap is not None, bwrap or "not found",
                            "" if bwrap else isolation.FIX_INSTALL_BWRAP))
    if bwrap:
        works = isolation.bwrap_works(bwrap, as_root)
        findings.append(Finding("namespaces usable (network, PID, IPC, mount)", works,
                                "a probe started" if works else "bubblewrap failed to create them",
                                "" if works else isolation.FIX_ALLOW_NAMESPACES))
    findings.append(Finding("grader runs as root (the worker switches to a uid of its own)", as_root,
                            f"euid {os.geteuid()}", "" if as_root else isolation.FIX_RUN_AS_ROOT))
    if as_root:
        findings.append(_uid_pool(limits))
    findings.append(_quarantined())
    findings += _worker_findings(secret_paths, readable_paths, gpu, limits, modules)
    nodes = sorted(glob.glob("/dev/nvidia*"))
    findings.append(Finding("GPU device nodes", None, ", ".join(nodes) if nodes else "none (CPU grading)"))
    return findings


def _uid_pool(limits: Limits) -> Finding:
    first, last = limits.sandbox_uid, limits.sandbox_uid + limits.sandbox_slots - 1
    taken = []
    try:
        with open("/etc/passwd") as passwd:
            taken = [line.split(":")[0] for line in passwd
                     if line.count(":") >= 2 and line.split(":")[2].isdigit()
                     and first <= int(line.split(":")[2]) <= last]
    except OSError:
        pass
    return Finding(f"sandbox uids {first}-{last} belong to no user", not taken,
                   f"taken by: {', '.join(taken)}" if taken else f"{limits.sandbox_slots} slots, one per running worker",
                   "choose another range (Limits.sandbox_uid)" if taken else "")


def _quarantined() -> Finding:
    """What clean-up after a worker could not remove and moved out of the way instead
    (graders/sandbox/walk.py): no later grade trips on it, but it takes space until removed."""
    parent = isolation.workdirs_parent()
    found = walk.quarantined([parent, *glob.glob(os.path.join(glob.escape(str(parent)), "root-*", rootfs.WORKERS)),
                              *uids.SHARED_WRITABLE])
    if not found:
        return Finding("no folder quarantined (what clean-up after a worker could not remove)", True, "none")
    return Finding("folders quarantined (what clean-up after a worker could not remove)", None,
                   f"{len(found)}: {', '.join(found[:5])}{' ...' if len(found) > 5 else ''}",
                   f"look at them, then remove them as root: rm -rf {' '.join(found[:5])}")


def _worker_findings(secret_paths, readable_paths, gpu, limits, modules=()) -> list[Finding]:
    from .client import Worker  # the client imports torch's helpers; the checks above need none

    findings = []
    with tempfile.TemporaryDirectory(prefix="grade-doctor-") as empty:
        try:
            worker = Worker(empty, limits=limits, secret_paths=secret_paths, readable_paths=readable_paths,
                            allow_gpu=gpu, task_modules=["graders.sandbox.probe"], require_isolation=False)
        except (isolation.IsolationUnavailable, uids.NoFreeSlot) as error:
            return [Finding("secrets unreadable by the sandbox uid", False, str(error))]
        # The workers' parent folder holds the worker's own folder, so it is there by design.
        secrets = isolation.os_protected(worker.secret_paths)
        try:
            with worker:
                report = worker.task("sandbox.probe", secrets)
                imports = worker.task("sandbox.imports", list(modules), timeout=limits.start_timeout_s) if modules else {}
        except SandboxError as error:
            return [Finding("a worker starts", False, str(error)[-600:],
                            "see the worker's output above; docs/sandbox.md, 'Not done / known limits'")]
        layers = worker.layers
        if layers.sandbox_uid is not None:
            uid, gid = layers.sandbox_uid, layers.sandbox_uid - limits.sandbox_uid + limits.sandbox_gid
            still = isolation.readable_by(uid, gid, secrets)
            findings.append(Finding("secrets unreadable by the sandbox uid (OS permissions)", not still,
                                    f"still readable: {', '.join(still)}" if still else
                                    f"{len(secrets)} secret paths", "chmod o-rwx on them" if still else ""))
            unreadable = [p for p in worker.readable_paths if not isolation.readable_by(uid, gid, [p])]
            if worker.readable_paths:
                findings.append(Finding("caches and encoder readable by the sandbox uid", not unreadable,
                                        f"not readable: {', '.join(unreadable)}" if unreadable else
                                        ", ".join(worker.readable_paths),
                                        "chmod o+rX on them (they hold no labels)" if unreadable else ""))
    unprivileged = report["uid"] != 0 and report["euid"] != 0
    findings.append(Finding("worker runs unprivileged", unprivileged,
                            f"uid {report['uid']}, gid {report['gid']}, groups {report['groups'] or 'none'}",
                            "" if unprivileged else "run the grader as root with bubblewrap"))
    no_capabilities = not any(report["capabilities"].values()) and report["no_new_privs"]
    findings.append(Finding("worker holds no capability, can gain none", no_capabilities,
                            f"{report['capabilities']}, no_new_privs={report['no_new_privs']}"))
    if layers.sandbox_uid is not None:
        findings += _confinement_findings(report, layers, limits)
    space = report["space"]
    bounded = all(space[name]["bytes"] <= limit for name, limit in
                  (("workdir", limits.workdir_bytes), ("tmp", limits.tmp_bytes), ("shm", limits.shm_bytes)))
    bounded = bounded and not report["tmp_writable"]
    findings.append(Finding("writable space limited (folder, /dev/shm; /tmp not writable)", bounded,
                            f"workdir {space['workdir']['bytes'] // MiB} MiB / {space['workdir']['files']} files, "
                            f"shm {space['shm']['bytes'] // MiB} MiB / {space['shm']['files']} files, "
                            f"tmp {space['tmp']['bytes'] // MiB} MiB, "
                            + ("writable" if report["tmp_writable"] else "not writable"),
                            "" if bounded else "needs bubblewrap as root"))
    isolated_network = report["interfaces"] in ([], ["lo"])
    findings.append(Finding("no network", isolated_network, "interfaces: " + ", ".join(report["interfaces"]),
                            "" if isolated_network else "needs bubblewrap"))
    if report["processes_visible"] is None:
        findings.append(Finding("other processes invisible", None, "no /proc in its own root, so none listed; "
                                "without a PID namespace it may still signal its own uid's"))
    else:
        findings.append(Finding("other processes invisible", report["processes_visible"] <= 5,
                                f"{report['processes_visible']} processes in its /proc"))
    hidden = not report["secrets_present"]
    findings.append(Finding("secrets absent from the worker's file system", hidden,
                            "none present" if hidden else "present: " + ", ".join(report["secrets_present"]),
                            "" if hidden else "needs bubblewrap"))
    if gpu:
        expected = isolation.gpu_view(os.environ.get("CUDA_VISIBLE_DEVICES"))
        exact = layers.bwrap and not expected.note and report["gpu_nodes"] == sorted(expected.nodes)
        findings.append(Finding("worker sees exactly its own GPUs", exact,
                                f"device nodes {', '.join(report['gpu_nodes']) or 'none'}; "
                                f"CUDA_VISIBLE_DEVICES={report['cuda_visible_devices']}"
                                + (f"; {expected.note}" if expected.note else ""),
                                "" if exact else "set CUDA_VISIBLE_DEVICES to GPU indices or UUIDs that "
                                                 "nvidia-smi lists"))
    findings.append(Finding("audit hook (a tripwire, not a wall)", None, "installed in every worker"))
    if modules:
        failed = {module: problem for module, problem in imports.items() if problem is not None}
        findings.append(Finding(IMPORTS_LAYER, not failed,
                                "; ".join(f"{module}: {problem}" for module, problem in failed.items())
                                if failed else ", ".join(modules),
                                "the grader's environment, as the worker sees it (its uid, its audit hook, its "
                                "file system): run `pip check`; a library it may not load is named above"
                                if failed else ""))
    return findings


def _confinement_findings(report: dict, layers: isolation.Layers, limits: Limits) -> list[Finding]:
    """The layers of a worker on a uid of its own that hold without namespaces: its seccomp
    filter, its CPUs, the bound on what it writes, and what is ended after it."""
    filtered = report["seccomp_filters"] > 0
    findings = [Finding("seccomp filter (no socket but AF_UNIX, no SysV IPC, keyring, io_uring, CPU change)",
                        filtered, f"{report['seccomp_filters']} filter(s) on the worker",
                        "" if filtered else "grade on x86-64 or aarch64 Linux, whose kernel has seccomp")]
    pinned = layers.cpus is not None and report["cpus"] == list(layers.cpus)
    findings.append(Finding("CPU bounded (pinned to its CPUs, which it may not change)", pinned,
                            f"CPUs {', '.join(map(str, report['cpus']))} of {os.cpu_count()}"))
    if not layers.bwrap:
        findings.append(Finding("network and IPC namespaces of its own (container isolation)",
                                True if layers.own_namespaces else None,
                                "made as root before the worker drops to its uid" if layers.own_namespaces else
                                "refused here (Docker's seccomp profile): the worker's filter refuses AF_UNIX sockets "
                                "too, and IPC objects left are removed after it"))
        findings.append(Finding("a file system of its own (container isolation: a tree of links it changes its "
                                "root to, the secrets left out)", True if layers.own_root else None,
                                "what full isolation binds, as hard links; nothing else of the machine"
                                if layers.own_root else "not for a GPU worker (CUDA in a root without /proc and /sys "
                                "is untried): the machine's file system, its secrets unreadable by the uid"))
        findings.append(Finding("writable space bounded (container isolation: a watch of what its uid writes)",
                                layers.space_watch, f"{limits.workdir_bytes // MiB} MiB / {limits.workdir_files} files "
                                "over its folder and its files in " + ", ".join(uids.SHARED_WRITABLE)))
    uid, gid = layers.sandbox_uid, layers.sandbox_uid - limits.sandbox_uid + limits.sandbox_gid
    cleared = uids.clear_keyrings_of(uid, gid)
    findings.append(Finding("nothing outlives a worker (its uid's processes killed by kill(-1), SysV IPC objects and "
                            "files in shared folders removed)", True, "after each worker and before the next on its slot"))
    findings.append(Finding("its uid's keyrings cleared after it", True if cleared else None,
                            "cleared by a process of the uid" if cleared else
                            "the uid cannot run this Python (under bubblewrap it reaches it through a bind): "
                            "the seccomp filter alone keeps its keyrings empty"))
    return findings


# Not a layer of the sandbox: whether grading can run in it (each check that needs a module the
# worker cannot import is skipped, and the grade ends in status error).
IMPORTS_LAYER = "the worker imports what the checks need"


def full_isolation(findings: list[Finding]) -> bool:
    return all(finding.ok is not False for finding in findings if finding.layer != IMPORTS_LAYER)


def ready_to_grade(findings: list[Finding]) -> bool:
    return all(finding.ok is not False for finding in findings)


def render(findings: list[Finding], level: str = isolation.FULL) -> str:
    marks = {True: "ok  ", False: "FAIL", None: "info"}
    lines = []
    for finding in findings:
        lines.append(f"[{marks[finding.ok]}] {finding.layer}: {finding.detail}")
        if finding.fix:
            lines.append(f"       fix: {finding.fix}")
    if not full_isolation(findings):
        verdict = (f"NOT isolated ({level} isolation): instructor grading refuses to run here (or add "
                   "--unsafe-no-sandbox for code you trust)")
    elif level == isolation.CONTAINER:
        verdict = ("container isolation: instructor grading with --isolation container may run here (a batch too; "
                   "one submission at a time where its workers get the GPU)")
    else:
        verdict = "full isolation: instructor grading may run here"
    if any(finding.layer == IMPORTS_LAYER and finding.ok is False for finding in findings):
        verdict += ("\nthe worker cannot import what the checks need: every check that needs it is skipped and "
                    "each grade ends in status error until the environment is fixed (above)")
    return "\n".join([*lines, verdict])
