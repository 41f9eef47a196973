"""Show a Go program (kubectl) the twin's simulated wall clock instead of the host's.

kubectl computes some times itself — the ages in ``describe``, ``restartedAt`` of ``rollout restart``,
certificate validity — and from the host clock these disagree with a cluster that lives in
2026-01-01. Time namespaces cannot offset ``CLOCK_REALTIME``, ``LD_PRELOAD`` does nothing to a
static Go binary, and Go reads the clock through the vDSO, without a system call. So:

1. A short-lived *spawner* thread sets ``no_new_privs`` and installs, on itself only, a seccomp
   filter that sends four system calls to a user-space listener (``SECCOMP_RET_USER_NOTIF``) and
   lets every other one through: ``clock_gettime`` of the real-time clocks, ``gettimeofday``,
   ``time``, and ``arch_prctl(ARCH_SET_FS)``. It starts the program with ``subprocess.Popen``; the
   program and everything it starts (bwrap's sandbox, kubectl, kubectl's threads) inherit the filter.
2. A *supervisor* thread answers the listener. ``arch_prctl(ARCH_SET_FS)`` is the first system call
   of a Go program, made before its runtime reads the auxiliary vector (``runtime·rt0_go`` calls
   ``settls`` before ``args``), and an early one of a C program's dynamic loader. While the program
   waits there, the supervisor rewrites the program's copy of the vDSO's ``clock_gettime``,
   ``gettimeofday`` and ``time`` (through ``/proc/PID/mem``, copy on write, as a debugger sets a
   breakpoint) into a few instructions that read the simulated time from a slot at the end of the
   rewritten code and make the real system call for every other clock. The slot holds the twin's
   time, held still between the twin's moves as the twin's clock is, and the supervisor rewrites it
   when the twin's time moves during the call (``set_time``). kubectl's ~200 clock reads a command
   then cost what they cost without the shim. Where the vDSO cannot be rewritten (an unexpected
   layout, a kernel that refuses the write), the supervisor turns the auxiliary vector's
   ``AT_SYSINFO_EHDR`` entry into ``AT_IGNORE`` instead: a Go runtime that finds no vDSO makes real
   system calls, and the filter brings each wall-clock one to the supervisor, which writes the
   simulated time into the caller's memory (a round trip each). A C program has read its auxiliary
   vector by then, so on that path it keeps the host clock.
3. Raw wall-clock system calls reach the supervisor on either path and get the same answer, so what
   kubectl prints does not depend on how fast the host is. ``CLOCK_MONOTONIC`` and every other clock
   stay real, so timeouts keep working — except in the processes of the executables a tool names as
   ``simulated`` (kubectl on the twin): their monotonic clocks read the slot too, so their timers
   and timeouts run on the twin's time, which ``backends/programs.py`` lets pass while they wait on
   them (``kick`` then wakes a Go runtime sleeping in epoll to look at its timers again). Such a
   program's kernel waits must be relative ones, as Go's are (epoll, futex and nanosleep timeouts):
   a wait for an absolute monotonic instant would wait for the host's clock to reach the twin's.

No ptrace, no ``execve`` hook and no ``waitpid``: nothing here can reap or stop a child of the
Python process, and a ``Popen`` that holds the GIL across ``vfork`` (older CPython releases, e.g.
3.11.2) cannot deadlock against the supervisor, because no call made before the program's
``execve`` completes needs an answer. Where the architecture (x86-64 only), the kernel (Linux 5.0+)
or a security policy refuses any of this, ``clock_shim_available()`` is False and programs run with
the host clock.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import platform
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# x86-64 system calls and constants (asm/unistd_64.h, linux/seccomp.h, asm/prctl.h, elf.h).
_AUDIT_ARCH_X86_64 = 0xC000003E
_NR_TIME, _NR_GETTIMEOFDAY, _NR_ARCH_PRCTL, _NR_CLOCK_GETTIME, _NR_SECCOMP = 201, 96, 158, 228, 317
_NR_TGKILL = 234
#: epoll_wait and epoll_pwait, as ``/proc/PID/task/TID/syscall`` names them.
_EPOLL_CALLS = (b"232", b"281")
_ARCH_SET_FS = 0x1002
#: Clock ids that read the wall clock: CLOCK_REALTIME, CLOCK_REALTIME_COARSE, CLOCK_REALTIME_ALARM.
_REALTIME_CLOCKS = (0, 5, 8)

_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_GET_NOTIF_SIZES = 3
_SECCOMP_FILTER_FLAG_NEW_LISTENER = 1 << 3
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_USER_NOTIF = 0x7FC00000
_SECCOMP_USER_NOTIF_FLAG_CONTINUE = 1
_IOCTL_NOTIF_RECV = 0xC0502100  # _IOWR('!', 0, struct seccomp_notif)
_IOCTL_NOTIF_SEND = 0xC0182101  # _IOWR('!', 1, struct seccomp_notif_resp)
_IOCTL_NOTIF_ID_VALID = 0x40082102  # _IOW('!', 2, __u64)
_IOCTL_NOTIF_SET_FLAGS = 0x40082104  # _IOW('!', 4, __u64), Linux 6.6
_USER_NOTIF_FD_SYNC_WAKE_UP = 1

_AT_NULL, _AT_IGNORE, _AT_SYSINFO_EHDR = 0, 1, 33

# Classic BPF opcodes (linux/filter.h) and offsets into struct seccomp_data.
_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_DATA_NR, _DATA_ARCH, _DATA_ARG0 = 0, 4, 16

_NOTIF = struct.Struct("<QIIiIQ6Q")  # struct seccomp_notif: id, pid, flags, then struct seccomp_data
_RESP = struct.Struct("<QqiI")  # struct seccomp_notif_resp: id, val, error, flags
_PAIR = struct.Struct("<qq")  # struct timespec / struct timeval on x86-64


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


class _NotifSizes(ctypes.Structure):
    _fields_ = [("notif", ctypes.c_uint16), ("resp", ctypes.c_uint16), ("data", ctypes.c_uint16)]


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.ioctl.restype = ctypes.c_int
    libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    for name in ("process_vm_readv", "process_vm_writev"):
        fn = getattr(libc, name)
        fn.restype = ctypes.c_ssize_t
        fn.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                       ctypes.c_ulong]
    return libc


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _filter_program() -> list[tuple[int, int, int, int]]:
    """The BPF program: USER_NOTIF for the wall-clock calls and ARCH_SET_FS, ALLOW for everything else."""
    # (label, opcode, jump-if-true label, jump-if-false label, k); a None jump is "next instruction".
    code: list[tuple[str | None, int, str | None, str | None, int]] = [
        (None, _LD_W_ABS, None, None, _DATA_ARCH),
        (None, _JEQ_K, None, "allow", _AUDIT_ARCH_X86_64),
        (None, _LD_W_ABS, None, None, _DATA_NR),
        (None, _JEQ_K, "notify", None, _NR_GETTIMEOFDAY),
        (None, _JEQ_K, "notify", None, _NR_TIME),
        (None, _JEQ_K, "arg0", None, _NR_ARCH_PRCTL),
        (None, _JEQ_K, "arg0", "allow", _NR_CLOCK_GETTIME),
        # The low half of args[0] (little endian): ARCH_SET_FS for arch_prctl, the clock id otherwise.
        ("arg0", _LD_W_ABS, None, None, _DATA_ARG0),
        (None, _JEQ_K, "notify", None, _ARCH_SET_FS),
        *[(None, _JEQ_K, "notify", None, clock_id) for clock_id in _REALTIME_CLOCKS],
        ("allow", _RET_K, None, None, _SECCOMP_RET_ALLOW),
        ("notify", _RET_K, None, None, _SECCOMP_RET_USER_NOTIF),
    ]
    where = {label: i for i, (label, *_rest) in enumerate(code) if label}

    def offset(i: int, target: str | None) -> int:
        return 0 if target is None else where[target] - i - 1

    return [(op, offset(i, jt), offset(i, jf), k) for i, (_label, op, jt, jf, k) in enumerate(code)]


def _install_filter() -> int:
    """Install the filter on the calling thread only (and its future children); the listener's fd."""
    libc = _libc()
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    insns = _filter_program()
    array = (_SockFilter * len(insns))(*[_SockFilter(*insn) for insn in insns])
    prog = _SockFprog(len(insns), array)
    return _check(libc.syscall(ctypes.c_long(_NR_SECCOMP), ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                               ctypes.c_long(_SECCOMP_FILTER_FLAG_NEW_LISTENER), ctypes.byref(prog)), "seccomp")


def _read_memory(tid: int, address: int, size: int) -> bytes:
    buf = ctypes.create_string_buffer(size)
    local, remote = _IoVec(ctypes.cast(buf, ctypes.c_void_p), size), _IoVec(address, size)
    got = _libc().process_vm_readv(tid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if got < 0:
        raise OSError(ctypes.get_errno(), f"process_vm_readv: {os.strerror(ctypes.get_errno())}")
    return buf.raw[:got]


def _vdso_entry(tid: int) -> tuple[int, int] | None:
    """Where ``tid``'s initial stack holds ``AT_SYSINFO_EHDR``, and its value (the vDSO's address); None if none.

    The initial stack is argc, argv[argc], NULL, envp..., NULL, then (tag, value) pairs; its start
    is ``startstack`` of ``/proc/TID/stat`` (the kernel's ``mm->start_stack``, where it put argc).
    Raises OSError when the process may not be read.
    """
    with open(f"/proc/{tid}/stat", "rb") as f:
        start = int(f.read().rsplit(b")", 1)[1].split()[25])
    size = 4096
    while size <= 1 << 24:  # argv and envp can be long; a stack is at most a few MiB
        data = _read_memory(tid, start, size)
        words = memoryview(data[: len(data) // 8 * 8]).cast("Q")
        if not words:
            return None
        index = words[0] + 2  # past argc, argv and its NULL
        while index < len(words) and words[index] != 0:  # envp
            index += 1
        index += 1
        while index + 1 < len(words):
            tag = words[index]
            if tag == _AT_NULL:
                return None  # no vDSO given, or already hidden
            if tag == _AT_SYSINFO_EHDR:
                return start + index * 8, words[index + 1]
            index += 2
        if len(data) < size:
            return None  # the stack ended before the auxiliary vector did
        size *= 4
    return None


def _hide_vdso(tid: int, entry: int) -> None:
    """Turn the auxiliary vector's ``AT_SYSINFO_EHDR`` entry at ``entry`` into ``AT_IGNORE``."""
    buf = ctypes.create_string_buffer(_AT_IGNORE.to_bytes(8, "little"), 8)
    local, remote = _IoVec(ctypes.cast(buf, ctypes.c_void_p), 8), _IoVec(entry, 8)
    if _libc().process_vm_writev(tid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0) != 8:
        raise OSError(ctypes.get_errno(), f"process_vm_writev: {os.strerror(ctypes.get_errno())}")


#: Clock ids that run on the twin's clock in a program whose timers follow it (``ClockShim``'s
#: ``simulated``): CLOCK_MONOTONIC, CLOCK_MONOTONIC_RAW, CLOCK_MONOTONIC_COARSE, CLOCK_BOOTTIME and
#: CLOCK_BOOTTIME_ALARM. CPU-time clocks always stay real.
_MONOTONIC_CLOCKS = (1, 4, 6, 7, 9)
#: Bytes reserved at the end of the rewritten ``clock_gettime`` for the time it answers: the same
#: nanosecond count twice (``_Supervisor.set_time`` writes the first, then the second).
_SLOT_SIZE = 16


def _clock_code(functions: dict[str, tuple[int, int]], clock_ids: tuple[int, ...]) -> tuple[dict[int, bytes], int] | None:
    """x86-64 code for the vDSO's clock functions that answers the time held in a slot (System V
    calling convention), by address, and the slot's address; None when a function is missing or too
    small for its code.

    The slot, at the end of ``clock_gettime``'s body, holds the simulated time in nanoseconds twice; a
    reader takes the second copy, then the first, and reads again until they agree, so a write it
    overlaps (the supervisor writes the first copy, then the second) is never seen half done.
    ``clock_gettime`` answers it for ``clock_ids`` and makes the real system call for every other
    clock (what the program would do without a vDSO); ``gettimeofday`` answers it in microseconds and
    zeroes a ``struct timezone`` (UTC, no DST); ``time`` returns its seconds, stored through its pointer too.
    """
    if "__vdso_clock_gettime" not in functions:
        return None
    gettime_at, gettime_size = functions["__vdso_clock_gettime"]
    rel32 = struct.Struct("<i").pack
    syscall = b"\xb8" + struct.pack("<I", _NR_CLOCK_GETTIME) + b"\x0f\x05\xc3"  # mov eax, NR; syscall; ret
    compares = b"".join(  # cmp edi, id; je answer (past the later compares and the syscall)
        bytes([0x83, 0xFF, clock_id & 0xFF, 0x74, 5 * (len(clock_ids) - i - 1) + len(syscall)])
        for i, clock_id in enumerate(clock_ids))
    divide = b"\x31\xd2\xb9" + struct.pack("<I", 1_000_000_000) + b"\x48\xf7\xf1"  # xor edx, edx; mov ecx, 1e9; div rcx
    answer_at = gettime_at + len(compares) + len(syscall)
    # call read; div; mov [rsi], rax; mov [rsi+8], rdx; xor eax, eax; ret
    answer_len = 5 + len(divide) + 3 + 4 + 3
    read_at = answer_at + answer_len
    read_len = 7 + 7 + 3 + 2 + 2 + 2 + 1
    slot = (read_at + read_len + 7) // 8 * 8
    if slot + _SLOT_SIZE > gettime_at + gettime_size:
        return None

    def call(at: int) -> bytes:  # call read_ns, from an instruction at ``at``
        return b"\xe8" + rel32(read_at - (at + 5))

    answer = call(answer_at) + divide + b"\x48\x89\x06\x48\x89\x56\x08\x31\xc0\xc3"
    # read: mov rax, [second]; mov rdx, [first]; cmp rax, rdx; je done; pause; jmp read; done: ret
    read = (b"\x48\x8b\x05" + rel32(slot + 8 - (read_at + 7)) + b"\x48\x8b\x15" + rel32(slot - (read_at + 14))
            + b"\x48\x39\xd0\x74\x04\xf3\x90\xeb" + bytes([(-(read_len - 1)) & 0xFF]) + b"\xc3")
    body = compares + syscall + answer + read
    code = {"__vdso_clock_gettime": body + b"\xcc" * (slot - gettime_at - len(body))}
    if "__vdso_gettimeofday" in functions:
        at = functions["__vdso_gettimeofday"][0]
        tv = (call(at + 5) + divide + b"\x48\x89\x07"  # rax = sec, rdx = nsec; mov [rdi], rax
              + b"\x48\x89\xd0\x31\xd2\xb9" + struct.pack("<I", 1000) + b"\x48\xf7\xf1"  # mov rax, rdx; /1000
              + b"\x48\x89\x47\x08")  # mov [rdi+8], rax
        timezone = b"\x48\xc7\x06\x00\x00\x00\x00"  # mov qword [rsi], 0
        code["__vdso_gettimeofday"] = (b"\x48\x85\xff\x74" + bytes([len(tv)]) + tv  # test rdi, rdi; jz
                                       + b"\x48\x85\xf6\x74" + bytes([len(timezone)]) + timezone  # test rsi, rsi; jz
                                       + b"\x31\xc0\xc3")  # xor eax, eax; ret
    if "__vdso_time" in functions:
        at = functions["__vdso_time"][0]
        # call read; div (rax = sec); test rdi, rdi; jz +3; mov [rdi], rax; ret
        code["__vdso_time"] = call(at) + divide + b"\x48\x85\xff\x74\x03\x48\x89\x07\xc3"
    if any(len(code[name]) > functions[name][1] for name in code):
        return None
    return {functions[name][0]: text for name, text in code.items()}, slot


_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_PHDR = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr: type, flags, offset, vaddr, paddr, filesz, memsz, align
_DYN = struct.Struct("<qQ")  # Elf64_Dyn
_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size
_PT_LOAD, _PT_DYNAMIC = 1, 2
_DT_NULL, _DT_HASH, _DT_STRTAB, _DT_SYMTAB = 0, 4, 5, 6
_EM_X86_64, _STT_FUNC = 62, 2


def _vdso_functions(tid: int, base: int) -> dict[str, tuple[int, int]]:
    """The vDSO's defined functions at ``base`` in ``tid``: name -> (address, size); {} if it is not an ELF we read.

    The vDSO is a small shared object: its dynamic section names the symbol table, the string table
    and a SysV hash table whose ``nchain`` is the number of symbols.
    """
    ident, _type, machine, *_rest = header = _EHDR.unpack(_read_memory(tid, base, _EHDR.size))
    phoff, phentsize, phnum = header[5], header[9], header[10]
    if ident[:5] != b"\x7fELF\x02" or machine != _EM_X86_64 or phentsize != _PHDR.size:
        return {}
    phdrs = [_PHDR.unpack_from(_read_memory(tid, base + phoff, phnum * phentsize), i * phentsize) for i in range(phnum)]
    load = next((p for p in phdrs if p[0] == _PT_LOAD), None)
    dynamic = next((p for p in phdrs if p[0] == _PT_DYNAMIC), None)
    if load is None or dynamic is None:
        return {}
    bias = load[2] - load[3]  # file offset minus virtual address
    image = _read_memory(tid, base, load[2] + load[5])
    tables: dict[int, int] = {}
    for offset in range(dynamic[2], min(dynamic[2] + dynamic[5], len(image)) - _DYN.size + 1, _DYN.size):
        tag, value = _DYN.unpack_from(image, offset)
        if tag == _DT_NULL:
            break
        tables[tag] = value + bias
    if not {_DT_HASH, _DT_STRTAB, _DT_SYMTAB} <= tables.keys():
        return {}
    count = struct.unpack_from("<I", image, tables[_DT_HASH] + 4)[0]
    functions = {}
    for i in range(count):
        name_at, info, _other, shndx, value, size = _SYM.unpack_from(image, tables[_DT_SYMTAB] + i * _SYM.size)
        if shndx and info & 0xF == _STT_FUNC:
            name = image[tables[_DT_STRTAB] + name_at: image.index(b"\0", tables[_DT_STRTAB] + name_at)].decode("ascii", "replace")
            functions[name] = (base + value + bias, size)
    return functions


def _patch_vdso(tid: int, base: int, now_ns: int, clock_ids: tuple[int, ...]) -> int | None:
    """Rewrite the clock functions of ``tid``'s vDSO to answer the time of a slot, set to ``now_ns``,
    for ``clock_ids`` without a system call; the slot's address.

    The vDSO is mapped read-only and executable; ``/proc/TID/mem`` writes through that (copy on
    write, as a debugger sets a breakpoint there), so only this process sees the change. None when
    its functions are not where or as large as this expects (nothing written), or when the kernel
    refuses a write (``proc_mem.force_override=never``): the caller then hides the vDSO, so a Go
    runtime calls none of it.
    """
    try:
        built = _clock_code(_vdso_functions(tid, base), clock_ids)
        if built is None:
            return None
        code, slot = built
        fd = os.open(f"/proc/{tid}/mem", os.O_RDWR | os.O_CLOEXEC)
        try:
            if os.pwrite(fd, struct.pack("<qq", now_ns, now_ns), slot) != _SLOT_SIZE:
                return None
            for address, text in code.items():
                if os.pwrite(fd, text, address) != len(text):
                    return None
        finally:
            os.close(fd)
    except (OSError, ValueError, struct.error):
        return None
    return slot


class _Notif:
    """One intercepted system call, read from the listener."""

    __slots__ = ("args", "id", "nr", "tid")

    def __init__(self, raw: ctypes.Array[ctypes.c_char]) -> None:
        fields = _NOTIF.unpack_from(raw)
        self.id, self.tid, self.nr, self.args = fields[0], fields[1], fields[3], fields[6:]


class _Supervisor(threading.Thread):
    """Answers one program's listener: takes its vDSO over at start, then serves the simulated time.

    On the fallback path (vDSO hidden) kubectl makes about 200 clock calls per command, so the
    answering path keeps its ctypes objects allocated once; one answer costs about 27 µs of CPU.
    """

    def __init__(self, listener: int, now: float, notif_size: int, spawner_tid: int,
                 simulated: frozenset[tuple[int, int]] = frozenset()) -> None:
        super().__init__(name="itbench-clockshim", daemon=True)
        self.listener = listener
        self.now_ns = _sim_ns(now)
        self.spawner_tid = spawner_tid
        #: Executables, as (device, inode), whose monotonic clocks run on the simulated time too.
        self.simulated = simulated
        #: Each rewritten process's slot: pid -> (its ``/proc/PID/mem``, the slot's address).
        self.slots: dict[int, tuple[int, int]] = {}
        #: Processes whose monotonic clocks, and so timers, run on the simulated time.
        self.on_sim_time: set[int] = set()
        self.slots_lock = threading.Lock()
        #: Set by ``ClockShim.close``; the spawner's next clock call then ends the loop.
        self.stopping = False
        #: Why the vDSO of a program could not be hidden (it then sees the host clock), if so.
        self.failure: str | None = None
        #: Programs whose vDSO now answers the simulated time, and those whose vDSO was hidden instead.
        self.patched = self.hidden = 0
        libc = _libc()
        self._ioctl, self._writev = libc.ioctl, libc.process_vm_writev
        self._recv = ctypes.create_string_buffer(max(notif_size, _NOTIF.size))
        self._resp = ctypes.create_string_buffer(_RESP.size)
        self._id = ctypes.c_uint64()
        self._data = ctypes.create_string_buffer(_PAIR.size)
        self._local = _IoVec(ctypes.cast(self._data, ctypes.c_void_p), _PAIR.size)
        self._remote = _IoVec(None, _PAIR.size)
        # Hand the CPU straight between the program and this thread (Linux 6.6+): a clock call then
        # costs one context switch instead of two cross-CPU wake-ups. Older kernels refuse; no harm.
        self._ioctl(listener, _IOCTL_NOTIF_SET_FLAGS, ctypes.c_void_p(_USER_NOTIF_FD_SYNC_WAKE_UP))

    def run(self) -> None:
        recv, size, listener = self._recv, len(self._recv), self.listener
        try:
            while True:
                ctypes.memset(recv, 0, size)  # the kernel wants a zeroed buffer
                if self._ioctl(listener, _IOCTL_NOTIF_RECV, recv) < 0:  # blocks, without the GIL
                    if ctypes.get_errno() in (errno.ENOENT, errno.EINTR):
                        continue  # the caller died before we read its call
                    raise OSError(ctypes.get_errno(), "SECCOMP_IOCTL_NOTIF_RECV")
                notif = _Notif(recv)
                if notif.tid == self.spawner_tid:
                    # The Python thread that starts the program keeps real time; its call after
                    # ``stopping`` is set is the signal to end.
                    self.respond(notif.id, continue_=True)
                    if self.stopping:
                        return
                    continue
                self.handle(notif)
        except Exception:  # a bug here must not hang the program it serves: its calls now fail with ENOSYS
            log.exception("clock shim supervisor failed; closing its listener")
        finally:
            os.close(listener)

    def handle(self, notif: _Notif) -> None:
        nr, args = notif.nr, notif.args
        if nr == _NR_ARCH_PRCTL:
            self.program_start(notif)
            return
        sec, nsec = divmod(self.now_ns, 1_000_000_000)
        value = error = 0
        if nr == _NR_CLOCK_GETTIME:
            if not self.write(notif, args[1], sec, nsec):
                error = errno.EFAULT
        elif nr == _NR_GETTIMEOFDAY:
            # The second argument is the obsolete struct timezone (two ints): UTC, no DST.
            if (args[0] and not self.write(notif, args[0], sec, nsec // 1000)) or (args[1] and not self.write(notif, args[1], 0, None)):
                error = errno.EFAULT
        else:  # time(2): the result is the value, also stored through the pointer if one is given
            value = sec
            if args[0] and not self.write(notif, args[0], sec, None):
                value, error = 0, errno.EFAULT
        self.respond(notif.id, value=value, error=error)

    def program_start(self, notif: _Notif) -> None:
        """A program sets its thread pointer: for a Go program, before it has looked for a vDSO."""
        try:
            found = _vdso_entry(notif.tid) if self.valid(notif.id) else None
            if found is not None:
                entry, base = found
                exe = os.stat(f"/proc/{notif.tid}/exe")
                timed = (exe.st_dev, exe.st_ino) in self.simulated
                with self.slots_lock:
                    self.forget(notif.tid)  # an exec: its old image is gone
                    slot = _patch_vdso(notif.tid, base, self.now_ns, _REALTIME_CLOCKS + (_MONOTONIC_CLOCKS if timed else ()))
                    if slot is not None:
                        self.slots[notif.tid] = (os.open(f"/proc/{notif.tid}/mem", os.O_RDWR | os.O_CLOEXEC), slot)
                        if timed:
                            self.on_sim_time.add(notif.tid)
                if slot is not None:
                    self.patched += 1
                else:
                    _hide_vdso(notif.tid, entry)
                    self.hidden += 1
        except OSError as exc:
            self.fail(f"cannot write into the program's memory ({exc.strerror})")
        self.respond(notif.id, continue_=True)

    def forget(self, pid: int) -> None:
        """Drop ``pid``'s slot (call with ``slots_lock`` held)."""
        held = self.slots.pop(pid, None)
        self.on_sim_time.discard(pid)
        if held is not None:
            os.close(held[0])

    def set_time(self, now_ns: int) -> None:
        """Make every rewritten process read ``now_ns`` from now on (the fallback path's answers too)."""
        self.now_ns = now_ns
        word = struct.pack("<q", now_ns)
        with self.slots_lock:
            for pid, (fd, slot) in list(self.slots.items()):
                try:
                    os.pwrite(fd, word, slot)
                    os.pwrite(fd, word, slot + 8)
                except OSError:
                    self.forget(pid)  # it has exited

    def close_slots(self) -> None:
        with self.slots_lock:
            for pid in list(self.slots):
                self.forget(pid)

    def valid(self, notif_id: int) -> bool:
        """The caller is still waiting on this call (so its tid still names it)."""
        self._id.value = notif_id
        return bool(self._ioctl(self.listener, _IOCTL_NOTIF_ID_VALID, ctypes.byref(self._id)) == 0)

    def write(self, notif: _Notif, address: int, first: int, second: int | None) -> bool:
        """Store one or two 64-bit words at ``address`` in the caller, if it is still the caller."""
        if not self.valid(notif.id):
            return False
        size = 8 if second is None else 16
        _PAIR.pack_into(self._data, 0, first, second or 0)
        self._local.len = self._remote.len = size
        self._remote.base = address
        return bool(self._writev(notif.tid, ctypes.byref(self._local), 1, ctypes.byref(self._remote), 1, 0) == size)

    def respond(self, notif_id: int, *, value: int = 0, error: int = 0, continue_: bool = False) -> None:
        _RESP.pack_into(self._resp, 0, notif_id, value, -error, _SECCOMP_USER_NOTIF_FLAG_CONTINUE if continue_ else 0)
        self._ioctl(self.listener, _IOCTL_NOTIF_SEND, self._resp)  # ENOENT: the caller died meanwhile

    def fail(self, reason: str) -> None:
        global _runtime_failure
        if self.failure is None:
            self.failure = reason
        if _runtime_failure is None:
            _runtime_failure = reason
            log.warning("clock shim: %s; kubectl now sees the host clock", reason)


#: The first refusal met while running a program (a security module forbidding the memory write,
#: say): the shim is then off for the rest of the process rather than failing on every call.
_runtime_failure: str | None = None


class ClockShim:
    """Start one program whose wall clock reads ``now`` (Unix seconds) when it starts, and follows
    ``set_time`` after.

    ``popen`` takes ``subprocess.Popen``'s arguments and returns its ``Popen``; wait for the program
    as usual, then call ``close``. Where the shim cannot work (``clock_shim_available()`` is False)
    ``popen`` is plain ``subprocess.Popen``. The processes of the ``simulated`` executables run their
    monotonic clocks, and so their timers and timeouts, on the simulated time as well: between two
    ``set_time`` calls no time passes for them (``backends/programs.py`` lets the twin's time pass
    while they wait on a timer, and ``kick`` wakes them to look at it).
    """

    def __init__(self, now: float, simulated: Sequence[Path] = ()) -> None:
        self.now = now
        self.active = clock_shim_available()
        self._simulated = frozenset((st.st_dev, st.st_ino) for st in (_stat(p) for p in simulated) if st is not None)
        #: Why the program saw the host clock after all, if it did (set by ``close``).
        self.failure: str | None = None
        #: How many programs had their vDSO rewritten, or hidden where it could not be (set by ``close``;
        #: bwrap's own counts too).
        self.patched = self.hidden = 0
        self._supervisor: _Supervisor | None = None
        self._release = threading.Event()
        self._spawner: threading.Thread | None = None

    @property
    def simulates(self) -> bool:
        """Whether some executables this shim starts run their timers on the simulated time."""
        return self.active and bool(self._simulated)

    def on_sim_time(self) -> frozenset[int]:
        """The running processes whose monotonic clocks follow ``set_time``."""
        supervisor = self._supervisor
        if supervisor is None:
            return frozenset()
        with supervisor.slots_lock:
            return frozenset(supervisor.on_sim_time)

    def host_timed(self) -> bool:
        """Whether a process of the program fell back to the host's clock (its vDSO hidden, or no
        shim): its timers then run on the host's time."""
        supervisor = self._supervisor
        return not self.active or supervisor is None or supervisor.hidden > 0 or supervisor.failure is not None

    def set_time(self, now: float) -> None:
        """Show the running processes ``now`` from now on."""
        self.now = now
        if self._supervisor is not None:
            self._supervisor.set_time(_sim_ns(now))

    def kick(self) -> None:
        """Wake the threads of the processes on simulated time that wait in epoll, so that a runtime
        that computed its wait from an earlier time looks at its timers again (a Go runtime takes the
        ``SIGURG`` it is sent as a spurious preemption request and re-reads its clock)."""
        for pid in self.on_sim_time():
            for tid in _epoll_waiters(pid):
                _libc().syscall(ctypes.c_long(_NR_TGKILL), ctypes.c_long(pid), ctypes.c_long(tid), ctypes.c_long(signal.SIGURG))

    def popen(self, args: Sequence[str], **kwargs: Any) -> subprocess.Popen[bytes]:
        if not self.active:
            return subprocess.Popen(args, **kwargs)
        outcome: dict[str, Any] = {}
        filtered, go, started = threading.Event(), threading.Event(), threading.Event()

        def spawn() -> None:
            # This thread carries the filter for good, and any thread it started would inherit it,
            # so it does nothing but start the program and then outlive it: a child's parent-death
            # signal (bwrap's --die-with-parent) fires when the thread that forked it ends.
            try:
                outcome["listener"] = _install_filter()
            except OSError as exc:
                outcome["error"] = exc
                filtered.set()
                return
            filtered.set()
            go.wait()
            try:
                outcome["proc"] = subprocess.Popen(args, **kwargs)
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc
            started.set()
            self._release.wait()
            # A real-time clock call reaches the supervisor, whose blocking read has no other way out.
            timespec = (ctypes.c_int64 * 2)()
            _libc().syscall(ctypes.c_long(_NR_CLOCK_GETTIME), ctypes.c_long(0), ctypes.byref(timespec))

        self._spawner = threading.Thread(target=spawn, name="itbench-clockshim-spawner", daemon=True)
        self._spawner.start()
        filtered.wait()
        if "error" in outcome:
            self._spawner.join()
            raise outcome["error"]
        assert self._spawner.native_id is not None
        self._supervisor = _Supervisor(outcome["listener"], self.now, _notif_size(), self._spawner.native_id,
                                       self._simulated)
        self._supervisor.start()  # from this thread, so that it does not carry the filter
        go.set()
        started.wait()
        if "error" in outcome:
            self.close()
            raise outcome["error"]
        proc: subprocess.Popen[bytes] = outcome["proc"]
        return proc

    def close(self) -> None:
        """After the program has exited: stop the supervisor and let the spawner thread end."""
        supervisor, spawner = self._supervisor, self._spawner
        self._supervisor = self._spawner = None
        if supervisor is not None:
            supervisor.stopping = True
        self._release.set()
        if spawner is not None:
            spawner.join()
        if supervisor is not None:
            supervisor.join()
            supervisor.close_slots()
            self.failure, self.patched, self.hidden = supervisor.failure, supervisor.patched, supervisor.hidden


def _sim_ns(now: float) -> int:
    """The nanoseconds a program is shown for the twin's ``now``, to the microsecond: the twin's clock
    is a float whose last bits depend on the steps that led to it, a program's timers are exact."""
    return round(now * 1e6) * 1000


def _stat(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _epoll_waiters(pid: int) -> list[int]:
    """The threads of ``pid`` blocked in ``epoll_wait``/``epoll_pwait`` now."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/syscall", "rb") as f:
                call = f.read().split(maxsplit=1)[:1]
        except OSError:
            continue
        if call and call[0] in _EPOLL_CALLS:
            found.append(int(tid))
    return found


@functools.cache
def _notif_size() -> int:
    """The kernel's ``sizeof(struct seccomp_notif)`` (a buffer for RECV must be at least that big)."""
    sizes = _NotifSizes()
    _check(_libc().syscall(ctypes.c_long(_NR_SECCOMP), ctypes.c_long(_SECCOMP_GET_NOTIF_SIZES), ctypes.c_long(0),
                           ctypes.byref(sizes)), "seccomp(SECCOMP_GET_NOTIF_SIZES)")
    return int(sizes.notif)


@functools.cache
def _static_reason() -> str | None:
    """Why this machine cannot run the shim at all (checked once), or None."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"the clock shim supports Linux on x86-64 only, not {sys.platform}/{platform.machine()}"
    try:
        _notif_size()
    except OSError as exc:
        return f"seccomp user notification is unavailable (Linux 5.0+ needed): {exc.strerror}"
    result: dict[str, str | None] = {}

    def attempt() -> None:  # on a throwaway thread: a filter can never be removed from its thread
        try:
            os.close(_install_filter())
            result["reason"] = None
        except OSError as exc:
            result["reason"] = f"cannot install a seccomp filter: {exc.strerror}"

    thread = threading.Thread(target=attempt, name="itbench-clockshim-check", daemon=True)
    thread.start()
    thread.join()
    return result.get("reason", "the seccomp check did not finish")


def clock_shim_unavailable_reason() -> str | None:
    """Why programs run with the host clock here, or None when ``ClockShim`` works."""
    return _static_reason() or _runtime_failure


def clock_shim_available() -> bool:
    """Whether ``ClockShim`` shows programs the simulated clock here (otherwise they see the host clock)."""
    return clock_shim_unavailable_reason() is None
