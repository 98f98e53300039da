"""A seccomp filter for the worker: the system calls no student code needs and every sandbox
layer without namespaces must refuse.

Installed by the worker on itself (every thread) after PR_SET_NO_NEW_PRIVS, which lets an
unprivileged process install one, so it holds in a container whose seccomp profile forbids
namespaces (Docker's default) as much as under bubblewrap. Refused with EPERM, which student
code sees as a PermissionError:

- sockets of every family but AF_UNIX (without a network namespace of its own, AF_UNIX too:
  an abstract socket name reaches any listener on the machine); `socketpair` stays (a pair
  of connected ends reaches nothing else);
- SysV IPC objects (shmget, msgget, semget) and POSIX message queues (mq_open): they outlive
  the process that made them;
- the kernel keyring (add_key, request_key, keyctl): a uid's user keyring outlives every
  process of it, a channel to the next student on the same uid;
- io_uring (its operations open sockets and files without the system calls above);
- sched_setaffinity, so that the CPUs the worker was pinned to bound it;
- any call of another architecture's table (the 32-bit and x32 entry points on x86-64), where
  the numbers above mean something else.

And `fallocate` fails with EOPNOTSUPP, as on a file system without it (glibc's
`posix_fallocate` then writes the blocks one by one): preallocation took 3 GiB of disk in
2 ms, past a write bound that is watched rather than mounted (container isolation), and with
FALLOC_FL_KEEP_SIZE it reserves blocks past the file's end, beyond RLIMIT_FSIZE. Without it, a
file takes space only as fast as the worker writes it.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
NR_OFFSET, ARCH_OFFSET, FIRST_ARGUMENT_OFFSET = 0, 4, 16  # the low half of args[0] (little-endian)
BPF_LD_W_ABS, BPF_JEQ_K, BPF_JGE_K, BPF_RET_K = 0x20, 0x15, 0x35, 0x06
RET_ALLOW = 0x7FFF0000
RET_EPERM = 0x00050000 | errno.EPERM
RET_EOPNOTSUPP = 0x00050000 | errno.EOPNOTSUPP
SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
AF_UNIX = 1
X32_SYSCALL_BIT = 0x40000000

# (audit architecture, the seccomp system call, system calls refused outright, socket, fallocate).
ARCHITECTURES = {
    "x86_64": (0xC000003E, 317, {"shmget": 29, "semget": 64, "msgget": 68, "mq_open": 240,
                                 "add_key": 248, "request_key": 249, "keyctl": 250,
                                 "io_uring_setup": 425, "sched_setaffinity": 203}, 41, 285),
    "aarch64": (0xC00000B7, 277, {"shmget": 194, "semget": 190, "msgget": 186, "mq_open": 180,
                                  "add_key": 217, "request_key": 218, "keyctl": 219,
                                  "io_uring_setup": 425, "sched_setaffinity": 122}, 198, 47),
}


class SeccompUnavailable(OSError):
    """The filter could not be installed: the worker must not run student code."""


def supported() -> bool:
    return platform.machine() in ARCHITECTURES


def refused_calls() -> list[str]:
    return sorted(ARCHITECTURES[platform.machine()][2]) if supported() else []


def program(*, allow_unix_sockets: bool, machine: str | None = None) -> bytes:
    """The filter as classic BPF instructions (struct sock_filter, 8 bytes each)."""
    audit_arch, _, refused, socket_call, fallocate = ARCHITECTURES[machine or platform.machine()]
    allow_unix = [(BPF_LD_W_ABS, 0, 0, FIRST_ARGUMENT_OFFSET), (BPF_JEQ_K, 1, 0, AF_UNIX),
                  (BPF_RET_K, 0, 0, RET_EPERM), (BPF_RET_K, 0, 0, RET_ALLOW)]
    socket_rule = allow_unix if allow_unix_sockets else [(BPF_RET_K, 0, 0, RET_EPERM)]
    numbers = sorted(refused.values())
    instructions = [(BPF_LD_W_ABS, 0, 0, ARCH_OFFSET), (BPF_JEQ_K, 1, 0, audit_arch), (BPF_RET_K, 0, 0, RET_EPERM),
                    (BPF_LD_W_ABS, 0, 0, NR_OFFSET)]
    if audit_arch == ARCHITECTURES["x86_64"][0]:
        instructions.append((BPF_JGE_K, 0, 1, X32_SYSCALL_BIT))  # x32 numbers: refused
        instructions.append((BPF_RET_K, 0, 0, RET_EPERM))
    instructions += [(BPF_JEQ_K, 0, 1, fallocate), (BPF_RET_K, 0, 0, RET_EOPNOTSUPP)]
    # Each refused number jumps to the EPERM after the list; socket to its own rule after that.
    for index, number in enumerate(numbers):
        instructions.append((BPF_JEQ_K, len(numbers) - index + 1, 0, number))
    instructions.append((BPF_JEQ_K, 2, 0, socket_call))
    instructions.append((BPF_RET_K, 0, 0, RET_ALLOW))
    instructions.append((BPF_RET_K, 0, 0, RET_EPERM))
    instructions += socket_rule
    return b"".join(struct.pack("=HBBI", *instruction) for instruction in instructions)


def install(*, allow_unix_sockets: bool) -> None:
    """Install the filter on every thread of this process (needs PR_SET_NO_NEW_PRIVS or
    CAP_SYS_ADMIN); raises SeccompUnavailable if the kernel refuses."""
    if not supported():
        raise SeccompUnavailable(errno.ENOSYS, f"no seccomp filter for the {platform.machine()} architecture")
    code = program(allow_unix_sockets=allow_unix_sockets)
    filters = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(code) // 8, ctypes.addressof(filters))
    libc = ctypes.CDLL(None, use_errno=True)
    seccomp_call = ARCHITECTURES[platform.machine()][1]
    if libc.syscall(seccomp_call, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, ctypes.byref(fprog)) != 0:
        number = ctypes.get_errno()
        raise SeccompUnavailable(number, f"installing the worker's seccomp filter failed: {errno.errorcode.get(number, number)}")
