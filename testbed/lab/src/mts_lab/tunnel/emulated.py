"""The multipath tunnel on the emulated multi-cell testbed (``mts_testbed``): one UE attached
to two cells, one tunnel path per cell, the MEC end on the MEC host (docs/tunnel.md).

::

    [<t>-ue1] mptun0 10.92.0.1 ┬ rf0 10.30.0.1 ═ cell 1 ═╗ (emulator in <t>-ran)
                               └ rf1 10.30.1.1 ═ cell 2 ═╩═ 10.20.0.1 [<t>-mec] mptun0 10.92.0.2

Each path's rate and one-way delays (both directions) are the emulator's (radio capacity,
``delay_ms``/``ul_delay_ms``, ``ul_rate_mbps``): this kernel has no netem, and the emulator is
the testbed's delay stage. The emulator's RLC queue stays nearly empty: the tunnel's static
window (research 003: the path's BDP) keeps what is in flight below what the link holds, so
the standing queue forms at the tunnel's ingress, where the research puts FQ-CoDel.
"""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from mts_lab.tunnel.bed import TunnelBed, path_port
from mts_testbed import builder, netns
from mts_testbed.topology import Topology

RLC_LIMIT_BYTES = 1 << 20  # the emulator's default RLC buffer


@dataclass(frozen=True)
class Link:
    """One access network of the research's Mininet topology (its §7 table)."""

    rate_mbit: float  # both directions
    delay_ms: float  # one way, each direction (Mininet's per-direction netem delay)
    cwnd_bytes: int  # the tunnel's static window on it: the research's BDP


def scenario(links: tuple[Link, ...]) -> dict[str, Any]:
    """A testbed scenario: one cell per link, one UE attached to all of them."""
    cells = [{"bs_id": 10001 + i, "prb": 100, "scheduler": "rr"} for i in range(len(links))]
    attachments = [
        {
            "bs_id": 10001 + i,
            "delay_ms": link.delay_ms,
            "ul_delay_ms": link.delay_ms,
            "ul_rate_mbps": link.rate_mbit,
            "queue": {"discipline": "fifo", "limit_bytes": RLC_LIMIT_BYTES},
            "channel": {"model": "fixed", "cqi": 15, "capacity_mbps": link.rate_mbit},
        }
        for i, link in enumerate(links)
    ]
    return {
        "description": "research 003's access networks (tunnel experiment)",
        "cells": cells,
        "ues": [{"count": 1, "cells": attachments}],
    }


class MultiCellTestbed:
    """``testbed up`` with ``scenario(links)`` under a unique name; down on exit."""

    def __init__(self, links: tuple[Link, ...]) -> None:
        self.links = links
        self.name = "tnx" + uuid.uuid4().hex[:6]
        self.topology: Topology | None = None

    def __enter__(self) -> Topology:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            yaml.safe_dump(scenario(self.links), f)
        try:
            self.topology = builder.up(Path(f.name), self.name, log=lambda *_: None)
        finally:
            Path(f.name).unlink()
        return self.topology

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        builder.down(self.name, log=None)


@dataclass
class EmulatedTunnel(TunnelBed):
    """Both tunnel ends on a running testbed: the MEC end on its MEC host, the UE end in its
    first UE; path ``i`` is the UE's bearer on the testbed's cell ``i``."""

    topology: Topology | None = None
    name: str = field(default_factory=lambda: f"tnl{uuid.uuid4().hex[:6]}")

    def _topo(self) -> Topology:
        if self.topology is None:
            raise ValueError("EmulatedTunnel needs a topology")
        return self.topology

    def ns(self, side: str) -> str:
        topo = self._topo()
        return topo.mec.ns if side == "mec" else topo.ues[0].ns

    def make_links(self) -> None:
        """The testbed built them: nothing to add but the tunnel's TUNs."""

    def endpoint(self, path: int, side: str) -> str:
        topo = self._topo()
        host = topo.ues[0].paths[path - 1].ip if side == "ue" else builder.MEC_BH_IP
        return f"{host}:{path_port(path)}"

    def down(self) -> None:
        """Stop the two ends and remove their TUNs; the testbed stays up for the next case."""
        netns.stop_processes(list(self.procs.values()), timeout=5)
        for side in ("ue", "mec"):
            netns.ip("link", "delete", "mptun0", ns=self.ns(side), check=False)
