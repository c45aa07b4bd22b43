"""The few bpf(2) commands the services need, through ctypes: pinned maps, test runs, links,
and the lifecycle of a struct_ops registration.

Loading an object is the job of libbpf (the suite's C loader ``pep/bpf/loader.c``, which
registers MELD/RAPID on the MEC host and SIGMA on the UE, or ``bpftool prog loadall`` for
the L4S programs); everything afterwards — map reads and writes on every RNIS message,
attaching a tc program, unregistering — is a handful of
syscalls that need no library. One map update costs a few microseconds (``make bench-meld``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import mmap
import os
import socket
import struct
import subprocess
import time
from collections.abc import Iterable, Iterator
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

BPF_CGROUP_SOCK_OPS = 3
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
    return link_create(prog_fd, ifindex, attach_type)


def link_create(prog_fd: int, target: int, attach_type: int) -> int:
    """BPF_LINK_CREATE: attach a program to ``target`` (an ifindex for tcx, a cgroup
    directory's fd for cgroup programs); returns the link's fd (attached while it is open)."""
    attr = _LinkCreateAttr(prog_fd=prog_fd, target_ifindex=target, attach_type=attach_type)
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
        self.max_entries = info.max_entries
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
        return self.keys(ctypes.c_uint32)

    def keys(self, key_type: type[S]) -> Iterator[S]:
        """Every key, as ``key_type`` (the map may change meanwhile: fine for reporting)."""
        key = key_type()
        nxt = key_type()
        attr = _MapElemAttr(map_fd=self.fd, key=0, value=ctypes.addressof(nxt))
        while True:
            try:
                _bpf(BPF_MAP_GET_NEXT_KEY, attr)
            except FileNotFoundError:
                return
            found = key_type()
            ctypes.memmove(ctypes.addressof(found), ctypes.addressof(nxt), ctypes.sizeof(nxt))
            yield found
            ctypes.memmove(ctypes.addressof(key), ctypes.addressof(nxt), ctypes.sizeof(key))
            attr.key = ctypes.addressof(key)


class RingBuffer:
    """The consumer side of a BPF ring buffer map (``BPF_MAP_TYPE_RINGBUF``), by mmap.

    The kernel maps a consumer page (ours to write), a producer page and the data area
    twice in a row, so a record that wraps around the end reads as one piece.
    """

    _BUSY = 1 << 31
    _DISCARD = 1 << 30
    _HEADER = 8

    def __init__(self, ring: BpfMap) -> None:
        self.size = ring.max_entries
        page = mmap.PAGESIZE
        self._page = page
        self._cons = mmap.mmap(ring.fd, page, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._prod = mmap.mmap(
            ring.fd, page + 2 * self.size, mmap.MAP_SHARED, mmap.PROT_READ, offset=page
        )

    def drain(self) -> Iterator[bytes]:
        """Every record committed so far, oldest first; each one is consumed once."""
        cons = struct.unpack_from("<Q", self._cons, 0)[0]
        prod = struct.unpack_from("<Q", self._prod, 0)[0]
        while cons < prod:
            off = self._page + (cons & (self.size - 1))
            head = struct.unpack_from("<I", self._prod, off)[0]
            if head & self._BUSY:
                break  # reserved, not committed yet
            length = head & ~(self._BUSY | self._DISCARD)
            if not head & self._DISCARD:
                start = off + self._HEADER
                yield bytes(self._prod[start : start + length])
            cons += (length + self._HEADER + 7) & ~7
            struct.pack_into("<Q", self._cons, 0, cons)

    def close(self) -> None:
        self._cons.close()
        self._prod.close()


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

    def run_packet(self, packet: bytes) -> int:
        """Run a tc program once on ``packet`` (an Ethernet frame); returns its verdict."""
        return self.time_packet(packet, 1)[0]

    def time_packet(self, packet: bytes, repeat: int) -> tuple[int, int]:
        """Run a tc program ``repeat`` times on ``packet`` in the kernel; returns its verdict
        and the kernel's mean time per run (ns)."""
        buf = ctypes.create_string_buffer(packet, len(packet))
        attr = _TestRunAttr(
            prog_fd=self.fd, data_size_in=len(packet), data_in=ctypes.addressof(buf), repeat=repeat
        )
        _bpf(BPF_PROG_TEST_RUN, attr)
        return ctypes.c_int32(attr.retval).value, int(attr.duration)


def ipv4_key(ip: str) -> ctypes.c_uint32:
    """A map key naming a host by IPv4 address: network byte order, as the kernel keeps it."""
    return ctypes.c_uint32(int.from_bytes(socket.inet_aton(ip), "little"))


# --- a struct_ops registration: pins, links, the kernel's list -------------------------------


class StructOpsUnavailableError(Exception):
    """A congestion control cannot be registered (or unregistered) here; the message says why."""


def remove_pins(pin_dir: Path) -> None:
    """Unpin everything of an instance; unpinning a link unregisters its congestion control."""
    if not pin_dir.exists():
        return
    for entry in pin_dir.iterdir():
        if entry.is_dir():
            entry.rmdir()
        else:
            entry.unlink()
    pin_dir.rmdir()


def wait_unregistered(names: Iterable[str], timeout: float = 5.0) -> None:
    """The kernel frees an unpinned link asynchronously (after an RCU grace period)."""
    names = tuple(names)
    deadline = time.monotonic() + timeout
    while set(names) & set(available_congestion_controls()):
        if time.monotonic() > deadline:
            raise StructOpsUnavailableError(
                f"{', '.join(names)} still registered after {timeout} s"
            )
        time.sleep(0.01)


def available_congestion_controls() -> list[str]:
    text = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text()
    return text.split()


def register_struct_ops(
    loader: Path, obj: Path, pin_dir: Path, names: dict[str, str]
) -> dict[str, str]:
    """Register an object's struct_ops congestion controls (struct variable -> name) with
    the suite's loader, their links and maps pinned in pin_dir (whatever a crashed
    predecessor left there is removed first). Returns what the loader registered."""
    for path, what in ((loader, "loader"), (obj, "BPF object")):
        if not path.is_file():
            raise StructOpsUnavailableError(f"{what} {path} not found (run `make build`)")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        raise StructOpsUnavailableError("the kernel has no BTF (/sys/kernel/btf/vmlinux)")
    remove_pins(pin_dir)
    wait_unregistered(names.values())
    args = [str(loader), str(obj), str(pin_dir)]
    args += [f"{var}={name}" for var, name in names.items()]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        remove_pins(pin_dir)
        raise StructOpsUnavailableError(loader_error(result.stderr))
    ops: dict[str, str] = json.loads(result.stdout)["ops"]
    return ops


def unregister_struct_ops(pin_dir: Path, names: Iterable[str]) -> None:
    """Unpin an instance (its links: the kernel unregisters the congestion controls)."""
    remove_pins(pin_dir)
    wait_unregistered(names)


def layout_mismatches(obj: Path, layouts: dict[str, type[ctypes.Structure]]) -> list[str]:
    """Structs whose ctypes mirror differs from the object's BTF (size, member offsets)."""
    dump = subprocess.run(
        ["bpftool", "-j", "btf", "dump", "file", str(obj)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    structs = {t["name"]: t for t in json.loads(dump.stdout)["types"] if t["kind"] == "STRUCT"}
    wrong = []
    for name, layout in layouts.items():
        btf = structs.get(name)
        members = [(m["name"], m["bits_offset"] // 8) for m in btf["members"]] if btf else []
        mirror = [(f, getattr(layout, f).offset) for f, *_ in layout._fields_]
        if not btf or btf["size"] != ctypes.sizeof(layout) or members != mirror:
            wrong.append(name)
    return wrong


def loader_error(stderr: str) -> str:
    """The reason in the struct_ops loader's stderr (its last ``meld-loader:`` line)."""
    lines = [line for line in stderr.strip().splitlines() if line.startswith("meld-loader:")]
    reason = lines[-1].removeprefix("meld-loader: ") if lines else stderr.strip()[-500:]
    if "Operation not permitted" in stderr:
        reason += " (needs root: CAP_BPF and CAP_NET_ADMIN)"
    return reason or "the loader failed without a message"
