"""Flows and the extension contract (the hooks MELD/RAPID plug into).

A *flow* is one split TCP connection: the **RAN leg** (PEP ↔ UE, the socket the PEP
accepted) and the **WAN leg** (PEP ↔ server, the socket the PEP connected). The relay
creates a ``Flow`` per accepted connection and calls the hooks of every extension at
fixed points of its life:

1. ``on_ran_leg_ready(flow)``: the RAN-leg socket is accepted and configured (buffers,
   and the congestion control an extension names in ``ran_congestion_control``, set by
   the relay at accept), nothing has been relayed toward the UE yet. The place to set
   other options on ``flow.ran.sock``. ``flow.wan`` is still ``None``.
2. ``on_wan_leg_ready(flow)``: the WAN-leg socket exists, ``connect()`` has not been
   called yet (window clamp, congestion control toward the server).
3. ``on_flow_established(flow)``: both legs are connected; relaying starts right after.
4. ``on_flow_closed(flow)``: always called exactly once for every flow that got (1),
   also when the handshake or the connect failed. The sockets are still open (in any TCP
   state) so final ``TCP_INFO`` can be read; the relay closes them right afterwards.

Hooks run **in the flow's relay thread**: they must be fast and must not block (no
network I/O, no sleeping), and must not call ``gc.collect()`` (garbage is collected outside
the relay threads: ``mec_pep.relay.collector``). An exception in a hook is logged and does not
affect the flow.

**Sockets belong to their relay thread.** Each relay thread has its own file-descriptor
table (``unshare(CLONE_FILES)``: one process may hold only ``RLIMIT_NOFILE`` descriptors,
and a flow needs two sockets, so several tables are how the PEP holds more than ~10,000
flows). A flow's ``sock.fileno()`` is meaningful only in its relay thread: setsockopt,
getsockopt, ioctl, or a BPF map update keyed by the fd must run there. From other threads
(REST handlers, an RNIS consumer) use ``context.for_flows(flows, fn)``, which runs
``fn(flow)`` in each flow's relay thread (skipping flows that closed meanwhile).
Attributes that are plain values (``id``, ``ue``, addresses, counters) can be read from
any thread. Descriptors an extension opens in ``create_extension`` (before the relays
start, e.g. BPF maps) are valid in the relay threads too (same numbers); descriptors
opened later in other threads are not, and sockets and pipes never are (a relay closes its
copies). A hook must not use another thread's socket even indirectly: pika's
``add_callback_threadsafe`` writes a wake-up byte to its socket by number, which in a relay
thread is one of the relay's connections or pipes (stray bytes at the start of a UE's first
flow, issue 20). Hand work to other threads through locks and queues only.

An extension is found by import: if the package ``mec_pep.ran_aware`` exists, the PEP
calls its ``create_extension(context: PepContext) -> PepExtension`` at start and calls
``stop()`` at shutdown. ``router()`` is mounted under ``/pep/v1/<name>`` (bearer auth
applied by the PEP); health entries go to ``context.health``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from mec_common.health import Health
from mec_common.logging import get_logger

if TYPE_CHECKING:
    from fastapi import APIRouter

    from mec_pep.config import PepSettings

log = get_logger(__name__)

Address = tuple[str, int]


class ProxyMode(StrEnum):
    """How the client reached the PEP."""

    TRANSPARENT = "transparent"  # TPROXY interception; the UE does not know about the PEP
    SOCKS5 = "socks5"  # explicit: SOCKS5 no-auth CONNECT
    TLV = "tlv"  # explicit: the research PEP's TFO opt-in TLV


class Leg:
    """One TCP connection of a flow: the socket and both of its addresses.

    A flow of the compiled relay core (``mec_pep.core``) has no Python socket: its legs
    carry the addresses only, and ``sock`` says so.
    """

    __slots__ = ("_copy", "_sock", "local", "peer")

    def __init__(self, sock: socket.socket | None, local: Address, peer: Address) -> None:
        self._sock = sock
        self._copy: Callable[[], None] | None = None
        self.local = local
        self.peer = peer

    @property
    def sock(self) -> socket.socket:
        if self._sock is None and self._copy is not None:
            self._copy()  # the core's hooks: the copies are made at the first use
        if self._sock is None:
            raise RuntimeError("this flow's sockets belong to the compiled relay core")
        return self._sock

    def fileno(self) -> int:
        return self.sock.fileno()

    def lend(self, sock: socket.socket | None, copy: Callable[[], None] | None = None) -> None:
        """The compiled core lends a copy of the leg's socket for the length of a hook or
        ``for_flows`` call (``None``: taken back), or ``copy``, which lends the flow's
        copies when a hook first uses ``sock`` (raising ``FlowEndedError`` if it has ended)."""
        self._sock = sock
        self._copy = copy


class FlowEndedError(RuntimeError):
    """A compiled-core flow ended before its start hooks first used its sockets: the
    hooks' caller skips its remaining start hooks, as it skips a flow that ended before
    them (``on_flow_closed`` still comes if ``on_ran_leg_ready`` ran)."""


class Flow:
    """A split connection. Public attributes are the contract; ``_``-names are the relay's.

    Byte counters count bytes relayed (written to the other leg's socket).
    """

    __slots__ = (
        "_relay",
        "bytes_from_ue",
        "bytes_to_ue",
        "closed_at",
        "created_at",
        "destination",
        "established_at",
        "ext",
        "id",
        "mode",
        "ran",
        "ue",
        "wan",
    )

    def __init__(self, flow_id: int, mode: ProxyMode, ran: Leg) -> None:
        self.id = flow_id
        self.mode = mode
        self.ran = ran
        self.ue: str = ran.peer[0]
        self.wan: Leg | None = None
        self.destination: Address | None = None  # the server the UE asked for
        self.created_at = time.time()
        self.established_at: float | None = None
        self.closed_at: float | None = None
        self.bytes_to_ue = 0
        self.bytes_from_ue = 0
        self.ext: dict[str, Any] | None = None  # per-flow state of extensions, by name
        self._relay: Any = None

    def age(self, now: float | None = None) -> float:
        return (now if now is not None else time.time()) - self.created_at

    def __repr__(self) -> str:
        return f"Flow(id={self.id}, mode={self.mode}, ue={self.ue}, dst={self.destination})"


def flow_record(
    flow: Flow,
    *,
    stage: str,
    idle_s: float,
    buffered: dict[str, dict[str, int]],
    ran: dict[str, Any] | None,
    wan: dict[str, Any] | None,
) -> dict[str, Any]:
    """A flow as the API shows it (``models.FlowState``), whichever relay carries it."""
    return {
        "id": flow.id,
        "mode": str(flow.mode),
        "ue": flow.ue,
        "stage": stage,
        "destination": address_text(flow.destination),
        "created_at": flow.created_at,
        "established_at": flow.established_at,
        "age_s": round(time.time() - flow.created_at, 3),
        "idle_s": round(idle_s, 3),
        "bytes_to_ue": flow.bytes_to_ue,
        "bytes_from_ue": flow.bytes_from_ue,
        "buffered": buffered,
        "ran": ran,
        "wan": wan,
        "ext": dict(flow.ext) if flow.ext else {},
    }


def leg_record(
    leg: Leg | None, tcp: dict[str, Any] | None, *, with_tcp: bool
) -> dict[str, Any] | None:
    """A leg as the API shows it: its addresses, and its TCP_INFO if asked for."""
    if leg is None:
        return None
    state: dict[str, Any] = {"local": address_text(leg.local), "peer": address_text(leg.peer)}
    if with_tcp:
        state["tcp"] = tcp
    return state


def address_text(address: Address | None) -> str | None:
    """host:port, [host]:port for IPv6 (RFC 3986)."""
    if not address:
        return None
    host, port = address[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class FlowTable:
    """The live flows of all relay threads, by id and by UE. ``lock`` guards membership."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._by_id: dict[int, Flow] = {}
        self._by_ue: dict[str, dict[int, Flow]] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, flow: Flow) -> None:
        """Called by a relay thread with ``lock`` held."""
        self._by_id[flow.id] = flow
        self._by_ue.setdefault(flow.ue, {})[flow.id] = flow

    def remove(self, flow: Flow) -> None:
        """Called by a relay thread with ``lock`` held."""
        self._by_id.pop(flow.id, None)
        peers = self._by_ue.get(flow.ue)
        if peers is not None:
            peers.pop(flow.id, None)
            if not peers:
                del self._by_ue[flow.ue]

    def get(self, flow_id: int) -> Flow | None:
        return self._by_id.get(flow_id)

    def by_ue(self, ue: str) -> list[Flow]:
        return list(self._by_ue.get(ue, {}).values())

    def ues(self) -> list[str]:
        return list(self._by_ue)

    def count_for(self, ue: str) -> int:
        return len(self._by_ue.get(ue, ()))

    def __iter__(self) -> Iterator[Flow]:
        return iter(list(self._by_id.values()))


class PepExtension:
    """Base class of an extension; override what you need (all hooks default to no-ops)."""

    name = "extension"
    # The RAN leg's congestion control, if the extension wants one for every flow: the
    # relay sets it at accept, before any byte (``Hooks.ran_congestion_control``; the
    # compiled core's hooks come after the fact, and need no copy of the socket for it).
    # A name the kernel does not have refuses the flow, as PEP_RAN_CONGESTION_CONTROL's.
    # Read once, when the service sets its extensions: set it in ``__init__``.
    ran_congestion_control: str | None = None

    def on_ran_leg_ready(self, flow: Flow) -> None:
        """RAN-leg socket accepted and configured; nothing relayed yet."""

    def on_wan_leg_ready(self, flow: Flow) -> None:
        """WAN-leg socket created and configured; not connected yet."""

    def on_flow_established(self, flow: Flow) -> None:
        """Both legs connected; relaying starts next."""

    def on_flow_closed(self, flow: Flow) -> None:
        """The flow ends (sockets still open, closed right after)."""

    def router(self) -> APIRouter | None:
        """Extra REST routes, mounted under ``/pep/v1/<name>`` with bearer auth."""
        return None

    def stop(self) -> None:
        """Release threads and kernel objects at shutdown."""


class RelayAccess(Protocol):
    def for_flows(
        self, flows: Iterable[Flow], fn: Callable[[Flow], None], *, wait: bool = True
    ) -> None:
        """Run ``fn(flow)`` in each flow's relay thread; closed flows are skipped.

        With ``wait`` (the default) return when all ran; exceptions are logged, not raised.
        """


@dataclass
class PepContext:
    """What an extension gets at creation."""

    settings: PepSettings
    health: Health
    flows: FlowTable
    relays: RelayAccess

    def for_flows(
        self, flows: Iterable[Flow], fn: Callable[[Flow], None], *, wait: bool = True
    ) -> None:
        """See ``RelayAccess.for_flows``: the only way to touch flow sockets from outside."""
        self.relays.for_flows(flows, fn, wait=wait)


class Hooks:
    """Calls every extension's hook, isolating the relay from extension failures."""

    def __init__(self, extensions: Iterable[PepExtension] = ()) -> None:
        self.extensions = extensions

    @property
    def extensions(self) -> tuple[PepExtension, ...]:
        return self._extensions

    @extensions.setter
    def extensions(self, extensions: Iterable[PepExtension]) -> None:
        """Set as a whole (the service sets them once, before the relays start): a tuple,
        so no change in place can leave ``_ran_cc``, read here once, stale."""
        self._extensions = tuple(extensions)
        named = (e.ran_congestion_control for e in self._extensions if e.ran_congestion_control)
        self._ran_cc = next(named, None)

    def ran_congestion_control(self, default: str | None) -> str | None:
        """The RAN leg's congestion control: the first extension's that names one, else
        ``default`` (``PEP_RAN_CONGESTION_CONTROL``). Both relays set it at accept, and a
        name the kernel does not have refuses the flow there."""
        return self._ran_cc or default

    def _call(self, hook: str, flow: Flow) -> None:
        for ext in self.extensions:
            try:
                getattr(ext, hook)(flow)
            except FlowEndedError:
                raise  # not the extension's failure: the caller skips the flow's start
            except Exception:
                log.exception("extension hook failed", extension=ext.name, hook=hook, flow=flow.id)

    def ran_leg_ready(self, flow: Flow) -> None:
        self._call("on_ran_leg_ready", flow)

    def wan_leg_ready(self, flow: Flow) -> None:
        self._call("on_wan_leg_ready", flow)

    def flow_established(self, flow: Flow) -> None:
        self._call("on_flow_established", flow)

    def flow_closed(self, flow: Flow) -> None:
        self._call("on_flow_closed", flow)
