"""The live topology of a running testbed, as `testbed up` wrote it.

Other components read it instead of hard-coding addresses:

    topo = Topology.load("mts")
    topo.exec(topo.server.ns, "ping", "-c1", topo.ues[0].paths[0].ip)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mts_testbed.netns import CommandError, ns_exec_argv

RUN_DIR = Path(os.environ.get("TESTBED_RUN_DIR", "/run/mts-testbed"))


class Host(BaseModel):
    """A namespace and its addresses (interface name -> address)."""

    ns: str
    addresses: dict[str, str]


class Emulator(BaseModel):
    url: str  # from the root namespace (management link)
    url_from_mec: str  # from the MEC namespace (RAN backhaul)
    token: str
    e2_addr: str = ""  # host:port of its mts-e2 stream from the root namespace (docs/e2.md)
    e2_addr_from_mec: str = ""  # the same from the MEC namespace
    pid: int
    log: str
    config: str


class CellInfo(BaseModel):
    bs_id: int
    phy_cell_id: int
    cell: str  # "<bs_id>-<phyCellId>", as in RNIS routing keys
    rat: str
    prb: int
    subnet: str


class UEPath(BaseModel):
    """One UE path: its bearer on one cell."""

    bs_id: int
    cell: str
    rnti: int
    ip: str
    ifname: str
    table: int  # policy routing table for traffic from ip


class UE(BaseModel):
    name: str
    index: int
    ns: str
    imsi: str
    paths: list[UEPath]


class Topology(BaseModel):
    name: str
    scenario: str
    server: Host
    mec: Host
    ran: Host
    mgmt: dict[str, str]  # root-side addresses: mec_host, ran_host (and their peers)
    emulator: Emulator
    cells: list[CellInfo]
    ues: list[UE]
    wan_delay_ms: float
    interfaces: dict[str, str]  # role -> interface name (wan_server, wan_mec, backhaul_mec, ...)

    @staticmethod
    def path_for(name: str) -> Path:
        return RUN_DIR / f"{name}.json"

    @classmethod
    def load(cls, name: str = "mts") -> Topology:
        """The running topology called name; FileNotFoundError if it is not up."""
        return cls.model_validate_json(cls.path_for(name).read_text())

    def save(self) -> None:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        path = self.path_for(self.name)
        tmp = path.with_suffix(".tmp")
        # 0600: the file holds the emulator's API token
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.model_dump_json(indent=2))
        tmp.replace(path)

    @property
    def namespaces(self) -> list[str]:
        return [self.server.ns, self.mec.ns, self.ran.ns, *(u.ns for u in self.ues)]

    def ue(self, index: int) -> UE:
        """UE by number (1-based, as in the namespace name)."""
        return next(u for u in self.ues if u.index == index)

    def exec(
        self, ns: str, *cmd: str, check: bool = True, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run cmd inside namespace ns and wait; raises CommandError if check and it fails."""
        self._own(ns)
        proc = subprocess.run(
            ns_exec_argv(ns, cmd), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise CommandError(f"[{ns}] {' '.join(cmd)}: {proc.stderr.strip()}")
        return proc

    def popen(self, ns: str, *cmd: str, **kwargs: Any) -> subprocess.Popen[Any]:
        """Start cmd inside namespace ns (kwargs go to subprocess.Popen)."""
        self._own(ns)
        return subprocess.Popen(ns_exec_argv(ns, cmd), **kwargs)

    def _own(self, ns: str) -> None:
        if ns not in self.namespaces:
            raise ValueError(f"{ns!r} is not a namespace of topology {self.name!r}")
