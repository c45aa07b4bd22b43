"""Reads the services' APIs at a fixed period and keeps what the page shows.

One collector per dashboard, whatever the number of viewers: every ``sample_interval_s``
it reads the RNIS radio measurements, the PEP's flows and MELD/RAPID state and the path
manager, appends to bounded histories, turns MELD's kernel counters into decisions, and
publishes one ``tick`` (JSON, encoded once) that every open page receives over SSE.
Discovery, health checks and the Mp1 service list run every ``slow_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx

from mec_common.logging import get_logger
from mec_common.mp1 import Mp1Client
from mec_dashboard.backends import Backend
from mec_dashboard.config import DashboardSettings

log = get_logger(__name__)

# One radio sample: time (s), CQI, MCS, TBS (B/TTI), PRBs, RLC queue (B), measurement age (ms).
RADIO_COLUMNS = ("t", "cqi", "mcs", "tbs", "prbs", "rlc", "age_ms")
MELD_COUNTERS = ("losses", "notified", "suppressed", "stale", "no_data", "timeouts")
DECISIONS_KEPT = 500


@dataclass
class Decision:
    """MELD/RAPID decisions on one UE's losses between two reads of the kernel counters."""

    seq: int
    t: float
    ue: str
    mode: str
    losses: int
    kept: int
    cut: int
    stale: int
    no_data: int

    def view(self) -> dict[str, Any]:
        return self.__dict__.copy()


class Collector:
    def __init__(self, settings: DashboardSettings, mp1: Mp1Client | None) -> None:
        self.settings, self.mp1 = settings, mp1
        self.http = httpx.AsyncClient(timeout=min(2.0, max(settings.sample_interval_s * 2, 1)))
        self.rnis = Backend("rnis", "rnis", settings.rnis_url, self.http, self._token)
        self.pep = Backend("pep", "pep", settings.pep_url, self.http, self._token)
        self.pm = Backend("path-manager", "path-manager", settings.pm_url, self.http, self._token)
        self.platform = Backend("platform", None, settings.platform_url, self.http, self._token)
        self.backends = [self.platform, self.rnis, self.pep, self.pm]
        history = max(2, round(settings.history_s / settings.sample_interval_s))
        self.radio: dict[str, deque[list[float | None]]] = {}
        self.radio_info: dict[str, dict[str, Any]] = {}
        self.cells: dict[str, dict[str, Any]] = {}
        self.meld: dict[str, dict[str, Any]] = {}
        self.counters: dict[str, dict[str, int]] = {}
        self.decisions: deque[Decision] = deque(maxlen=DECISIONS_KEPT)
        self.flows: list[dict[str, Any]] = []
        self.rapid: dict[str, Any] = {"flows": [], "absent": "not read yet"}
        self.paths: dict[str, Any] = {"ues": [], "absent": "not read yet"}
        self.services: list[dict[str, Any]] = []
        self.pep_state: dict[str, Any] | None = None  # kernel program, global mode, RNIS feed
        self.history_len = history
        self.seq = 0
        self.tick_json = "{}"
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="dashboard-collector")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.http.aclose()

    async def _run(self) -> None:
        next_slow = 0.0
        while True:
            started = time.monotonic()
            try:
                if started >= next_slow:
                    await self.slow_round()
                    next_slow = started + self.settings.slow_interval_s
                await self.fast_round()
            except Exception:  # a bug must not freeze the page: log it, keep the period
                log.exception("collector round failed")
            await self._publish()
            elapsed = time.monotonic() - started
            await asyncio.sleep(max(0.0, self.settings.sample_interval_s - elapsed))

    # ---- rounds ----------------------------------------------------------------------------

    async def slow_round(self) -> None:
        await asyncio.gather(*(b.discover(self.mp1) for b in self.backends))
        await asyncio.gather(*(b.check_health() for b in self.backends))
        self.pep_state = await self.pep.get("/ran_aware/state")
        if self.platform.url is not None:
            found = await self.platform.get("/mec_service_mgmt/v1/services")
            if found is not None:
                self.services = [_service_view(s) for s in found]

    async def fast_round(self) -> None:
        await asyncio.gather(self._read_radio(), self._read_pep(), self._read_paths())

    async def _read_radio(self) -> None:
        body = await self.rnis.get("/queries/ext/ran_meas")
        if body is None:
            return
        now = time.time()
        cells: dict[str, dict[str, Any]] = {}
        for m in body.get("ueMeas", []):
            key = m.get("ue_ipv4") or f"{m.get('cell')}/rnti {m.get('rnti')}"
            age_ms = round(now * 1e3 - m["observed_ns"] / 1e6, 1)
            sample = [round(now, 3), m.get("wb_cqi"), m.get("dl_mcs"), m.get("dl_tbs_bytes"),
                      m.get("dl_prbs"), m.get("rlc_queue_bytes"), age_ms]  # fmt: skip
            self.radio.setdefault(key, deque(maxlen=self.history_len)).append(sample)
            self.radio_info[key] = {
                "cell": m.get("cell"),
                "rnti": m.get("rnti"),
                "imsi": m.get("imsi"),
                "observed_ns": m.get("observed_ns"),
                "harq": m.get("harq_processes"),
                "capacity_bps": m.get("rapid_capacity_bps"),
            }
            cells[m["cell"]] = {
                "prbs": m.get("cell_prbs"),
                "allocated": m.get("cell_allocated_prbs"),
                "usage": m.get("cell_prb_usage"),
                "ues": m.get("cell_ues"),
            }
        self.cells = cells
        for gone in set(self.radio) - {m.get("ue_ipv4") for m in body.get("ueMeas", [])}:
            self.radio_info.get(gone, {})["gone"] = True

    async def _read_pep(self) -> None:
        flows, ues = await asyncio.gather(
            self.pep.get("/flows", limit=500), self.pep.get("/ran_aware/ues")
        )
        if flows is not None:
            self.flows = [_flow_view(f) for f in flows.get("flows", [])]
        if ues is not None:
            now = time.time()
            for ue in ues:
                self._meld_update(now, ue)
        rapid, absent = await self.pep.get_optional("/ran_aware/rapid/flows")
        self.rapid = {"flows": rapid or [], "absent": absent}

    def _meld_update(self, now: float, ue: dict[str, Any]) -> None:
        """Counters since the last read become a decision (kept = suppressed, cut = notified)."""
        address, counters = ue["ue"], {k: int(ue["counters"][k]) for k in MELD_COUNTERS}
        radio = ue.get("radio") or {}
        self.meld[address] = {
            "mode": ue["mode"],
            "flows": ue["flows"],
            "counters": counters,
            "radio_age_ms": radio.get("age_ms"),
            "radio_stale": radio.get("stale"),
            "q_th_bytes": radio.get("q_th_bytes"),
        }
        before = self.counters.get(address)
        self.counters[address] = counters
        if before is None or counters["losses"] < before["losses"]:
            return  # first sight (or the PEP restarted): a baseline, not a decision
        delta = {k: counters[k] - before[k] for k in MELD_COUNTERS}
        if delta["losses"] > 0 or delta["notified"] > 0 or delta["suppressed"] > 0:
            self.seq += 1
            self.decisions.append(Decision(
                seq=self.seq, t=round(now, 3), ue=address, mode=ue["mode"],
                losses=delta["losses"], kept=delta["suppressed"], cut=delta["notified"],
                stale=delta["stale"], no_data=delta["no_data"],
            ))  # fmt: skip

    async def _read_paths(self) -> None:
        if self.pm.url is None:
            self.paths = {"ues": [], "absent": self.pm.state.detail}
            return
        ues = await self.pm.get("/ues")
        if ues is None:
            self.paths = {"ues": [], "absent": self.pm.state.detail}
            return
        views = []
        for ue in ues[:64]:
            paths, decisions = await asyncio.gather(
                self.pm.get(f"/ues/{ue['ue']}/paths"),
                self.pm.get(f"/ues/{ue['ue']}/decisions", limit=20, changes_only="true"),
            )
            views.append({**ue, "path_states": paths or [], "decisions": decisions or []})
        self.paths = {"ues": views, "absent": None}

    # ---- what the page receives -------------------------------------------------------------

    def tick(self) -> dict[str, Any]:
        """The latest state: the newest radio sample per UE, not the histories."""
        return {
            "t": time.time(),
            "backends": {b.name: b.state.view() for b in self.backends},
            "radio": {ue: {"sample": s[-1], **self.radio_info[ue]} for ue, s in self.radio.items()},
            "cells": self.cells,
            "meld": self.meld,
            "decisions": [d.view() for d in list(self.decisions)[-50:]],
            "flows": self.flows,
            "rapid": self.rapid,
            "paths": self.paths,
            "services": self.services,
            "pep_state": self.pep_state,
        }

    def snapshot(self) -> dict[str, Any]:
        """The tick plus every history, sent once when a page connects."""
        return {
            **self.tick(),
            "columns": RADIO_COLUMNS,
            "history_s": self.settings.history_s,
            "interval_s": self.settings.sample_interval_s,
            "radio_history": {ue: list(s) for ue, s in self.radio.items()},
            "decisions": [d.view() for d in self.decisions],
        }

    async def _publish(self) -> None:
        self.tick_json = json.dumps(self.tick(), separators=(",", ":"))
        async with self._changed:
            self._changed.notify_all()

    async def ticks(self) -> AsyncIterator[str]:
        """Each new tick's JSON, as it is published (for one SSE stream)."""
        while True:
            async with self._changed:
                await self._changed.wait()
            yield self.tick_json

    async def _token(self) -> str | None:
        if self.mp1 is None:
            return self.settings.backend_token
        return await asyncio.to_thread(self.mp1.access_token)


def _flow_view(f: dict[str, Any]) -> dict[str, Any]:
    """The columns of the flow table: both legs' cwnd, RTT and bytes, and what is buffered."""

    def leg(state: dict[str, Any] | None) -> dict[str, Any] | None:
        tcp = (state or {}).get("tcp")
        if not tcp:
            return None
        return {
            "cc": tcp["congestion_control"],
            "cwnd": tcp["snd_cwnd"],
            "rtt_ms": tcp["rtt_us"] / 1e3,
            "bytes_sent": tcp["bytes_sent"],
            "bytes_acked": tcp["bytes_acked"],
            "retrans": tcp["total_retrans"],
            "delivery_rate": tcp["delivery_rate"],
        }

    return {
        "id": f["id"],
        "ue": f["ue"],
        "destination": f.get("destination"),
        "stage": f["stage"],
        "age_s": f["age_s"],
        "bytes_to_ue": f["bytes_to_ue"],
        "bytes_from_ue": f["bytes_from_ue"],
        "buffered_toward_ue": f["buffered"]["toward_ue"]["total"],
        "buffered_toward_server": f["buffered"]["toward_server"]["total"],
        "ran": leg(f.get("ran")),
        "wan": leg(f.get("wan")),
    }


def _service_view(s: dict[str, Any]) -> dict[str, Any]:
    uris = s.get("transportInfo", {}).get("endpoint", {}).get("uris") or []
    return {
        "name": s.get("serName"),
        "state": s.get("state"),
        "transport": s.get("transportInfo", {}).get("type"),
        "uri": uris[0] if uris else None,
        "instance": s.get("serInstanceId"),
    }
