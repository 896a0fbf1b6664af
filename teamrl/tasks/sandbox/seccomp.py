"""The seccomp filter every sandboxed program runs under (installed by ``_boot.py``).

A deny list in the spirit of container runtimes' default profiles, written as a classic BPF program
so that no library is needed: no new namespaces (``unshare``, ``setns``, ``clone`` with namespace
flags; ``clone3``, whose flags a filter cannot read, answers ENOSYS so that libc falls back to
``clone``), no ``ptrace`` or access to other processes' memory, no mounts, no kernel keyrings, BPF,
perf events, io_uring (which would bypass this filter), module loading, clock or host changes; and
sockets only of the local (``AF_UNIX``) family, so no network even where there is no network
namespace. A system call of another architecture (x32 on x86-64 included) kills the process.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct

# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each)
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets; args[0]'s low half on a little-endian machine

_LD_W_ABS = 0x20
_JEQ_K, _JGE_K, _JSET_K = 0x15, 0x35, 0x45
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000

_AF_UNIX = 1
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_X32_BIT = 0x40000000

DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "open_by_handle_at",
    "name_to_handle_at",
    "swapon",
    "swapoff",
    "reboot",
    "sethostname",
    "setdomainname",
    "acct",
    "settimeofday",
    "clock_settime",
    "adjtimex",
    "clock_adjtime",
    "syslog",
    "quotactl",
    "vhangup",
    "personality",
    "lookup_dcookie",
)

# (AUDIT_ARCH_*, system call numbers) per machine; checked against the kernel headers by the tests.
_ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (
        0xC000003E,
        {
            "socket": 41,
            "clone": 56,
            "clone3": 435,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "bpf": 321,
            "perf_event_open": 298,
            "userfaultfd": 323,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "open_by_handle_at": 304,
            "name_to_handle_at": 303,
            "swapon": 167,
            "swapoff": 168,
            "reboot": 169,
            "sethostname": 170,
            "setdomainname": 171,
            "acct": 163,
            "settimeofday": 164,
            "clock_settime": 227,
            "adjtimex": 159,
            "clock_adjtime": 305,
            "syslog": 103,
            "quotactl": 179,
            "vhangup": 153,
            "personality": 135,
            "lookup_dcookie": 212,
        },
    ),  # fmt: skip
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198,
            "clone": 220,
            "clone3": 435,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "open_tree": 428,
            "move_mount": 429,
            "fsopen": 430,
            "fsconfig": 431,
            "fsmount": 432,
            "fspick": 433,
            "mount_setattr": 442,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "bpf": 280,
            "perf_event_open": 241,
            "userfaultfd": 282,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "open_by_handle_at": 265,
            "name_to_handle_at": 264,
            "swapon": 224,
            "swapoff": 225,
            "reboot": 142,
            "sethostname": 161,
            "setdomainname": 162,
            "acct": 89,
            "settimeofday": 170,
            "clock_settime": 112,
            "adjtimex": 171,
            "clock_adjtime": 266,
            "syslog": 116,
            "quotactl": 60,
            "vhangup": 58,
            "personality": 92,
            "lookup_dcookie": 18,
        },
    ),  # fmt: skip
}


def _machine(machine: str | None) -> str:
    return machine or platform.machine()


class UnsupportedMachine(RuntimeError):
    """No filter is defined for this processor architecture."""


def syscall_numbers(machine: str | None = None) -> dict[str, int]:
    """The system call numbers the filter uses on ``machine`` (default: this one)."""
    return _arch(machine)[1]


def _arch(machine: str | None) -> tuple[int, dict[str, int]]:
    machine = _machine(machine)
    if machine not in _ARCHES:
        raise UnsupportedMachine(
            f"the sandbox's seccomp filter knows {sorted(_ARCHES)}, not {machine!r}; run on one of those, "
            "or add this architecture's system call numbers to teamrl/tasks/sandbox/seccomp.py"
        )
    return _ARCHES[machine]


@functools.cache
def filter_program(machine: str | None = None) -> bytes:
    """The filter as an array of ``struct sock_filter`` (what ``PR_SET_SECCOMP`` takes)."""
    audit_arch, numbers = _arch(machine)
    deny = _RET_ERRNO | errno.EPERM
    # Instructions with symbolic jump targets, resolved below: ("jeq", k, target_if_true).
    body: list[tuple] = [
        ("ld", _ARCH),
        ("jne", audit_arch, "kill"),
        ("ld", _NR),
    ]
    if _machine(machine) == "x86_64":
        body.append(("jge", _X32_BIT, "kill"))
    body += [("jeq", numbers[name], "deny") for name in DENIED]
    body += [
        ("jeq", numbers["clone3"], "nosys"),
        ("jeq", numbers["clone"], "clone"),
        ("jeq", numbers["socket"], "socket"),
        ("ret", _RET_ALLOW),
        ("label", "clone"),
        ("ld", _ARG0),
        ("jset", _CLONE_NAMESPACES, "deny"),
        ("ret", _RET_ALLOW),
        ("label", "socket"),
        ("ld", _ARG0),
        ("jeq", _AF_UNIX, "allow"),
        ("ret", _RET_ERRNO | errno.EAFNOSUPPORT),
        ("label", "allow"),
        ("ret", _RET_ALLOW),
        ("label", "deny"),
        ("ret", deny),
        ("label", "nosys"),
        ("ret", _RET_ERRNO | errno.ENOSYS),
        ("label", "kill"),
        ("ret", _RET_KILL_PROCESS),
    ]
    labels: dict[str, int] = {}
    code: list[tuple] = []
    for item in body:
        if item[0] == "label":
            labels[item[1]] = len(code)
        else:
            code.append(item)
    out = bytearray()
    for position, (op, *rest) in enumerate(code):
        if op == "ld":
            out += struct.pack("<HBBI", _LD_W_ABS, 0, 0, rest[0])
        elif op == "ret":
            out += struct.pack("<HBBI", _RET_K, 0, 0, rest[0])
        else:
            k, target = rest
            offset = labels[target] - position - 1
            if not 0 <= offset < 256:
                raise AssertionError(f"seccomp jump of {offset} instructions does not fit")
            opcode = {"jeq": _JEQ_K, "jne": _JEQ_K, "jge": _JGE_K, "jset": _JSET_K}[op]
            jt, jf = (0, offset) if op == "jne" else (offset, 0)
            out += struct.pack("<HBBI", opcode, jt, jf, k)
    return bytes(out)
