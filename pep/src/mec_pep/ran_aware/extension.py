"""MELD/RAPID as a PEP extension: the hooks, the worker thread, modes, state and metrics."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from mec_common.logging import get_logger
from mec_common.mp1 import Mp1Client
from mec_pep.flows import Flow, PepContext, PepExtension
from mec_pep.ran_aware.feed import RnisFeed
from mec_pep.ran_aware.kernel import (
    CcaMode,
    KernelUnavailableError,
    MeldKernel,
    Tuning,
    UeCounters,
    loader_paths,
)
from mec_pep.ran_aware.radio import full_threshold_bytes
from mec_pep.ran_aware.rapid import RapidAllocator, RapidController
from mec_pep.ran_aware.settings import RanAwareSettings

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastapi import APIRouter

log = get_logger(__name__)

HEALTH_NAME = "meld"


class ModeTable:
    """Global and per-UE modes; the kernel holds a copy it reads at every loss."""

    def __init__(self, global_mode: CcaMode) -> None:
        self.global_mode = global_mode
        self.per_ue: dict[str, CcaMode] = {}
        self.lock = threading.Lock()

    def effective(self, ue: str) -> CcaMode:
        return self.per_ue.get(ue, self.global_mode)

    def uses(self, mode: CcaMode) -> bool:
        """Whether some UE is in ``mode`` (the global one or a UE's own)."""
        with self.lock:
            return self.global_mode is mode or mode in self.per_ue.values()


def instance_name(settings: RanAwareSettings, app_instance_id: str | None) -> str:
    raw = settings.meld_instance or app_instance_id or "default"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", raw)[:64]


def is_ipv4(address: str) -> bool:
    """Dotted-quad IPv4 text (as ``ipaddress`` reads it, in a twentieth of its time: every
    flow's start asks)."""
    try:
        socket.inet_pton(socket.AF_INET, address)
    except (OSError, ValueError):  # not IPv4; a NUL in the text
        return False
    return True


class RanAwareExtension(PepExtension):
    name = "ran_aware"

    def __init__(self, context: PepContext, settings: RanAwareSettings | None = None) -> None:
        self.settings = settings or RanAwareSettings()
        self.context = context
        self.modes = ModeTable(CcaMode.parse(self.settings.meld_mode))
        self.instance = instance_name(self.settings, context.settings.app_instance_id)
        self.kernel: MeldKernel | None = None
        self.kernel_error: str | None = None
        self.feed: RnisFeed | None = None
        self.rapid: RapidController | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()  # stop, or a mode changed: the worker looks again
        self._worker: threading.Thread | None = None
        self._collector = _Collector(self)
        self._load_kernel()
        self.ran_cca = (
            self.kernel.names[f"meld_{self.settings.meld_cca}"]
            if self.kernel
            else self.settings.meld_cca
        )
        self.ran_congestion_control = self.ran_cca
        if self.kernel is not None:
            self._start(self.kernel)
        REGISTRY.register(self._collector)

    # --- start and stop -----------------------------------------------------------------------

    def _load_kernel(self) -> None:
        s = self.settings
        default_loader, default_object = loader_paths()
        try:
            self.kernel = MeldKernel.load(
                s.meld_loader or default_loader,
                s.meld_bpf_object or default_object,
                s.meld_pin_root,
                self.instance,
            )
            self.kernel.configure(self.modes.global_mode, self.tuning())
        except (KernelUnavailableError, OSError) as exc:
            if self.kernel is not None:
                self.kernel.close()
                self.kernel = None
            self.kernel_error = str(exc)
        if self.kernel is None:
            log.warning("MELD/RAPID unavailable; RAN legs use the kernel's own CCA",
                        reason=self.kernel_error, cca=s.meld_cca)  # fmt: skip
            self.context.health.set(HEALTH_NAME, False, self.kernel_error or "", required=False)
        else:
            ops = ", ".join(self.kernel.names.values())
            self.context.health.set(HEALTH_NAME, True, f"registered {ops}", required=False)

    def tuning(self) -> Tuning:
        s = self.settings
        return Tuning(
            stale_ms=s.meld_stale_ms,
            rapid_period_ms=s.rapid_rtt_period_ms,
            rapid_init_cwnd=s.rapid_init_cwnd,
            rapid_min_cwnd=s.rapid_min_cwnd,
            rapid_gain_pct=s.rapid_gain_pct,
            rapid_rtt_extra_us=s.rapid_rtt_extra_us,
        )

    def _start(self, kernel: MeldKernel) -> None:
        s, pep = self.settings, self.context.settings
        explicit = {
            name
            for name, field in (("url", "rnis_amqp_url"), ("exchange", "rnis_exchange"))
            if field in s.model_fields_set
        }
        self.rapid = RapidController(
            RapidAllocator(s.rapid_slow_threshold, s.rapid_alpha),
            self.context,
            kernel,
            lambda ue: self.modes.effective(ue) is CcaMode.RAPID,
            min_tick_s=s.rapid_tick_ms / 1e3,
            in_use=lambda: self.modes.uses(CcaMode.RAPID),
        )
        if s.rnis_cells_by_node and s.node_name not in s.rnis_cells_by_node:
            log.warning("PEP_RNIS_CELLS_BY_NODE has no entry for this node: consuming "
                        "PEP_RNIS_CELLS (empty: every cell)", node=s.node_name)  # fmt: skip
        self.feed = RnisFeed(
            kernel,
            self.context.health,
            amqp_url=s.rnis_amqp_url or pep.amqp_url,
            exchange=s.rnis_exchange,
            explicit=explicit,
            mp1=Mp1Client.from_settings(pep),
            ue_networks=list(s.rnis_ue_networks),
            unbind_after_s=s.rnis_unbind_after_s,
            default_harq=s.meld_harq_processes,
            full_bytes=full_threshold_bytes(s.meld_rlc_buffer_bytes, s.meld_rlc_full_pct),
            on_capacity=self.rapid.set_capacity,
            kind=s.rnis_feed,
            cells=s.feed_cells(),
        )
        self.feed.start()
        self._worker = threading.Thread(target=self._work, name="ran-aware", daemon=True)
        self._worker.start()

    def _work(self) -> None:
        """RAPID's ticks while it drives flows or some UE is in RAPID mode; else it sleeps
        the feed's housekeeping second or until a mode changes (its 200 wake-ups a second
        took 1.2–1.3 % of a core in a PEP with no flows, docs/results.md)."""
        assert self.rapid is not None and self.feed is not None
        tick = self.settings.rapid_tick_ms / 1e3
        next_housekeeping = 0.0
        while True:
            self._wake.clear()
            self._wake.wait(tick if self.rapid.driving() else 1.0)
            if self._stop.is_set():
                return
            now = time.monotonic()
            try:
                self.rapid.tick(now)
                if now >= next_housekeeping:
                    self.feed.housekeeping(now)
                    next_housekeeping = now + 1.0
            except Exception:  # keep the controller alive; the next tick retries
                log.exception("ran-aware worker tick failed")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._worker is not None:
            self._worker.join(5)
        if self.feed is not None:
            self.feed.stop()
        if self.kernel is not None:
            self.kernel.close()
        with contextlib.suppress(KeyError):  # already unregistered
            REGISTRY.unregister(self._collector)

    # --- flow hooks ---------------------------------------------------------------------------

    def on_ran_leg_ready(self, flow: Flow) -> None:
        # The RAN leg's congestion control is ran_cca: the relay set it at accept
        # (ran_congestion_control); no socket is touched here (the core copies none then).
        if self.feed is not None and is_ipv4(flow.ue):
            self.feed.flow_opened(flow.ue)
            flow.ext = flow.ext if flow.ext is not None else {}
            flow.ext[self.name] = {"ran_leg_cca": self.ran_cca}

    def on_flow_established(self, flow: Flow) -> None:
        if self.rapid is not None and flow.ext and flow.ext.get(self.name):
            self.rapid.flow_established(flow, time.monotonic())

    def on_flow_closed(self, flow: Flow) -> None:
        if not (flow.ext and flow.ext.get(self.name)):
            return
        if self.feed is not None:
            self.feed.flow_closed(flow.ue)
        if self.rapid is not None:
            self.rapid.forget(flow)

    def router(self) -> APIRouter | None:
        from mec_pep.ran_aware.api import build_router

        return build_router(self)

    # --- modes --------------------------------------------------------------------------------

    def require_kernel(self) -> MeldKernel:
        if self.kernel is None:
            raise KernelUnavailableError(self.kernel_error or "not loaded")
        return self.kernel

    def set_global_mode(self, mode: CcaMode) -> None:
        kernel = self.require_kernel()
        with self.modes.lock:
            kernel.set_global_mode(mode)
            self.modes.global_mode = mode
        self._wake.set()
        log.info("global mode changed", mode=mode.label)

    def set_ue_mode(self, ue: str, mode: CcaMode | None) -> None:
        kernel = self.require_kernel()
        with self.modes.lock:
            kernel.set_ue_mode(ue, mode)
            if mode is None:
                self.modes.per_ue.pop(ue, None)
            else:
                self.modes.per_ue[ue] = mode
        self._wake.set()
        log.info("UE mode changed", ue=ue, mode=mode.label if mode else "global")

    # --- state --------------------------------------------------------------------------------

    def known_ues(self) -> list[str]:
        ues = set(self.context.flows.ues()) | set(self.modes.per_ue)
        if self.kernel is not None:
            ues |= set(self.kernel.radio_ues()) | set(self.kernel.all_counters())
        return sorted((u for u in ues if is_ipv4(u)), key=ipaddress.IPv4Address)

    def ue_state(self, ue: str) -> dict[str, Any]:
        kernel = self.require_kernel()
        radio = kernel.radio(ue)
        counters = kernel.counters(ue) or UeCounters()
        age_ms = (time.monotonic_ns() - radio.observed_ns) / 1e6 if radio else None
        return {
            "ue": ue,
            "mode": self.modes.effective(ue).label,
            "mode_source": "ue" if ue in self.modes.per_ue else "global",
            "flows": self.context.flows.count_for(ue),
            "radio": None
            if radio is None
            else {
                "age_ms": round(age_ms, 3) if age_ms is not None else None,
                "stale": age_ms is None or age_ms > self.settings.meld_stale_ms,
                "d_tbs_bytes": radio.d_tbs,
                "rlc_queue_bytes": radio.txq_bytes,
                "q_th_bytes": radio.q_th_bytes,
                "full_bytes": radio.full_bytes,
                "harq_processes": radio.n_harq,
                "capacity_bps": radio.capacity_Bps * 8,
            },
            "counters": counters.as_dict(),
        }

    def state(self) -> dict[str, Any]:
        feed = self.feed
        return {
            "kernel": {
                "loaded": self.kernel is not None,
                "reason": self.kernel_error,
                "congestion_controls": dict(self.kernel.names) if self.kernel else {},
                "pin_dir": str(self.kernel.pin_dir) if self.kernel else None,
            },
            "ran_leg_cca": self.ran_cca,
            "global_mode": self.modes.global_mode.label,
            "ue_modes": {ue: m.label for ue, m in sorted(self.modes.per_ue.items())},
            "stale_ms": self.settings.meld_stale_ms,
            "rnis": None
            if feed is None
            else {
                "broker": feed.endpoint.public_url() if feed.endpoint else None,
                "exchange": feed.endpoint.exchange if feed.endpoint else None,
                "source": feed.endpoint.source if feed.endpoint else None,
                "node": self.settings.node_name,
                "cells": feed.cells or None,
                "bindings": feed.bindings(),
                "received": feed.stats.received,
                "applied": feed.stats.applied,
                "ignored": feed.stats.ignored,
                "rejected": feed.stats.rejected,
            },
        }


class _Collector(Collector):
    """Prometheus metrics read live from the kernel maps at scrape time."""

    def __init__(self, ext: RanAwareExtension) -> None:
        self._ext = ext

    def collect(self) -> Iterator[Any]:
        ext = self._ext
        yield GaugeMetricFamily(
            "pep_meld_kernel_loaded",
            "1 if the MELD/RAPID congestion control is registered",
            value=1 if ext.kernel else 0,
        )
        if ext.kernel is None:
            return
        per_ue = ext.kernel.all_counters()
        for field, doc in (
            ("losses", "loss events on the RAN leg (one per recovery episode or RTO)"),
            ("notified", "loss events passed to the growth function (cwnd reduced)"),
            ("suppressed", "loss events MELD/RAPID kept from the growth function"),
            ("stale", "loss events notified because the radio state was stale"),
            ("no_data", "loss events notified because there was no radio state"),
            ("timeouts", "retransmission timeouts among the loss events"),
            ("repaired", "loss events whose impossible ssthresh (> 2^31 - 1) was reset"),
            ("unlogged", "loss events the kernel's decision log had no room for"),
        ):
            family = CounterMetricFamily(f"pep_meld_{field}", doc, labels=["ue"])
            for ue, c in per_ue.items():
                family.add_metric([ue], getattr(c, field))
            yield family
        if ext.feed is not None:
            stats = ext.feed.stats
            family = CounterMetricFamily(
                "pep_meld_rnis_messages", "RNIS messages by outcome", labels=["outcome"]
            )
            for outcome in ("applied", "ignored", "rejected"):
                family.add_metric([outcome], getattr(stats, outcome))
            yield family
        if ext.rapid is not None:
            windows = GaugeMetricFamily(
                "pep_rapid_window_bytes", "RAPID receive window per flow", labels=["flow", "ue"]
            )
            for f in ext.rapid.snapshot():
                if f["window_bytes"] is not None:
                    windows.add_metric([str(f["flow_id"]), f["ue"]], f["window_bytes"])
            yield windows
