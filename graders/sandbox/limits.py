"""Resource limits of one worker, and the code that applies them inside it.

The rlimits are applied by the worker itself, first thing after it starts and before any
student code runs, rather than in a `preexec_fn`: `preexec_fn` is unsafe in a grader that runs
threads (each worker's output is drained by one), and the worker's start-up code is ours.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Limits:
    """How much one submission may use. `None` means "no limit" where it is allowed."""

    # Wall clock of one request (a call, an import, a task unless it names its own timeout).
    call_timeout_s: float = 60.0
    # Wall clock of all requests of one submission together, worker starts included. Time the
    # grader spends on its own (oracles, reports) between requests does not count.
    submission_budget_s: float = 600.0
    # Starting a worker imports torch: a few seconds, more on a loaded batch machine.
    start_timeout_s: float = 120.0
    # RLIMIT_AS. Ignored with a GPU: CUDA reserves far more address space than it uses.
    address_space_bytes: int | None = 8 * GiB
    # RLIMIT_CPU over the worker's life (a restarted worker starts from zero). Above the wall
    # clock budget because student threads can burn CPU in parallel.
    cpu_seconds: int | None = 900
    # RLIMIT_FSIZE: the largest file the student's code may write.
    max_file_bytes: int = 64 * MiB
    # RLIMIT_NPROC: processes and threads of the sandbox user, counted over the whole machine
    # (so over every worker of a batch that runs as that user). Binds only for a non-root user.
    max_processes: int = 256
    # The tail of the student's stdout and stderr kept per request.
    max_output_bytes: int = 20_000
    # The largest reply the grader accepts from the worker, header and tensors together.
    max_message_bytes: int = 512 * MiB
    # Its JSON part alone: parsed, JSON grows by up to ~30x (`[]` is 2 bytes, a list 56), while
    # tensors stay the bytes they are.
    max_header_bytes: int = 16 * MiB
    # torch.set_num_threads and OMP/MKL/OpenBLAS threads: 1 keeps results reproducible and lets
    # a batch run one worker per core.
    threads: int = 1
    # The unprivileged users the workers become when the grader runs as root: uid (and gid)
    # `sandbox_uid + slot`, one slot per worker running at a time on the machine (see
    # graders/sandbox/uids.py), so process limits, signals and /proc are per student. Far above
    # the ranges that distributions, systemd and user namespaces hand out: no such user exists.
    sandbox_uid: int = 1_970_000_000
    sandbox_gid: int = 1_970_000_000
    sandbox_slots: int = 256
    # The worker's writable space under bubblewrap (as root): its folder and /dev/shm are private
    # tmpfs mounts of these sizes and numbers of files (inodes), gone with the worker. /tmp is
    # bubblewrap's tmpfs of tmp_bytes, root's (the sandbox user cannot write there at all).
    workdir_bytes: int = 256 * MiB
    workdir_files: int = 4096
    tmp_bytes: int = 64 * MiB
    shm_bytes: int = 128 * MiB
    shm_files: int = 256

    @property
    def sandbox_uids(self) -> range:
        """Every uid a worker may run as: none of them may own a folder the grader writes into."""
        return range(self.sandbox_uid, self.sandbox_uid + self.sandbox_slots)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Limits:
        return cls(**data)


def apply_rlimits(limits: Limits, *, gpu: bool, best_effort: bool = False) -> None:
    """Lower this process's rlimits (soft and hard, so student code cannot raise them again).
    `best_effort` (self-check: crash containment on the student's machine) applies those the
    platform has and accepts, and none where there is no `resource` module (Windows)."""
    try:
        import resource
    except ImportError:
        if best_effort:
            return
        raise
    address_space = None if gpu else limits.address_space_bytes
    wanted = [(resource.RLIMIT_AS, address_space, address_space),
              (resource.RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes),
              (resource.RLIMIT_NPROC, limits.max_processes, limits.max_processes),
              (resource.RLIMIT_CORE, 0, 0)]
    if limits.cpu_seconds is not None:
        # The soft limit sends SIGXCPU, which kills the worker with a recognisable signal; the
        # hard limit a little later is SIGKILL, in case SIGXCPU is caught or ignored.
        wanted.append((resource.RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 5))
    for which, soft, hard in wanted:
        if soft is None:
            continue
        try:
            resource.setrlimit(which, (soft, hard))
        except (ValueError, OSError):
            if not best_effort:  # macOS, for one, refuses some limits that Linux accepts
                raise
