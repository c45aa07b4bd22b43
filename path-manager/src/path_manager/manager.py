"""The path manager: RNIS + PEP backlog in, one control per UE, paths switched out.

Inputs (AMQP, ``mec_common.amqp.AmqpConsumer``):
- the RNIS feed (exchange from Mp1 discovery when a platform is configured, else
  ``PM_RNIS_EXCHANGE``), bound per path address: ``rnis.v1.meas.*.*.<path ip>``;
- the PEP's per-UE backlog (exchange ``PM_PEP_EXCHANGE``, key ``pep.v1.backlog.<ue ip>``,
  published every few ms while the PEP holds bytes for the UE): the queue, and the reactive
  trigger on every sample;
- optionally the flow-RTT observer's feed (``PM_FLOWRTT_EXCHANGE``), bound per path address:
  shown per path (``flow_rtt``), not used by the control.

Output: ``MptcpActuator`` in the PEP's namespace (``PM_MPTCP_NETNS``), ``TunnelActuator``
(the multipath tunnel's paths, ``PM_ACTUATION=tunnel``), or nothing with
``PM_ACTUATION=none`` (decisions are still made and logged: a dry run).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace
from ipaddress import IPv4Address
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from mec_common.amqp import AmqpConsumer
from mec_common.bus.backlog import PepBacklog, backlog_routing_key
from mec_common.bus.flowrtt import bind_address
from mec_common.bus.rnis import RnisMeasurement, bind_all, bind_ue_ip
from mec_common.flow_rtt_view import FlowRttView
from mec_common.health import Health
from mec_common.logging import get_logger
from mec_common.mp1 import AmqpFeed, Mp1Client, resolve_amqp_feed
from mec_common.radio_view import RadioView, measured_ns, monotonic_ns_from_wall
from path_manager.control import (
    Action,
    ControlSettings,
    Decision,
    Observation,
    PathControl,
    PathView,
)
from path_manager.path_radio import PathRadio
from path_manager.settings import PmSettings
from path_manager.timers import RealTimeScheduler

log = get_logger(__name__)

ARRIVAL_WINDOW = 0.1  # seconds of received_bytes the arrival rate is measured over

DECISIONS = Counter("pm_decisions_total", "Control decisions", ["ue", "trigger", "action"])
PREDICTION = Histogram(
    "pm_prediction_seconds",
    "Wall time of a control's predictions",
    buckets=(1e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2.5e-2, 0.1),
)
ACTIVE = Gauge("pm_active_paths", "Active paths per UE", ["ue"])
QUEUE = Gauge("pm_queue_packets", "The queue the control sees (PM_QUEUE_MEASURE), packets", ["ue"])


@dataclass
class Ue:
    """One UE: its paths, the last backlog and the arrival-rate estimate."""

    id: IPv4Address
    paths: dict[IPv4Address, PathRadio]
    active: dict[IPv4Address, bool]
    control: PathControl | None = None
    queue_bytes: float = 0.0  # the queue the control sees (PM_QUEUE_MEASURE)
    unsent_bytes: float = 0.0  # the data plane's part of it (the rest: the RLC queues)
    arrival_pps: float = 0.0
    # (time, PEP's cumulative received_bytes) over the last ARRIVAL_WINDOW seconds
    received: deque[tuple[float, int]] = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)


class PathManager:
    """All UEs, their controls, the feeds and the actuator."""

    def __init__(self, settings: PmSettings, health: Health) -> None:
        self.settings = settings
        self.health = health
        self.control_settings = settings.control()
        self.radio = settings.radio()
        self.clock = RealTimeScheduler()
        self.ues: dict[IPv4Address, Ue] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.actuator: Any = None
        if settings.actuation == "mptcp":
            self.actuator = _start_actuator(settings.mptcp_netns, health)
        elif settings.actuation == "tunnel":
            from path_manager.tunnel_actuator import TunnelActuator, parse_paths

            paths = parse_paths(settings.tunnel_paths)
            self.actuator = TunnelActuator(paths, settings.tunnel_token, health)
        cells = [bind_all("cell")] if settings.rnis_feed == "cell" else []  # UEs bind per path
        # The configured feed until Mp1 discovery (start()) names the registered one.
        self.rnis = AmqpConsumer(
            settings.amqp_url, settings.rnis_exchange, cells,
            RadioView(self._on_measurement).on_message,
            health=health, health_name="rnis_feed", name="pm-rnis",
        )  # fmt: skip
        self.backlog = AmqpConsumer(
            settings.amqp_url, settings.pep_exchange, [], self._on_backlog,
            health=health, health_name="pep_backlog", name="pm-backlog",
        )  # fmt: skip
        self.flow_rtt: FlowRttView | None = None
        self._flow_rtt_feed: AmqpConsumer | None = None
        if settings.flowrtt_exchange:
            self.flow_rtt = FlowRttView()
            self._flow_rtt_feed = AmqpConsumer(
                settings.amqp_url, settings.flowrtt_exchange, [], self.flow_rtt.on_message,
                health=health, health_name="flowrtt_feed", name="pm-flowrtt",
            )  # fmt: skip

    def start(self) -> None:
        self._stop.clear()
        threading.Thread(target=self._start_rnis, name="pm-rnis-discovery", daemon=True).start()
        self.backlog.start()
        if self._flow_rtt_feed is not None:
            self._flow_rtt_feed.start()
        for ue, paths in (json.loads(self.settings.ues) if self.settings.ues else {}).items():
            self.put_ue(IPv4Address(ue), [IPv4Address(p) for p in paths])

    def _start_rnis(self) -> None:
        """Find the RNIS feed (Mp1 discovery, retried with backoff; else the settings), then
        consume it. Bindings made meanwhile wait in the consumer."""
        mp1 = Mp1Client.from_settings(self.settings)
        configured = AmqpFeed(self.settings.amqp_url, self.settings.rnis_exchange)
        given = self.settings.model_fields_set  # named by the operator: they win
        explicit = frozenset(
            word for field, word in (("amqp_url", "url"), ("rnis_exchange", "exchange"))
            if field in given
        )  # fmt: skip
        try:
            feed = resolve_amqp_feed(
                mp1, "rnis", configured, self._stop, explicit=explicit,
                report=lambda reason: self.health.set("rnis_feed", False, reason),
            )  # fmt: skip
        finally:
            if mp1 is not None:
                mp1.close()
        if feed is None:  # closed while waiting
            return
        log.info("rnis feed", exchange=feed.exchange, discovered=feed != configured)
        self.rnis.set_endpoint(feed.url, feed.exchange)
        self.rnis.start()

    def close(self) -> None:
        self._stop.set()
        for ue in list(self.ues.values()):
            if ue.control:
                ue.control.stop()
        self.clock.close()
        self.rnis.close()
        self.backlog.close()
        if self._flow_rtt_feed is not None:
            self._flow_rtt_feed.close()
        if self.actuator is not None:
            self.actuator.close()

    # -- UEs ----------------------------------------------------------------------------
    def put_ue(self, ue_id: IPv4Address, paths: list[IPv4Address]) -> Ue:
        """Create or replace a UE; its first path starts active, the others inactive."""
        self.delete_ue(ue_id)
        ue = Ue(
            ue_id,
            {p: PathRadio(str(p)) for p in paths},
            {p: i == 0 for i, p in enumerate(paths)},
        )
        plant = _UePlant(self, ue)
        ue.control = PathControl(
            self.control_settings, plant, self.clock, self.clock,
            on_decision=lambda d: self._on_decision(ue, d),
        )  # fmt: skip
        with self._lock:
            self.ues[ue_id] = ue
        for p in paths:
            if self.settings.rnis_feed == "ue":
                self.rnis.bind(bind_ue_ip(p))
            self._actuate(p, ue.active[p])
            self._bind_flow_rtt(p, add=True)
        self.backlog.bind(backlog_routing_key(ue_id))
        ACTIVE.labels(str(ue_id)).set(1)
        ue.control.start()
        return ue

    def delete_ue(self, ue_id: IPv4Address) -> bool:
        with self._lock:
            ue = self.ues.pop(ue_id, None)
        if ue is None:
            return False
        if ue.control:
            ue.control.stop()
        for p in ue.paths:
            if self.settings.rnis_feed == "ue":
                self.rnis.unbind(bind_ue_ip(p))
            self._bind_flow_rtt(p, add=False)
        self.backlog.unbind(backlog_routing_key(ue_id))
        return True

    def _bind_flow_rtt(self, path: IPv4Address, *, add: bool) -> None:
        if self._flow_rtt_feed is not None:
            for key in bind_address(path):
                (self._flow_rtt_feed.bind if add else self._flow_rtt_feed.unbind)(key)

    def update_control(self, **changes: Any) -> ControlSettings:
        """Validate once, then apply to every UE (ValueError changes nothing)."""
        new = replace(self.control_settings, **changes)
        new.validate()
        self.control_settings = new
        for ue in list(self.ues.values()):
            if ue.control:
                ue.control.update(**changes)
        return new

    # -- feeds --------------------------------------------------------------------------
    def _on_measurement(self, m: RnisMeasurement) -> None:
        """One UE's measurement in one cell (the RNIS view dispatches either message kind)."""
        if m.ue_ipv4 is None:
            return
        now = time.monotonic()
        measured_at = monotonic_ns_from_wall(measured_ns(m)) / 1e9
        for ue in list(self.ues.values()):
            path = ue.paths.get(m.ue_ipv4)
            if path is not None:
                with ue._lock:
                    path.update(m, now, self.radio, measured_at)

    def _on_backlog(self, routing_key: str, body: bytes, headers: dict[str, Any]) -> None:
        try:
            msg = PepBacklog.model_validate_json(body)
        except ValueError:
            log.warning("bad PEP backlog message", routing_key=routing_key)
            return
        ue = self.ues.get(msg.ue)
        if ue is None or ue.control is None:
            return
        now = time.monotonic()
        with ue._lock:
            queue = self._queue(ue, msg.backlog_bytes, msg.unsent_bytes, now)
            self._measure_arrival(ue, msg.received_bytes, now)
            ue.queue_bytes, ue.unsent_bytes = queue, msg.unsent_bytes
        packets = queue / self.settings.packet_bytes
        QUEUE.labels(str(ue.id)).set(packets)
        ue.control.on_queue(packets)

    def _queue(self, ue: Ue, total: float, unsent: float, now: float) -> float:
        """The queue of the research's model: bytes waiting to be served by the paths.

        With a TCP (MPTCP) data plane the PEP pushes bytes into the subflows as fast as
        their windows allow, so most of the waiting bytes sit in the cells' RLC queues, not
        in the PEP: the PEP's unsent bytes plus the UE's RLC queues (RNIS) is that queue,
        without the bytes in flight (docs/path-manager.md, "Queue").
        """
        measure = self.settings.queue_measure
        if measure == "pep_backlog":
            return total
        if measure == "pep_unsent":
            return unsent
        rlc = (p.radio_queue(now, self.radio) for p in ue.paths.values())
        return unsent + sum(q for q in rlc if q is not None)  # unknown/stale: no RLC part

    def _measure_arrival(self, ue: Ue, received: int, now: float) -> None:
        """Arrival rate from the PEP's cumulative received bytes over ARRIVAL_WINDOW.

        A window, not per-message differences: the PEP reads from servers in chunks of up
        to a pipe (1 MiB), so a 2 ms difference is mostly 0 or a burst.
        """
        window = ue.received
        if window and received < window[-1][1]:  # the PEP restarted: a new count
            window.clear()
        window.append((now, received))
        while len(window) > 2 and now - window[1][0] >= ARRIVAL_WINDOW:
            window.popleft()
        (t0, r0) = window[0]
        if now - t0 > 0:
            ue.arrival_pps = (received - r0) / self.settings.packet_bytes / (now - t0)

    # -- plant --------------------------------------------------------------------------
    def _actuate(self, path: IPv4Address, active: bool) -> None:
        if self.actuator is not None:
            self.actuator.set_active(path, active)

    def _on_decision(self, ue: Ue, d: Decision) -> None:
        DECISIONS.labels(str(ue.id), d.trigger.value, d.action.value).inc()
        if d.prediction_ms is not None:
            PREDICTION.observe(d.prediction_ms / 1e3)
        if d.action is not Action.NONE:
            log.info("path change", ue=str(ue.id), action=d.action.value, path=d.path,
                     trigger=d.trigger.value, reason=d.reason)  # fmt: skip


class _UePlant:
    """``Plant`` of one UE: observation from the feeds, changes through the actuator."""

    def __init__(self, manager: PathManager, ue: Ue) -> None:
        self.manager, self.ue = manager, ue

    def observe(self) -> Observation:
        now = time.monotonic()
        s = self.manager.radio
        views = []
        with self.ue._lock:
            for ip, radio in self.ue.paths.items():
                state = radio.model(now, s)
                if state is not None:
                    views.append(PathView(str(ip), state, self.ue.active[ip]))
            queue = self.ue.queue_bytes / self.manager.settings.packet_bytes
            arrival = self.ue.arrival_pps
        return Observation(queue=queue, arrival_rate=arrival, paths=views)

    def change(self, action: Action, path_id: str) -> None:
        ip = IPv4Address(path_id)
        active = action is Action.ADD
        with self.ue._lock:
            self.ue.active[ip] = active
            count = sum(self.ue.active.values())
        self.manager._actuate(ip, active)
        ACTIVE.labels(str(self.ue.id)).set(count)
        assert self.ue.control is not None
        self.ue.control.change_done()  # the netlink call returns once the kernel applied it


def _start_actuator(netns: str | None, health: Health) -> Any:
    """The MPTCP actuator, or None (degraded health, decisions not applied) if not allowed.

    Joining another namespace needs CAP_SYS_ADMIN, the MPTCP path manager commands
    CAP_NET_ADMIN; without them the service still predicts and logs its decisions.
    """
    from path_manager.actuation import MptcpActuator

    try:
        actuator = MptcpActuator(netns, health)
    except PermissionError as exc:
        detail = (
            f"MPTCP actuation not allowed ({exc}): run as root or with CAP_NET_ADMIN "
            "(and CAP_SYS_ADMIN for PM_MPTCP_NETNS); decisions are logged but not applied"
        )
    except OSError as exc:
        detail = f"MPTCP actuation unavailable ({exc}); decisions are logged but not applied"
    else:
        actuator.start()
        return actuator
    log.error("no MPTCP actuation", detail=detail)
    health.set("mptcp", False, detail)
    return None
