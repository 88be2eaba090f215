"""The seccomp layer: a system-call filter each unit puts on itself just before the program runs.

A classic BPF program, built once in the zygote, denies what no program needs and every
escape starts with: namespaces (unshare, setns, clone with a namespace flag), mounts and
pivot_root, keyrings, ptrace and process_vm_*, bpf, perf events, io_uring, userfaultfd,
kexec, kernel modules, System V IPC and POSIX message queues (state that outlives a
unit). A denied call kills the whole unit (SIGSYS): the zygote sees it in the exit status,
so the program cannot catch it or hide it. Two calls fail instead of killing: socket()
with EPERM (a unit has no network, and abstract unix sockets would be a channel between
concurrent units; but the C library's user lookups try a socket first, as pytest's do, and
go on without one), and clone3 with ENOSYS (its flags are behind a pointer the filter
cannot read; the C library then falls back to clone, which is checked). The filter cannot
be removed, and is inherited.
"""
import ctypes
import os
import platform
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
RET_KILL_PROCESS, RET_ALLOW, RET_ERRNO = 0x80000000, 0x7FFF0000, 0x00050000
EPERM, ENOSYS = 1, 38
# classic BPF opcodes: load a word at an absolute offset, jumps comparing with a constant, return
LD_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
# struct seccomp_data: nr, arch, instruction pointer, args (the low word of args[0] on little-endian)
NR_OFFSET, ARCH_OFFSET, ARG0_OFFSET = 0, 4, 16
NAMESPACE_FLAGS = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000
                   | 0x40000000)  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET

DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
          "fsconfig", "fsmount", "fspick", "mount_setattr", "keyctl", "add_key", "request_key", "ptrace",
          "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open", "io_uring_setup", "io_uring_enter",
          "io_uring_register", "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
          "delete_module", "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop",
          "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open")
FAILED = {"socket": EPERM, "clone3": ENOSYS}  # call -> the errno it fails with
# (AUDIT_ARCH_*, first number of another ABI sharing the architecture or None, syscall numbers)
ARCHITECTURES = {
    "x86_64": (0xC000003E, 0x40000000, {
        "clone": 56, "clone3": 435, "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 323,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "shmget": 29, "shmat": 30, "shmctl": 31, "shmdt": 67, "semget": 64, "semop": 65, "semctl": 66,
        "semtimedop": 220, "msgget": 68, "msgsnd": 69, "msgrcv": 70, "msgctl": 71, "mq_open": 240, "socket": 41}),
    "aarch64": (0xC00000B7, None, {
        "clone": 220, "clone3": 435, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "chroot": 51, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432,
        "fspick": 433, "mount_setattr": 442, "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280, "perf_event_open": 241,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "userfaultfd": 282,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "shmget": 194, "shmat": 196, "shmctl": 195, "shmdt": 197, "semget": 190, "semop": 193, "semctl": 191,
        "semtimedop": 192, "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187, "mq_open": 180,
        "socket": 198}),
}


def _statement(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def program(machine: str) -> bytes | None:
    """The filter for this machine's architecture, or None where it has no syscall table here."""
    if machine not in ARCHITECTURES:
        return None
    arch, other_abi, numbers = ARCHITECTURES[machine]
    # (opcode, constant, jump if true, jump if false); a jump names one of the returns at the end, or None: the
    # next instruction. Jumps go forward only.
    body = [(LD_ABS, ARCH_OFFSET, None, None), (JEQ, arch, None, "kill"), (LD_ABS, NR_OFFSET, None, None)]
    if other_abi is not None:  # x32 calls on x86_64: another table, not checked here
        body.append((JGE, other_abi, "kill", None))
    body += [(JEQ, numbers[name], "kill", None) for name in DENIED]
    body += [(JEQ, numbers[name], name, None) for name in FAILED]
    body += [(JEQ, numbers["clone"], None, "allow"), (LD_ABS, ARG0_OFFSET, None, None),
             (JSET, NAMESPACE_FLAGS, "kill", "allow")]
    values = {"allow": RET_ALLOW, "kill": RET_KILL_PROCESS, **{name: RET_ERRNO | errno for name, errno in FAILED.items()}}
    returns = {name: (len(body) + index, value) for index, (name, value) in enumerate(values.items())}
    code = [_statement(op, k, *(0 if to is None else returns[to][0] - pc - 1 for to in (jt, jf)))
            for pc, (op, k, jt, jf) in enumerate(body)]
    code += [_statement(RET, value) for _, value in returns.values()]
    return b"".join(code)


class Filter:
    """The filter in C memory, made once in the zygote, so a unit only has to make one call."""

    def __init__(self, code: bytes):
        self.buffer = ctypes.create_string_buffer(code, len(code))
        fprog = struct.pack("@HP", len(code) // 8, ctypes.addressof(self.buffer))  # struct sock_fprog
        self.fprog = ctypes.create_string_buffer(fprog, len(fprog))
        self.libc = ctypes.CDLL(None, use_errno=True)

    def install(self) -> None:
        """Puts the filter on the calling process (which must have set no_new_privs)."""
        arguments = (SECCOMP_MODE_FILTER, ctypes.addressof(self.fprog), 0, 0)
        if self.libc.prctl(PR_SET_SECCOMP, *map(ctypes.c_ulong, arguments)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")


def make_filter() -> tuple["Filter | None", str | None]:
    """The filter for this host, or None and why there is none."""
    code = program(platform.machine())
    if code is None:
        return None, f"no system-call table for {platform.machine()}"
    return Filter(code), None
