"""The compiled relay core (the default relay where it can run: ``PEP_RELAY_CORE=auto``, or
required with ``uring``): its control plane in Python.

The core (``pep/core/pep_core.c``, built as ``build/lib/libmec_pep_core.so``) relays the
flows of every mode (transparent, SOCKS5, TLV) in C threads, one io_uring each, and calls no
Python. The explicit modes' handshakes are parsed in C (``pep_handshake.c``) as
``relay/handshake.py`` parses them; ``pep/tests/test_handshake.py`` holds the two to the same
answers. This module opens its listeners (also at run time: ``listen``), hands it the
settings and the access policy, and reads what it writes:
the flow records (shown as ``Flow`` objects of ``mec_pep.flows``, whose ``flow_record``
shapes them for the API as for the Python relay) and the counters. ``CoreDataPlane``
answers what ``DataPlane`` answers for the API.

Extensions (MELD/RAPID) get their hooks from the core's event queue, read here by a thread
the core wakes when events arrive (after the fact, but at once: ``pep_core_wait_events``);
``for_flows`` lends them copies of the sockets.

The backlog feed reads it through ``held_toward_ue``, as it reads the Python relay's. With
``PEP_RAN_MPTCP`` its RAN-side listeners are MPTCP sockets, opened here as for the Python
relay, with a listener per intercepted port for the UEs' MP_JOINs.

What the core does not carry (``core_refusals``), ``PEP_RELAY_CORE=uring`` refuses at start
and ``auto`` leaves to the Python relay (``choose_relay``); so does ``auto`` where this
process may not use io_uring (``kernel_refusals``). Where it may not use ``pidfd_getfd``, the
core's relay threads keep the process's descriptor table (``shared_table_reason``).
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from mec_common.logging import get_logger
from mec_pep.config import PepSettings
from mec_pep.flows import (
    Flow,
    FlowEndedError,
    FlowTable,
    Hooks,
    Leg,
    ProxyMode,
    flow_record,
    leg_record,
)
from mec_pep.policy import AccessPolicy
from mec_pep.relay.descriptors import SHARED_TABLE, raise_fd_limit
from mec_pep.relay.flow_view import held, toward_ue
from mec_pep.relay.legs import listen_socket
from mec_pep.relay.listeners import NO_IPV6
from mec_pep.relay.loop import RelayCounters, relay_cpus
from mec_pep.sockets import select_listener_by_cpu, set_buffers, tcp_info

log = get_logger(__name__)
T = TypeVar("T")

# ---- pep_core.h, mirrored (change both together) -----------------------------------------

MAX_THREADS, LISTENERS, MAX_RANGES, CC_NAME = 64, 22, 256, 16
MODES = (ProxyMode.TRANSPARENT, ProxyMode.SOCKS5, ProxyMode.TLV)  # enum pep_mode
# Listener slots per relay thread: each mode's IPv4 and IPv6 listener, then the join listeners.
SLOTS = {mode: (2 * i, 2 * i + 1) for i, mode in enumerate(MODES)}
JOIN_PORTS = LISTENERS - 2 * len(MODES)  # MPTCP join listeners a relay thread takes
# enum pep_reason, in order: the Python relay's texts for the same events
REASONS = (
    "client not allowed",
    "flow limit",
    "per-client flow limit",
    "destination not allowed",
    "WAN socket setup failed",
    "connect failed",
    "reset by peer",
    "idle timeout",
    "half-open timeout",
    "shutdown",
    "reset by API",
    "bad handshake",
    "handshake timeout",
    "client closed during handshake",
    "client reset during handshake",
)
# enum pep_stage, as the API names them (relay/conn.py's Stage)
STAGES = {1: "connecting", 2: "relaying", 3: "closed", 4: "socks_greeting", 5: "socks_request",
          6: "tlv_header"}  # fmt: skip
RELAYING = 2
# One relay buffer (bytes) and buffers per relay thread: a direction holds one only while
# bytes are in it, so 64 busy flows use 128 of them and idle flows none.
BUFFER_BYTES = 128 * 1024
BUFFERS = 256
# With PEP_RELAY_METHOD=splice, a flow's directions move to splice(2) through a pipe once
# the flow has relayed this much: bulk bytes stay in the kernel, while short flows (most
# connections) keep the buffer path, which needs no pipe and no extra system calls.
SPLICE_AFTER = 64 * 1024


class _Config(ctypes.Structure):
    _fields_ = [
        ("threads", ctypes.c_uint32),
        ("listeners", (ctypes.c_int32 * LISTENERS) * MAX_THREADS),
        ("modes", ctypes.c_uint8 * LISTENERS),
        ("cpus", ctypes.c_int32 * MAX_THREADS),
        ("max_flows", ctypes.c_uint32),
        ("max_flows_per_client", ctypes.c_uint32),
        ("connect_timeout_ms", ctypes.c_uint64),
        ("idle_timeout_ms", ctypes.c_uint64),
        ("half_open_timeout_ms", ctypes.c_uint64),
        ("wan_rcvbuf", ctypes.c_int32),
        ("wan_sndbuf", ctypes.c_int32),
        ("force_buffers", ctypes.c_uint8),
        ("keep_ue_source", ctypes.c_uint8),
        ("ran_cc", ctypes.c_char * CC_NAME),
        ("wan_cc", ctypes.c_char * CC_NAME),
        ("buffer_bytes", ctypes.c_uint32),
        ("buffers", ctypes.c_uint32),
        ("events", ctypes.c_uint8),
        ("ran_nodelay", ctypes.c_uint8),
        ("shared_table", ctypes.c_uint8),
        ("pipe_bytes", ctypes.c_uint32),
        ("splice_after", ctypes.c_uint32),
        ("tlv_max_buffer", ctypes.c_uint32),
    ]


class _Range(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_uint8),
        ("network", ctypes.c_uint8 * 16),
        ("mask", ctypes.c_uint8 * 16),
    ]


class _Policy(ctypes.Structure):
    _fields_ = [
        ("clients", ctypes.c_uint32),
        ("destinations", ctypes.c_uint32),
        ("loopback", ctypes.c_uint32),
        ("range", _Range * MAX_RANGES),
    ]


class _Record(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("slot", ctypes.c_uint32),
        ("thread", ctypes.c_uint32),
        ("family", ctypes.c_uint8),
        ("stage", ctypes.c_uint8),
        ("ue_eof", ctypes.c_uint8),
        ("server_eof", ctypes.c_uint8),
        ("mode", ctypes.c_uint8),
        ("destination_family", ctypes.c_uint8),
        ("ue_port", ctypes.c_uint16),
        ("destination_port", ctypes.c_uint16),
        ("wan_port", ctypes.c_uint16),
        ("ran_port", ctypes.c_uint16),
        ("ue", ctypes.c_uint8 * 16),
        ("destination", ctypes.c_uint8 * 16),
        ("wan_local", ctypes.c_uint8 * 16),
        ("ran_local", ctypes.c_uint8 * 16),
        ("created_ns", ctypes.c_int64),
        ("established_ns", ctypes.c_int64),
        ("last_active_ns", ctypes.c_int64),
        ("bytes_to_ue", ctypes.c_uint64),
        ("bytes_from_ue", ctypes.c_uint64),
        ("ran_fd", ctypes.c_int32),
        ("wan_fd", ctypes.c_int32),
        ("buffered_to_ue", ctypes.c_uint32),
        ("buffered_to_server", ctypes.c_uint32),
    ]


class _Counters(ctypes.Structure):
    _fields_ = [
        ("accepted", ctypes.c_uint64),
        ("established", ctypes.c_uint64),
        ("closed", ctypes.c_uint64),
        ("events_lost", ctypes.c_uint64),
        ("reader_wakes", ctypes.c_uint64),
        ("bytes_to_ue", ctypes.c_uint64),
        ("bytes_from_ue", ctypes.c_uint64),
        ("spliced", ctypes.c_uint64),
        ("pipes_in_use", ctypes.c_uint64),
        ("ues_uncounted", ctypes.c_uint64),
        ("refused", ctypes.c_uint64 * len(REASONS)),
        ("aborted", ctypes.c_uint64 * len(REASONS)),
    ]


class _Event(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint64), ("slot", ctypes.c_uint32), ("kind", ctypes.c_uint32)]


class _UeTotal(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_uint8),
        ("address", ctypes.c_uint8 * 16),
        ("received", ctypes.c_uint64),
    ]


class CoreHandshake(ctypes.Structure):
    """struct pep_handshake: pep_core_handshake's state and answer (the tests compare it
    with ``relay/handshake.py``'s)."""

    _fields_ = [
        ("stage", ctypes.c_uint8),
        ("reset", ctypes.c_uint8),
        ("answer_len", ctypes.c_uint8),
        ("family", ctypes.c_uint8),
        ("taken", ctypes.c_uint16),
        ("port", ctypes.c_uint16),
        ("buffer_size", ctypes.c_uint32),
        ("address", ctypes.c_uint8 * 16),
        ("answer", ctypes.c_uint8 * 12),
    ]


PARSE_MORE, PARSE_DONE, PARSE_REFUSED = 0, 1, 2  # enum pep_parsed
ESTABLISHED, CLOSED = 1, 2  # enum pep_event_kind


def library_path() -> Path:
    """``PEP_CORE_LIBRARY``, else the source tree's ``build/`` (``make build``)."""
    given = os.environ.get("PEP_CORE_LIBRARY")
    if given:
        return Path(given)
    build = os.environ.get("MTS_BUILD_DIR", Path(__file__).resolve().parents[3] / "build")
    return Path(build) / "lib" / "libmec_pep_core.so"


def load() -> ctypes.CDLL:
    path = library_path()
    if not path.exists():
        raise OSError(f"the relay core's library {path} is missing (make build)")
    lib = ctypes.CDLL(str(path))
    mirrors = (_Config, _Range, _Policy, _Record, _Counters, _Event, _UeTotal, CoreHandshake)
    sizes = (ctypes.c_uint32 * len(mirrors)).in_dll(lib, "pep_core_abi")
    if list(sizes) != [ctypes.sizeof(m) for m in mirrors]:
        raise OSError(f"{path} does not match mec_pep.core's structures (rebuild: make build)")
    lib.pep_core_start.argtypes = [ctypes.POINTER(_Config), ctypes.POINTER(_Policy)]
    lib.pep_core_error.restype = ctypes.c_char_p
    lib.pep_core_set_policy.argtypes = [ctypes.POINTER(_Policy)]
    lib.pep_core_set_limits.argtypes = [ctypes.POINTER(_Config)]
    lib.pep_core_counters.argtypes = [ctypes.c_uint32]
    lib.pep_core_counters.restype = ctypes.POINTER(_Counters)
    lib.pep_core_live.restype = ctypes.c_uint32
    lib.pep_core_snapshot.argtypes = [ctypes.POINTER(_Record), ctypes.c_uint32]
    lib.pep_core_snapshot.restype = ctypes.c_uint32
    lib.pep_core_hold.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int32 * 2]
    lib.pep_core_reset.argtypes = [ctypes.c_uint32, ctypes.c_uint64]
    lib.pep_core_events.argtypes = [ctypes.POINTER(_Event), ctypes.c_uint32]
    lib.pep_core_events.restype = ctypes.c_uint32
    lib.pep_core_wait_events.argtypes = [ctypes.POINTER(_Event), ctypes.c_uint32]
    lib.pep_core_wait_events.restype = ctypes.c_uint32  # a CDLL call: the GIL is released
    lib.pep_core_release_events.restype = None
    lib.pep_core_record.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.POINTER(_Record)]
    lib.pep_core_toward_ue.argtypes = [
        ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(_Record), ctypes.c_uint32
    ]  # fmt: skip
    lib.pep_core_toward_ue.restype = ctypes.c_uint32
    lib.pep_core_mark_toward_ue.argtypes = [ctypes.c_uint32, ctypes.c_uint64]
    lib.pep_core_ue_totals.argtypes = [ctypes.POINTER(_UeTotal), ctypes.c_uint32]
    lib.pep_core_ue_totals.restype = ctypes.c_uint32
    lib.pep_core_listen.argtypes = [ctypes.c_uint32, ctypes.POINTER(ctypes.c_int32)]
    lib.pep_core_handshake.argtypes = [
        ctypes.POINTER(CoreHandshake), ctypes.c_char_p, ctypes.c_uint32
    ]  # fmt: skip
    lib.pep_core_socks5_reply.argtypes = [
        ctypes.c_char_p, ctypes.c_uint8, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint16
    ]  # fmt: skip
    lib.pep_core_socks5_reply.restype = ctypes.c_uint32
    return lib


# ---- which relay runs: settings the core does not carry, system calls it needs -----------


class CoreSettingsError(ValueError):
    """Settings the compiled core does not carry: at start with ``PEP_RELAY_CORE=uring``, or a
    ``PATCH /config`` it cannot follow. Its own type, so that callers turn this refusal, and
    no other ``ValueError``, into a failed start or a 409."""


def core_refusals(settings: PepSettings) -> list[str]:
    """What in ``settings`` the core does not carry and the Python relay does, each named."""
    s = settings
    found = []
    if s.ran_mptcp and len(s.tproxy_ports) > JOIN_PORTS:
        found.append(f"PEP_RAN_MPTCP with more than {JOIN_PORTS} PEP_TPROXY_PORTS "
                     "(a join listener each)")  # fmt: skip
    policy = AccessPolicy(s.allowed_clients, s.allowed_destinations)
    if (networks := sum(len(group) for group in _access_lists(policy))) > MAX_RANGES:
        found.append(f"{networks} networks in the access lists (the core takes {MAX_RANGES})")
    if s.relay_method == "copy" and s.pipe_size != BUFFER_BYTES:
        found.append(f"PEP_RELAY_METHOD=copy with PEP_PIPE_SIZE={s.pipe_size} (the core "
                     f"copies through buffers of {BUFFER_BYTES} bytes)")  # fmt: skip
    return found


def check_core_settings(settings: PepSettings) -> None:
    """``PEP_RELAY_CORE=uring``: refuse, with every reason at once, settings that need the
    Python relay, then io_uring if this process may not use it."""
    if found := core_refusals(settings):
        raise CoreSettingsError("PEP_RELAY_CORE=uring does not carry " + "; ".join(found)
                         + ": use PEP_RELAY_CORE=python or auto")  # fmt: skip
    if found := kernel_refusals():
        raise OSError("PEP_RELAY_CORE=uring cannot run here: " + "; ".join(found))


# One number on every architecture (the system call table's shared part).
SYS_IO_URING_SETUP, SYS_PIDFD_OPEN, SYS_PIDFD_GETFD = 425, 434, 438
IO_URING_PARAMS = 120  # sizeof(struct io_uring_params)


def kernel_refusals() -> list[str]:
    """What the core cannot run without and this process may not use, named: io_uring, which
    a kernel can lack or forbid (``kernel.io_uring_disabled``) and a container's seccomp
    profile refuse (Docker's since 25.0). Probed as the core would meet it."""
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(IO_URING_PARAMS)  # zeroed: no flags
    if (ring := libc.syscall(SYS_IO_URING_SETUP, 1, params)) >= 0:
        os.close(ring)
        return []
    return [f"io_uring_setup refused ({os.strerror(ctypes.get_errno())}: "
            "kernel.io_uring_disabled or a seccomp profile)"]  # fmt: skip


@functools.cache
def shared_table_reason() -> str | None:
    """Why the core's relay threads keep the process's descriptor table, or None. In
    private tables, Python reaches a flow's sockets (the API, the backlog feed, the hooks)
    and the relay threads reach run-time listeners only by ``pidfd_getfd``, which a seccomp
    profile may refuse (Docker's default allows it only with CAP_SYS_PTRACE); in the shared
    table a dup of the number does. Probed once per process, so ``choose_relay`` says and
    the core is told (``_Config.shared_table``) the one answer (a filter is never lifted)."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = libc.syscall(SYS_PIDFD_OPEN, os.getpid(), 0)
    copy = libc.syscall(SYS_PIDFD_GETFD, pidfd, pidfd, 0) if pidfd >= 0 else -1
    err = ctypes.get_errno()
    for fd in (fd for fd in (pidfd, copy) if fd >= 0):
        os.close(fd)
    if copy >= 0:
        return None
    call = "pidfd_getfd" if pidfd >= 0 else "pidfd_open"
    return (f"{call} refused ({os.strerror(err)}: a seccomp profile; Docker's needs "
            "CAP_SYS_PTRACE)")  # fmt: skip


def choose_relay(settings: PepSettings) -> tuple[str, str]:
    """``PEP_RELAY_CORE`` resolved: the relay that runs ("uring" or "python") and why (logged
    at start, shown in ``/pep/v1/stats``). ``auto`` takes the core if it carries the
    settings, its library loads and io_uring is allowed, else the Python
    relay. An explicit choice is taken as given: ``uring`` then refuses at start what it
    cannot do."""
    if settings.relay_core != "auto":
        return settings.relay_core, f"PEP_RELAY_CORE={settings.relay_core}"
    why = core_refusals(settings)
    if not why:
        try:
            load()
        except OSError as exc:
            why.append(str(exc))
    if not why:
        why.extend(kernel_refusals())
    if why:
        return "python", "auto: the Python relay; not the compiled core: " + "; ".join(why)
    chosen = "auto: the compiled core (it carries these settings and io_uring is allowed)"
    if (shared := shared_table_reason()) is not None:
        chosen += f"; its relay threads share the process's descriptor table: {shared}"
    return "uring", chosen


def _access_lists(policy: AccessPolicy) -> tuple[list[Any], ...]:
    """The core's table's groups, in order: clients, destinations, allowed loopback."""
    return policy.clients.networks, policy.destinations.networks, policy.loopback_networks


def _policy(policy: AccessPolicy) -> _Policy:
    """The access lists as the core's table: clients, destinations, allowed loopback."""
    lists = _access_lists(policy)
    table = _Policy()
    networks = [n for group in lists for n in group]
    if len(networks) > MAX_RANGES:
        raise CoreSettingsError(f"the relay core takes at most {MAX_RANGES} networks in all")
    table.clients, table.destinations, table.loopback = (len(g) for g in lists)
    for entry, network in zip(table.range, networks, strict=False):
        entry.family = socket.AF_INET if network.version == 4 else socket.AF_INET6
        entry.network[: len(network.network_address.packed)] = network.network_address.packed
        entry.mask[: len(network.netmask.packed)] = network.netmask.packed
    return table


# ---- the flows the core holds ------------------------------------------------------------


def _ip(family: int, raw: Any) -> str:
    """The address text as the Python relay's sockets give it (``inet_ntop``; also a
    quarter of ``ipaddress``'s time, and the hooks' reader formats 3-4 per flow)."""
    return socket.inet_ntop(family, bytes(raw)[: 4 if family == socket.AF_INET else 16])


def _flow(rec: _Record, known: Flow | None = None) -> Flow:
    """A ``Flow`` from a record (or ``known`` brought up to date): its legs carry
    addresses and no sockets, except while the core lends them (``CoreDataPlane.lend``)."""
    ue = (_ip(rec.family, rec.ue), rec.ue_port)
    ran_local = (_ip(rec.family, rec.ran_local), rec.ran_port)
    flow = known or Flow(rec.id, MODES[rec.mode], Leg(None, ran_local, ue))
    family = rec.destination_family  # 0 while an explicit mode's handshake goes on
    destination = (_ip(family, rec.destination), rec.destination_port) if family else None
    flow.destination = destination
    flow.created_at = rec.created_ns / 1e9
    flow.established_at = rec.established_ns / 1e9 if rec.established_ns else None
    flow.bytes_to_ue, flow.bytes_from_ue = rec.bytes_to_ue, rec.bytes_from_ue
    if destination is None:
        return _relaying(flow, rec)
    unbound = ("::" if family == socket.AF_INET6 else "0.0.0.0", 0)
    local = (_ip(family, rec.wan_local), rec.wan_port) if rec.established_ns else unbound
    if flow.wan is None or flow.wan.local != local:
        flow.wan = Leg(None, local, destination)
    return _relaying(flow, rec)


def _relaying(flow: Flow, rec: _Record) -> Flow:
    flow._relay = rec  # the record it was read from: slot, id, stage, times
    return flow


class CoreFlowTable(FlowTable):
    """The flow table read from the core's records at each call (the core owns membership)."""

    def __init__(self, core: CoreDataPlane) -> None:
        super().__init__()
        self.core = core

    def _all(self) -> list[Flow]:
        return [self.core.flow_of(rec) for rec in self.core.records()]

    def __len__(self) -> int:
        return self.core.live()

    def __iter__(self) -> Iterator[Flow]:
        return iter(self._all())

    def get(self, flow_id: int) -> Flow | None:
        return next((f for f in self._all() if f.id == flow_id), None)

    def by_ue(self, ue: str) -> list[Flow]:
        return [f for f in self._all() if f.ue == ue]

    def ues(self) -> list[str]:
        return list(dict.fromkeys(f.ue for f in self._all()))

    def count_for(self, ue: str) -> int:
        return len(self.by_ue(ue))


class CoreDataPlane:
    """The core's relay threads; answers the API as ``DataPlane`` does."""

    def __init__(self, settings: PepSettings, threads: int = 2, hooks: Hooks | None = None) -> None:
        self.settings = settings
        self.hooks = hooks or Hooks()
        self._known: dict[int, Flow] = {}  # flows the hooks heard of (their ``ext``), by id
        self._lending = threading.Lock()  # one caller at a time borrows flows' sockets
        self._stop_events = threading.Event()
        self._events: threading.Thread | None = None
        self.thread_count = threads
        self.flows = CoreFlowTable(self)
        self.addresses: dict[ProxyMode, tuple[str, int]] = {}
        self.pipe_size = settings.pipe_size  # the splice path's pipes (F_SETPIPE_SZ)
        self._lib: ctypes.CDLL | None = None
        # per relay thread, per listener slot (SLOTS, then the joins): Python's copies
        self._listeners: list[list[socket.socket | None]] = [
            [None] * LISTENERS for _ in range(threads)
        ]
        self._policies: list[_Policy] = []  # the core may read each while it is current
        self._toward_ue_batch = (_Record * 256)()  # the backlog feed's, reused every sample
        self._totals_batch = (_UeTotal * 64)()
        self._capacity = settings.max_flows  # the core's flow table: its size at start
        self._uncounted = 0  # flows whose UE the core could not count (logged once each rise)

    # ---- life -------------------------------------------------------------------------

    def start(self) -> None:
        s = self.settings
        lib = load()
        raise_fd_limit()  # per relay thread's own table, as the Python relay's threads
        try:
            for mode, port in zip(MODES, (s.transparent_port, s.socks5_port, s.tlv_port),
                                  strict=True):  # fmt: skip
                if port is not None:
                    self.listen(mode, port)
        except BaseException:
            self._close_listeners()
            raise
        policy = _policy(AccessPolicy(s.allowed_clients, s.allowed_destinations))
        self._policies.append(policy)
        if lib.pep_core_start(ctypes.byref(self._config()), ctypes.byref(policy)):
            self._close_listeners()
            raise OSError(f"relay core: {lib.pep_core_error().decode()}")
        self._lib = lib
        if (shared := shared_table_reason()) is not None:
            log.warning("relay threads share the process's descriptor table (all flows count "
                        "against one RLIMIT_NOFILE)", reason=shared)  # fmt: skip
        elif not self.private_descriptor_tables:
            log.warning(SHARED_TABLE)
        if self.hooks.extensions:
            self._events = threading.Thread(target=self._hear_events, name="core-events")
            self._events.start()
        log.info("relay core started", threads=self.thread_count, library=str(library_path()))

    def stop(self) -> None:
        self._stop_events.set()
        if self._events is not None:
            assert self._lib is not None
            self._lib.pep_core_release_events()
            self._events.join()
            self._events = None
        if self._lib is not None:
            self._lib.pep_core_stop()
            self._lib = None
        self._close_listeners()

    def _open(self, mode: ProxyMode, port: int) -> list[list[socket.socket | None]]:
        """Per relay thread, as the Python relay's ``relay.listeners.Listeners.open`` opens
        them: IPv4, IPv6 if the namespace has it, and in transparent mode with MPTCP the
        join listeners (the slots after ``SLOTS``)."""
        s = self.settings
        explicit = mode is not ProxyMode.TRANSPARENT
        host = s.listen_host if explicit else "0.0.0.0"
        host6 = s.listen_host6 if explicit else None if s.listen_host6 is None else "::"
        opened: list[list[socket.socket | None]] = []
        try:
            for _ in range(self.thread_count):
                first = listen_socket(s, mode, host, port)
                group: list[socket.socket | None] = [first, None]  # IPv4, IPv6 (SLOTS)
                opened.append(group)
                port = first.getsockname()[1]  # port 0: every thread on the one picked
                if host6 is not None:
                    try:
                        group[1] = listen_socket(s, mode, host6, port, socket.AF_INET6)
                    except OSError as exc:
                        if exc.errno not in NO_IPV6:
                            raise
                        log.warning("no IPv6 listener", mode=str(mode), error=str(exc))
                if s.ran_mptcp and not explicit:  # Listeners._open_joins: why one per port
                    for p in s.tproxy_ports:
                        group.append(listen_socket(s, mode, "0.0.0.0", p))
                self._select_by_cpu(group)
        except BaseException:
            for sock in (sock for group in opened for sock in group):
                if sock is not None:
                    sock.close()
            raise
        return opened

    def _select_by_cpu(self, group: list[socket.socket | None]) -> None:
        cpus = relay_cpus(self.settings, self.thread_count)
        if cpus is None:
            return
        for sock in (sock for sock in group if sock is not None):
            try:
                select_listener_by_cpu(sock, cpus)
            except OSError as exc:  # an MPTCP listener: the kernel's hash spreads
                log.warning("no CPU selector on a listener", error=str(exc))

    def _slots(self, mode: ProxyMode) -> list[int]:
        """The listener slots of ``mode``: its IPv4 and IPv6 one, for transparent the joins."""
        joins = range(2 * len(MODES), LISTENERS) if mode is ProxyMode.TRANSPARENT else []
        return [*SLOTS[mode], *joins]

    def _close_listeners(self) -> None:
        for group in self._listeners:
            for i, sock in enumerate(group):
                if sock is not None:
                    sock.close()
                group[i] = None
        self.addresses.clear()

    def _config(self) -> _Config:
        s, c = self.settings, _Config()
        cpus = relay_cpus(s, self.thread_count)
        c.threads = self.thread_count
        for i in range(MAX_THREADS):
            c.cpus[i] = cpus[i] if cpus is not None and i < len(cpus) else -1
            group = self._listeners[i] if i < len(self._listeners) else [None] * LISTENERS
            for k, sock in enumerate(group):
                c.listeners[i][k] = sock.fileno() if sock is not None else -1
        for mode in MODES:
            for k in self._slots(mode):
                c.modes[k] = MODES.index(mode)
        c.max_flows, c.max_flows_per_client = s.max_flows, s.max_flows_per_client
        c.connect_timeout_ms = int(s.handshake_timeout * 1000)
        c.idle_timeout_ms = int(s.idle_timeout * 1000)
        c.half_open_timeout_ms = int(s.half_open_timeout * 1000)
        c.wan_rcvbuf, c.wan_sndbuf = s.wan_rcvbuf, s.wan_sndbuf
        c.force_buffers, c.keep_ue_source = s.force_buffers, s.keep_ue_source
        c.ran_cc = (self.hooks.ran_congestion_control(s.ran_congestion_control) or "").encode()
        c.wan_cc = (s.wan_congestion_control or "").encode()
        c.buffer_bytes, c.buffers = BUFFER_BYTES, BUFFERS
        c.pipe_bytes = s.pipe_size
        c.splice_after = SPLICE_AFTER if s.relay_method == "splice" else 0
        c.events = bool(self.hooks.extensions)
        c.ran_nodelay = s.ran_mptcp
        c.shared_table = shared_table_reason() is not None
        c.tlv_max_buffer = min(s.tlv_max_buffer, 0xFFFFFFFF)  # a request is a u32: no cap above
        return c

    # ---- the extensions' hooks, from the core's events -------------------------------------

    def _hear_events(self) -> None:
        """The hooks of the flows established and ended, as the core queues their events
        (it calls no Python): this thread sleeps in the core until there are some."""
        assert self._lib is not None
        batch = (_Event * 4096)()
        while not self._stop_events.is_set():
            n = self._lib.pep_core_wait_events(batch, len(batch))  # one call per wake
            for event in batch[:n]:
                self._heard(event)

    def _heard(self, event: _Event) -> None:
        if event.kind == CLOSED:
            flow = self._known.pop(event.id, None)
            if flow is not None:  # sockets already closed: the flow's counters are final
                self.hooks.flow_closed(flow)
            return
        rec = _Record()
        assert self._lib is not None
        if self._lib.pep_core_record(event.slot, event.id, ctypes.byref(rec)):
            return  # ended before its hooks could run: they never hear of it
        flow = self._known[rec.id] = _flow(rec)
        # Its sockets are copied only if a hook uses them: MELD's use none (the core set the
        # RAN leg's congestion control at accept), RAPID's those of a UE in RAPID mode.
        self.lend(flow, self._established, lazily=True)

    def _established(self, flow: Flow) -> None:
        """The hooks of a flow's start, in order, all after the fact."""
        self.hooks.ran_leg_ready(flow)
        self.hooks.wan_leg_ready(flow)
        self.hooks.flow_established(flow)

    def lend(self, flow: Flow, fn: Callable[[Flow], None], *, lazily: bool = False) -> None:
        """``fn(flow)`` with copies of its sockets in the legs; nothing if it has ended.
        ``lazily``: copied at ``fn``'s first use of either (``Leg.sock``), not at all if it
        uses none; a flow that has ended by then ends ``fn`` there (``FlowEndedError``)."""
        rec = flow._relay
        if self._lib is None or not isinstance(rec, _Record):
            return
        legs = (flow.ran, flow.wan)
        with self._lending, ExitStack() as lent:

            def copy() -> None:
                fds = lent.enter_context(self._holding(rec))
                if fds is None:
                    raise FlowEndedError(f"flow {flow.id} has ended")
                for leg, fd in zip(legs, fds, strict=True):
                    sock = socket.socket(fileno=fd) if fd >= 0 else None
                    if sock is not None:
                        lent.callback(sock.detach)  # the descriptor is _holding's to close
                    if leg is not None:
                        leg.lend(sock)

            try:
                for leg in legs if lazily else ():
                    if leg is not None:
                        leg.lend(None, copy)
                if not lazily:
                    copy()
                fn(flow)
            except FlowEndedError:
                pass  # it ended before its sockets were copied: as if it had ended before fn
            except Exception:
                log.exception("a call on a core flow failed", flow=flow.id)
            finally:
                for leg in legs:
                    if leg is not None:
                        leg.lend(None)

    def flow_of(self, rec: _Record) -> Flow:
        """The ``Flow`` of a record: the one the hooks know (its ``ext``), brought up to date."""
        known = self._known.get(rec.id)
        return _flow(rec, known) if known is not None else _flow(rec)

    # ---- run-time changes -----------------------------------------------------------------

    def listen(self, mode: ProxyMode, port: int) -> tuple[str, int]:
        """(Re)open ``mode``'s listeners on every relay thread (port 0 picks a free one):
        the new ones are opened first, so a port that cannot be had changes nothing."""
        groups = self._open(mode, port)
        try:
            for j, k in enumerate(self._slots(mode)):
                self._replace(k, [group[j] if j < len(group) else None for group in groups])
        except BaseException:
            placed = {id(sock) for group in self._listeners for sock in group}
            for sock in (x for group in groups for x in group if id(x) not in placed):
                if sock is not None:
                    sock.close()
            raise
        first = groups[0][0]
        assert first is not None
        host, bound = first.getsockname()[:2]
        address = (str(host), int(bound))
        self.addresses[mode] = address
        log.info("listening", mode=str(mode), address=f"{address[0]}:{address[1]}")
        return address

    def unlisten(self, mode: ProxyMode) -> None:
        for k in self._slots(mode):
            self._replace(k, [None] * self.thread_count)
        if self.addresses.pop(mode, None) is not None:
            log.info("listener closed", mode=str(mode))

    def _replace(self, slot: int, socks: list[socket.socket | None]) -> None:
        """Listener ``slot`` of each relay thread becomes ``socks[thread]``; the old one is
        closed once the core has let go of it (a running core copies the new one)."""
        old = [group[slot] for group in self._listeners]
        if self._lib is not None:
            fds = (ctypes.c_int32 * self.thread_count)(
                *(sock.fileno() if sock is not None else -1 for sock in socks)
            )
            if err := self._lib.pep_core_listen(slot, fds):
                raise OSError(-err, f"relay core: {self._lib.pep_core_error().decode()}")
        for group, sock in zip(self._listeners, socks, strict=True):
            group[slot] = sock
        for sock in old:
            if sock is not None:
                sock.close()

    def set_policy(self, policy: AccessPolicy) -> None:
        table = _policy(policy)
        self._policies.append(table)
        if self._lib is not None:
            self._lib.pep_core_set_policy(ctypes.byref(table))

    def set_limits(self) -> None:
        """The settings the core copied at start that ``PATCH /config`` changes: limits,
        timeouts, WAN buffers, ``tlv_max_buffer`` (the Python relay reads them per flow)."""
        if self._lib is not None and self._lib.pep_core_set_limits(ctypes.byref(self._config())):
            raise OSError(f"the relay core's flow table holds {self._capacity} flows "
                          "(PEP_MAX_FLOWS at start); more need a restart")  # fmt: skip

    def resize_buffers(self) -> None:
        s = self.settings
        for group in self._listeners:
            for sock in group:
                if sock is not None:
                    set_buffers(sock, s.ran_rcvbuf, s.ran_sndbuf, force=s.force_buffers)

    # ---- reading state -----------------------------------------------------------------------

    def live(self) -> int:
        return int(self._lib.pep_core_live()) if self._lib is not None else 0

    def records(self) -> list[_Record]:
        if self._lib is None:
            return []
        room = self.live() + 64  # flows accepted meanwhile are seen next time
        out = (_Record * room)()
        n = self._lib.pep_core_snapshot(out, room)
        return list(out[:n])

    def counters(self) -> RelayCounters:
        total = RelayCounters()
        if self._lib is None:
            return total
        for i in range(self.thread_count):
            c = self._lib.pep_core_counters(i).contents
            total.accepted += c.accepted
            total.established += c.established
            total.closed += c.closed
            total.bytes_to_ue += c.bytes_to_ue
            total.bytes_from_ue += c.bytes_from_ue
            for counts, kept in ((c.refused, total.refused), (c.aborted, total.aborted)):
                for reason, n in zip(REASONS, counts, strict=True):
                    if n:
                        kept[reason] = kept.get(reason, 0) + n
        return total

    @property
    def private_descriptor_tables(self) -> bool:
        return self._lib is not None and bool(self._lib.pep_core_private_tables())

    def _per_thread(self, name: str) -> int:
        if self._lib is None:
            return 0
        return sum(getattr(self._lib.pep_core_counters(i).contents, name)
                   for i in range(self.thread_count))  # fmt: skip

    def pipes_in_use(self) -> int:
        """Pipes holding a direction's bytes now (the splice path of bulk flows)."""
        return self._per_thread("pipes_in_use")

    def reader_wakes(self) -> int:
        """Events that woke the hooks' sleeping reader (the others came while it was busy)."""
        return self._per_thread("reader_wakes")

    def spliced(self) -> int:
        """Directions that have moved to the splice path since the start."""
        return self._per_thread("spliced")

    def listener_buffers(self) -> tuple[int, int] | None:
        for sock in (sock for group in self._listeners for sock in group if sock is not None):
            return (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            )
        return None

    def flow_states(
        self, flows: Iterable[Flow], *, tcp: bool, timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        states = [self._held(f, partial(_state, f, tcp=tcp)) for f in flows]
        return sorted((s for s in states if s is not None), key=lambda s: s["id"])

    def buffered(
        self, flows: Iterable[Flow], timeout: float = 10.0
    ) -> list[tuple[Flow, dict[str, dict[str, int]]]]:
        held = [(f, self._held(f, partial(_held_bytes, f))) for f in flows]
        return [(f, b) for f, b in held if b is not None]

    def _held(self, flow: Flow, read: Callable[[tuple[int, int]], T]) -> T | None:
        """``read(fds)`` on copies of the flow's sockets (they live in their relay thread's
        descriptor table); None if the flow has ended."""
        rec = flow._relay
        return self._hold(rec, read) if isinstance(rec, _Record) else None

    def _hold(self, rec: _Record, read: Callable[[tuple[int, int]], T]) -> T | None:
        """``_held`` for a record (the backlog feed's: no ``Flow`` made per sample)."""
        with self._holding(rec) as fds:
            return read(fds) if fds is not None else None

    @contextmanager
    def _holding(self, rec: _Record) -> Iterator[tuple[int, int] | None]:
        """Copies of a record's sockets in this thread's descriptor table (-1 for a leg
        without one), closed when the block ends; None if the flow has ended. The one
        place that takes ``pep_core_hold``'s copies and closes them."""
        fds = (ctypes.c_int32 * 2)(-1, -1)
        if self._lib is None or self._lib.pep_core_hold(rec.slot, rec.id, fds):
            yield None
            return
        try:
            yield fds[0], fds[1]
        finally:
            for fd in fds:
                if fd >= 0:
                    os.close(fd)

    def held_toward_ue(self) -> tuple[list[tuple[str, dict[str, int]]], dict[str, int]]:
        """``backlog.BacklogSource``: the flows the core marked (it read bytes toward their
        UE since the last call) and still holding some, marked again so they are sampled
        until seen at zero; and the core's bytes read from servers per UE."""
        if self._lib is None:
            return [], {}
        found: list[tuple[str, dict[str, int]]] = []
        cursor, batch = ctypes.c_uint32(0), self._toward_ue_batch
        while True:
            n = self._lib.pep_core_toward_ue(ctypes.byref(cursor), batch, len(batch))
            for rec in batch[:n]:
                q = self._hold(rec, partial(_toward_ue, rec))
                if q is not None and q["total"] > 0:
                    found.append((_ip(rec.family, rec.ue), q))
                    self._lib.pep_core_mark_toward_ue(rec.slot, rec.id)
            if n < len(batch):
                break
        return found, self._ue_totals()

    def _ue_totals(self) -> dict[str, int]:
        assert self._lib is not None
        uncounted = self._per_thread("ues_uncounted")
        if uncounted > self._uncounted:  # the core's per-UE table is full (max_flows UEs)
            log.warning("flows of new UEs not in received_bytes", flows=uncounted)
            self._uncounted = uncounted
        while True:
            room = len(self._totals_batch)
            n = self._lib.pep_core_ue_totals(self._totals_batch, room)
            if n < room:
                return {_ip(u.family, u.address): u.received for u in self._totals_batch[:n]}
            self._totals_batch = (_UeTotal * (2 * room))()

    def reset(self, flow: Flow, reason: str) -> None:
        """RST on both legs, in the flow's relay thread (counted as "reset by API")."""
        rec = flow._relay
        if self._lib is not None and isinstance(rec, _Record):
            self._lib.pep_core_reset(rec.slot, rec.id)

    def for_flows(
        self, flows: Iterable[Flow], fn: Callable[[Flow], None], *, wait: bool = True
    ) -> None:
        """``RelayAccess.for_flows`` for the core's flows: ``fn`` runs in the caller's thread
        (the core runs no Python) on copies of the flow's sockets; so it always waits."""
        for flow in flows:
            self.lend(flow, fn)


def _state(flow: Flow, fds: tuple[int, int], *, tcp: bool) -> dict[str, Any]:
    rec: _Record = flow._relay
    wan_tcp = tcp and rec.stage == RELAYING
    return flow_record(
        flow,
        stage=STAGES.get(rec.stage, "closed"),
        idle_s=(time.monotonic_ns() - rec.last_active_ns) / 1e9,
        buffered=_held_bytes(flow, fds),
        ran=leg_record(flow.ran, _tcp_info(fds[0]) if tcp else None, with_tcp=tcp),
        wan=leg_record(flow.wan, _tcp_info(fds[1]) if wan_tcp else None, with_tcp=wan_tcp),
    )


def _toward_ue(rec: _Record, fds: tuple[int, int]) -> dict[str, int]:
    return toward_ue(fds[0], fds[1] if rec.stage == RELAYING else -1, rec.buffered_to_ue)


def _held_bytes(flow: Flow, fds: tuple[int, int]) -> dict[str, dict[str, int]]:
    rec: _Record = flow._relay
    wan_fd = fds[1] if rec.stage == RELAYING else -1
    return held(fds[0], wan_fd, rec.buffered_to_server, rec.buffered_to_ue)


def _tcp_info(fd: int) -> dict[str, Any] | None:
    """TCP_INFO through a copy of a core socket (``CoreDataPlane._held`` closes it)."""
    if fd < 0:
        return None
    sock = socket.socket(fileno=fd)
    try:
        return tcp_info(sock)
    except OSError:
        return None
    finally:
        sock.detach()
