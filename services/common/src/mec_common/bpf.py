"""The few bpf(2) commands the services need, through ctypes: pinned maps, test runs, links.

Loading an object is the job of libbpf (the PEP's C loader ``pep/bpf/loader.c``, or
``bpftool prog loadall`` for the L4S programs); everything afterwards — map reads and
writes on every RNIS message, attaching a tc program, unregistering — is a handful of
syscalls that need no library. One map update costs a few microseconds (``make bench-meld``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
_libc.syscall.restype = ctypes.c_long

SYS_BPF = 321  # x86_64
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_OBJ_GET = 7
BPF_PROG_TEST_RUN = 10
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_LINK_CREATE = 28

BPF_TCX_INGRESS = 46
BPF_TCX_EGRESS = 47

BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2

if os.uname().machine != "x86_64":  # pragma: no cover - the syscall number is per arch
    SYS_BPF = {"aarch64": 280, "riscv64": 280}.get(os.uname().machine, SYS_BPF)


class _MapElemAttr(ctypes.Structure):
    _fields_ = (
        ("map_fd", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),  # next_key for GET_NEXT_KEY
        ("flags", ctypes.c_uint64),
    )


class _ObjGetAttr(ctypes.Structure):
    _fields_ = (
        ("pathname", ctypes.c_uint64),
        ("bpf_fd", ctypes.c_uint32),
        ("file_flags", ctypes.c_uint32),
    )


class _TestRunAttr(ctypes.Structure):
    _fields_ = (
        ("prog_fd", ctypes.c_uint32),
        ("retval", ctypes.c_uint32),
        ("data_size_in", ctypes.c_uint32),
        ("data_size_out", ctypes.c_uint32),
        ("data_in", ctypes.c_uint64),
        ("data_out", ctypes.c_uint64),
        ("repeat", ctypes.c_uint32),
        ("duration", ctypes.c_uint32),
        ("ctx_size_in", ctypes.c_uint32),
        ("ctx_size_out", ctypes.c_uint32),
        ("ctx_in", ctypes.c_uint64),
        ("ctx_out", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
        ("cpu", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
    )


class _LinkCreateAttr(ctypes.Structure):
    _fields_ = (
        ("prog_fd", ctypes.c_uint32),
        ("target_ifindex", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("relative_fd", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("expected_revision", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 4),
    )


class _InfoAttr(ctypes.Structure):
    _fields_ = (
        ("bpf_fd", ctypes.c_uint32),
        ("info_len", ctypes.c_uint32),
        ("info", ctypes.c_uint64),
    )


class _MapInfo(ctypes.Structure):
    _fields_ = (
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * 16),
    )


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    ret = int(_libc.syscall(SYS_BPF, cmd, ctypes.byref(attr), ctypes.sizeof(attr)))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf(cmd={cmd}): {os.strerror(err)}")
    return ret


def obj_get(path: str) -> int:
    """A new fd for the object pinned at ``path`` (map, program or link)."""
    raw = os.fsencode(path)
    buf = ctypes.create_string_buffer(raw)
    attr = _ObjGetAttr(pathname=ctypes.addressof(buf))
    try:
        return _bpf(BPF_OBJ_GET, attr)
    except OSError as exc:
        raise OSError(exc.errno, f"{path}: {os.strerror(exc.errno or 0)}") from None


def tcx_attach(prog_fd: int, ifindex: int, attach_type: int) -> int:
    """Attach a tc program to interface ``ifindex`` of the calling thread's namespace (tcx).

    Returns the link's fd: the program stays attached while it (or a pin of it) is open,
    so a process that dies takes its programs along. ``attach_type`` is
    ``BPF_TCX_INGRESS`` or ``BPF_TCX_EGRESS``; other tcx programs on the interface stay.
    """
    attr = _LinkCreateAttr(prog_fd=prog_fd, target_ifindex=ifindex, attach_type=attach_type)
    return _bpf(BPF_LINK_CREATE, attr)


def possible_cpus() -> int:
    """The number of values a per-CPU map holds per key (the kernel's possible CPUs)."""
    spans = Path("/sys/devices/system/cpu/possible").read_text().strip().split(",")
    last = max(int(span.split("-")[-1]) for span in spans)
    return last + 1


S = TypeVar("S", bound="ctypes._CData")


class BpfMap:
    """A pinned map, opened once; keys and values are ctypes objects of fixed size."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = obj_get(path)
        info = _MapInfo()
        attr = _InfoAttr(bpf_fd=self.fd, info_len=ctypes.sizeof(info), info=ctypes.addressof(info))
        _bpf(BPF_OBJ_GET_INFO_BY_FD, attr)
        self.key_size, self.value_size = info.key_size, info.value_size
        self.name = info.name.decode()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _elem(self, cmd: int, key: ctypes._CData, value: ctypes._CData | None, flags: int) -> int:
        attr = _MapElemAttr(
            map_fd=self.fd,
            key=ctypes.addressof(key),
            value=ctypes.addressof(value) if value is not None else 0,
            flags=flags,
        )
        return _bpf(cmd, attr)

    def update(self, key: ctypes._CData, value: ctypes._CData, flags: int = BPF_ANY) -> None:
        self._elem(BPF_MAP_UPDATE_ELEM, key, value, flags)

    def lookup(self, key: ctypes._CData, value_type: type[S]) -> S | None:
        value = value_type()
        try:
            self._elem(BPF_MAP_LOOKUP_ELEM, key, value, 0)
        except FileNotFoundError:
            return None
        return value

    def lookup_percpu_sum(self, key: ctypes._CData) -> int:
        """The sum over CPUs of a per-CPU map's u64 value (0 if the key is absent)."""
        values = (ctypes.c_uint64 * possible_cpus())()
        try:
            self._elem(BPF_MAP_LOOKUP_ELEM, key, values, 0)
        except FileNotFoundError:
            return 0
        return sum(values)

    def delete(self, key: ctypes._CData) -> bool:
        try:
            self._elem(BPF_MAP_DELETE_ELEM, key, None, 0)
        except FileNotFoundError:
            return False
        return True

    def __iter__(self) -> Iterator[ctypes.c_uint32]:
        """Every key of a map with u32 keys (it may change meanwhile: fine for reporting)."""
        key = ctypes.c_uint32()
        nxt = ctypes.c_uint32()
        attr = _MapElemAttr(map_fd=self.fd, key=0, value=ctypes.addressof(nxt))
        while True:
            try:
                _bpf(BPF_MAP_GET_NEXT_KEY, attr)
            except FileNotFoundError:
                return
            yield ctypes.c_uint32(nxt.value)
            ctypes.memmove(ctypes.addressof(key), ctypes.addressof(nxt), ctypes.sizeof(key))
            attr.key = ctypes.addressof(key)


class BpfProgram:
    """A pinned program that can be run with BPF_PROG_TEST_RUN (a ``syscall`` program)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = obj_get(path)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def run(self, ctx: ctypes.Structure) -> int:
        """Run once with ``ctx`` as its context; the program may write back into it."""
        attr = _TestRunAttr(
            prog_fd=self.fd, ctx_size_in=ctypes.sizeof(ctx), ctx_in=ctypes.addressof(ctx)
        )
        _bpf(BPF_PROG_TEST_RUN, attr)
        return int(attr.retval)
