"""The PEP's RNIS consumer: AMQP measurements → the kernel's per-UE radio map.

It binds only to the UEs the PEP serves: the configured UE networks, or else each UE from
its first flow until ``rnis_unbind_after_s`` after its last one. The broker and exchange
come from Mp1 service discovery (the RNIS registers an ``MB_TOPIC_BASED`` transport) when
a platform is configured, else from settings; an explicit setting always wins. The
platform and the broker are retried with backoff; both show in health as ``rnis``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from ipaddress import IPv4Network
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from mec_common.amqp import AmqpConsumer
from mec_common.bus.rnis import (
    RnisEvent,
    RnisMeasurement,
    bind_all,
    bind_cell_batch,
    bind_ue_ip,
)
from mec_common.health import Health
from mec_common.logging import get_logger
from mec_common.mp1 import AmqpFeed, Mp1Client, resolve_amqp_feed
from mec_common.radio_view import RadioView, ViewStats
from mec_pep.ran_aware.kernel import MeldKernel
from mec_pep.ran_aware.radio import radio_state

log = get_logger(__name__)

HEALTH_NAME = "rnis"
MAX_STATIC_UES = 4096


@dataclass(frozen=True)
class Endpoint:
    url: str
    exchange: str
    source: str  # "mp1" or "settings"

    def public_url(self) -> str:
        """The URL without credentials (for logs and the API)."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


@dataclass
class FeedStats(ViewStats):
    """The view's counts (received, rejected, ignored: also no UE address / no D_TBS, or
    a UE we do not serve), and what this consumer did with the measurements."""

    applied: int = 0
    detached: int = 0
    last_applied: dict[str, float] = field(default_factory=dict)  # UE -> wall time


class RnisFeed:
    def __init__(
        self,
        kernel: MeldKernel,
        health: Health,
        *,
        amqp_url: str,
        exchange: str,
        explicit: set[str],
        mp1: Mp1Client | None,
        ue_networks: list[IPv4Network],
        unbind_after_s: float,
        default_harq: int,
        full_bytes: int = 0,
        on_capacity: Callable[[str, float], None] | None = None,
        kind: Literal["ue", "cell"] = "ue",
        cells: list[str] | None = None,
    ) -> None:
        self._kernel = kernel
        self._health = health
        self._settings_endpoint = Endpoint(amqp_url, exchange, "settings")
        self._explicit = explicit  # {"url", "exchange"} given in settings: not discovered
        self._mp1 = mp1
        self._unbind_after = unbind_after_s
        self._default_harq = default_harq
        self._full_bytes = full_bytes  # a full RLC buffer (MELD-overflow), bytes; 0 = unknown
        self._on_capacity = on_capacity
        self._kind = kind  # "cell": one binding for every cell's batch, events still per UE
        self.cells = sorted(cells or [])  # the cell feed's cells (of this node); [] = every one
        self._lock = threading.Lock()
        self._flows_per_ue: dict[str, int] = {}
        self._idle_since: dict[str, float] = {}
        if sum(net.num_addresses for net in ue_networks) > MAX_STATIC_UES:
            raise ValueError(f"PEP_RNIS_UE_NETWORKS covers more than {MAX_STATIC_UES} UEs")
        self._static = {str(ip) for net in ue_networks for ip in net}
        self._stop = threading.Event()
        self._consumer: AmqpConsumer | None = None
        self.endpoint: Endpoint | None = None
        self.stats = FeedStats()
        self._view = RadioView(self._on_measurement, self._on_event, self.stats)
        self._thread = threading.Thread(target=self._connect, name="rnis-feed", daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        # not required: the PEP relays without RNIS (later reports keep this)
        self._health.set(HEALTH_NAME, False, "starting", required=False)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        if self._consumer is not None:
            self._consumer.close()

    def _connect(self) -> None:
        """Resolve the endpoint (Mp1, with backoff), then consume until stopped."""
        configured = AmqpFeed(self._settings_endpoint.url, self._settings_endpoint.exchange)
        feed = resolve_amqp_feed(
            self._mp1, "rnis", configured, self._stop, explicit=frozenset(self._explicit),
            report=lambda reason: self._health.set(HEALTH_NAME, False, reason),
        )  # fmt: skip
        if feed is None:
            return
        from_settings = self._mp1 is None or self._explicit >= {"url", "exchange"}
        endpoint = Endpoint(feed.url, feed.exchange, "settings" if from_settings else "mp1")
        self.endpoint = endpoint
        log.info("rnis feed", broker=endpoint.public_url(), exchange=endpoint.exchange,
                 source=endpoint.source)  # fmt: skip
        with self._lock:  # flows opened from now on bind through the consumer
            self._consumer = AmqpConsumer(
                endpoint.url,
                endpoint.exchange,
                self._wanted_bindings(),
                self._view.on_message,
                health=self._health,
                health_name=HEALTH_NAME,
                name="pep-rnis",
            )
            self._consumer.start()

    # --- bindings -----------------------------------------------------------------------------

    def _wanted_bindings(self) -> list[str]:
        """Called with the lock held."""
        ues = self._static | set(self._flows_per_ue) | set(self._idle_since)
        cells = []
        if self._kind == "cell":
            cells = [bind_cell_batch(c) for c in self.cells] or [bind_all("cell")]
        return cells + [key for ue in sorted(ues) for key in self._keys(ue)]

    def _bind(self, ue: str, *, add: bool) -> None:
        """Called with the lock held (binding only queues work for the consumer's thread)."""
        if self._consumer is None or ue in self._static:
            return  # bound at connect from the tables, or always bound
        for key in self._keys(ue):
            (self._consumer.bind if add else self._consumer.unbind)(key)

    def _keys(self, ue: str) -> tuple[str, ...]:
        event = bind_ue_ip(ue, "event")
        return (event,) if self._kind == "cell" else (bind_ue_ip(ue, "meas"), event)

    def flow_opened(self, ue: str) -> None:
        with self._lock:
            count = self._flows_per_ue.get(ue, 0)
            self._flows_per_ue[ue] = count + 1
            was_idle = self._idle_since.pop(ue, None) is not None
            if count == 0 and not was_idle:
                self._bind(ue, add=True)

    def flow_closed(self, ue: str) -> None:
        with self._lock:
            count = self._flows_per_ue.get(ue, 0) - 1
            if count > 0:
                self._flows_per_ue[ue] = count
                return
            self._flows_per_ue.pop(ue, None)
            self._idle_since[ue] = time.monotonic()

    def housekeeping(self, now: float | None = None) -> None:
        """Unbind UEs whose last flow closed long enough ago and forget their radio state."""
        now = time.monotonic() if now is None else now
        with self._lock:
            expired = [ue for ue, t in self._idle_since.items() if now - t >= self._unbind_after]
            for ue in expired:
                del self._idle_since[ue]
                self._bind(ue, add=False)
        for ue in expired:
            if not self.served(ue):
                self._kernel.forget_radio(ue)

    def served(self, ue: str) -> bool:
        with self._lock:
            return ue in self._static or ue in self._flows_per_ue or ue in self._idle_since

    def bindings(self) -> list[str]:
        with self._lock:
            if self._consumer is not None:
                return sorted(self._consumer.bindings)
            return sorted(self._wanted_bindings())

    # --- messages -----------------------------------------------------------------------------

    def _on_measurement(self, m: RnisMeasurement) -> None:
        update = radio_state(m, self._default_harq, full_bytes=self._full_bytes)
        if update is None or not self.served(update.ue):
            self.stats.ignored += 1
            return
        self._kernel.set_radio(update.ue, update.radio)
        if self._on_capacity is not None:
            self._on_capacity(update.ue, float(update.radio.capacity_Bps))
        self.stats.applied += 1
        self.stats.last_applied[update.ue] = time.time()

    def _on_event(self, event: RnisEvent) -> None:
        if event.event == "detach" and event.ue_ipv4 is not None:
            ue = str(event.ue_ipv4)
            if self.served(ue):
                self._kernel.forget_radio(ue)
                self.stats.detached += 1
