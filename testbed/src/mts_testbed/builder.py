"""Build and tear down a testbed topology (namespaces, links, addresses, the emulator)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from mts_testbed import netns
from mts_testbed.netns import ip
from mts_testbed.scenario import Attachment, Scenario
from mts_testbed.topology import (
    RUN_DIR,
    UE,
    CellInfo,
    Emulator,
    Host,
    Topology,
    UEPath,
)

NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,9}$")
REPO = Path(__file__).resolve().parents[3]
DEFAULT_EMULATOR = REPO / "build" / "bin" / "ran-emulator"

# Address plan (docs/development.md)
SERVER_IP, MEC_WAN_IP = "10.10.0.2", "10.10.0.1"
MEC_BH_IP, RAN_BH_IP = "10.20.0.1", "10.20.0.2"
UE_NET = "10.30.0.0/16"
API_PORT = 9999
E2_PORT = 36430  # the emulator's mts-e2 stream (docs/e2.md), same token as its API
DL_TUN = "emu-dl"


class TestbedError(RuntimeError):
    """A topology could not be built or found."""


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise TestbedError(f"topology name {name!r}: want 1-10 of [a-z0-9], starting with a letter")


def ns_names(name: str, n_ues: int) -> dict[str, str]:
    names = {role: f"{name}-{role}" for role in ("server", "mec", "ran")}
    names.update({f"ue{i}": f"{name}-ue{i}" for i in range(1, n_ues + 1)})
    return names


def leftovers(name: str) -> list[str]:
    """Namespaces that belong to topology name (also after a crash)."""
    pattern = re.compile(rf"^{re.escape(name)}-(server|mec|ran|ue\d+)$")
    return [ns for ns in netns.list_namespaces() if pattern.match(ns)]


@contextmanager
def _lock() -> Iterator[None]:
    """Serialize topology changes between concurrent `testbed` runs."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with (RUN_DIR / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _free_mgmt_slot() -> int:
    """A slot i whose management subnets 10.99.2i.0/24 and 10.99.2i+1.0/24 are unused."""
    used = set(re.findall(r"inet 10\.99\.(\d+)\.", ip("-4", "-o", "addr", "show")))
    for i in range(1, 127):
        if str(2 * i) not in used and str(2 * i + 1) not in used:
            return i
    raise TestbedError("no free management subnet in 10.99.0.0/16")


def up(
    scenario_path: Path,
    name: str = "mts",
    emulator_bin: Path = DEFAULT_EMULATOR,
    log: Any = print,
    mec_here: bool = False,
) -> Topology:
    """Build topology name from a scenario file and start the emulator in it.

    mec_here: the current network namespace is the MEC host (e.g. the namespace that the
    containers of docker-compose.yml share) and gets the name <name>-mec; the services in
    it are then on the MEC itself, so there is no management link to it.
    """
    check_name(name)
    scenario = Scenario.load(scenario_path)
    if not emulator_bin.is_file():
        raise TestbedError(f"emulator binary {emulator_bin} not found: run `make build` first")
    with _lock():
        if Topology.path_for(name).exists() or leftovers(name):
            raise TestbedError(f"topology {name!r} exists: `testbed down --name {name}` first")
        slot = _free_mgmt_slot()
        try:
            topo = _build(scenario, scenario_path, name, slot, emulator_bin, log, mec_here)
        except BaseException:
            _teardown(name)
            raise
    return topo


def _build(
    scenario: Scenario,
    path: Path,
    name: str,
    slot: int,
    emulator_bin: Path,
    log: Any,
    mec_here: bool = False,
) -> Topology:
    n_ues = sum(g.count for g in scenario.ues)
    names = ns_names(name, n_ues)
    log(f"testbed {name}: {len(scenario.cells)} cell(s), {n_ues} UE(s), namespaces {name}-*")
    for role, ns in names.items():
        if role == "mec" and mec_here:
            netns.attach_current(ns)
        else:
            netns.add_namespace(ns)
    srv, mec, ran = names["server"], names["mec"], names["ran"]
    mgmt = _mgmt_links(name, slot, mec, ran, mec_here)
    _wan(srv, mec)
    _backhaul(mec, ran)
    ues = _ues(scenario, name, ran)
    # A given token lets other services (the RNIS adapter) poll the emulator's API.
    token = os.environ.get("TESTBED_EMULATOR_TOKEN") or secrets.token_urlsafe(24)
    emu_cfg = _emulator_config(scenario, names, ues)
    cfg_path = RUN_DIR / f"{name}.emulator.json"
    cfg_path.write_text(json.dumps(emu_cfg, indent=2))
    log_path = RUN_DIR / f"{name}.emulator.log"
    pid = _start_emulator(ran, emulator_bin, cfg_path, log_path, token)
    url = f"http://{mgmt['ran_peer']}:{API_PORT}"
    topo = Topology(
        name=name,
        scenario=str(path.resolve()),
        server=Host(ns=srv, addresses={"wan0": SERVER_IP}),
        mec=Host(
            ns=mec, addresses={"wan0": MEC_WAN_IP, "ran0": MEC_BH_IP, "mgmt0": mgmt["mec_peer"]}
        ),
        ran=Host(ns=ran, addresses={"bh0": RAN_BH_IP, "mgmt0": mgmt["ran_peer"]}),
        mgmt=mgmt,
        emulator=Emulator(
            url=url,
            url_from_mec=f"http://{RAN_BH_IP}:{API_PORT}",
            token=token,
            e2_addr=f"{mgmt['ran_peer']}:{E2_PORT}",
            e2_addr_from_mec=f"{RAN_BH_IP}:{E2_PORT}",
            pid=pid,
            log=str(log_path),
            config=str(cfg_path),
        ),
        cells=[
            CellInfo(
                bs_id=c.bs_id,
                phy_cell_id=c.phy_cell_id,
                cell=f"{c.bs_id}-{c.phy_cell_id}",
                rat=c.rat,
                prb=c.prb,
                subnet=f"10.30.{i}.0/24",
            )
            for i, c in enumerate(scenario.cells)
        ],
        ues=ues,
        wan_delay_ms=scenario.wan.delay_ms,
        interfaces={
            "wan_server": "wan0",
            "wan_mec": "wan0",
            "backhaul_mec": "ran0",
            "backhaul_ran": "bh0",
            "mgmt_mec": "mgmt0",
            "mgmt_ran": "mgmt0",
            "mgmt_root_mec": f"{name}-mm",
            "mgmt_root_ran": f"{name}-mr",
            "downlink_tun": DL_TUN,
        },
    )
    _wait_healthy(topo, log_path)
    topo.save()
    log(f"testbed {name}: up; emulator API {url} (token in {Topology.path_for(name)})")
    return topo


def _mgmt_links(name: str, slot: int, mec: str, ran: str, mec_here: bool) -> dict[str, str]:
    """veth pairs root <-> MEC and root <-> RAN (the management network)."""
    out: dict[str, str] = {}
    if mec_here:  # root is the MEC
        out["mec_host"] = out["mec_peer"] = "127.0.0.1"
    for role, ns, octet in (("mec", mec, 2 * slot), ("ran", ran, 2 * slot + 1)):
        if role == "mec" and mec_here:
            continue
        root_if = f"{name}-m{role[0]}"
        ip("link", "add", root_if, "type", "veth", "peer", "name", "mgmt0", "netns", ns)
        ip("addr", "add", f"10.99.{octet}.1/24", "dev", root_if)
        ip("link", "set", root_if, "up")
        ip("addr", "add", f"10.99.{octet}.2/24", "dev", "mgmt0", ns=ns)
        ip("link", "set", "mgmt0", "up", ns=ns)
        out[f"{role}_host"] = f"10.99.{octet}.1"
        out[f"{role}_peer"] = f"10.99.{octet}.2"
    return out


def _tun(ns: str, dev: str) -> None:
    ip("tuntap", "add", "dev", dev, "mode", "tun", ns=ns)
    ip("link", "set", dev, "txqueuelen", "1000", "up", ns=ns)


def _wan(srv: str, mec: str) -> None:
    """Server <-> MEC through the emulator's WAN delay stage (a TUN in each namespace)."""
    for ns, local, peer in ((srv, SERVER_IP, MEC_WAN_IP), (mec, MEC_WAN_IP, SERVER_IP)):
        _tun(ns, "wan0")
        ip("addr", "add", local, "peer", peer, "dev", "wan0", ns=ns)
    ip("route", "add", "default", "dev", "wan0", ns=srv)


def _backhaul(mec: str, ran: str) -> None:
    ip("link", "add", "ran0", "netns", mec, "type", "veth", "peer", "name", "bh0", "netns", ran)
    for ns, dev, addr in ((mec, "ran0", MEC_BH_IP), (ran, "bh0", RAN_BH_IP)):
        ip("addr", "add", f"{addr}/24", "dev", dev, ns=ns)
        ip("link", "set", dev, "up", ns=ns)
    for ns in (mec, ran):
        netns.sysctl(ns, "net.ipv4.ip_forward", "1")
        netns.sysctl(ns, "net.ipv4.conf.all.rp_filter", "0")
    ip("route", "add", UE_NET, "via", RAN_BH_IP, ns=mec)
    ip("route", "add", "default", "via", MEC_BH_IP, ns=ran)
    _tun(ran, DL_TUN)
    ip("route", "add", UE_NET, "dev", DL_TUN, ns=ran)


def _ues(scenario: Scenario, name: str, ran: str) -> list[UE]:
    """One namespace per UE, one TUN per UE per cell with its own address and table."""
    cell_index = {c.bs_id: i for i, c in enumerate(scenario.cells)}
    ues: list[UE] = []
    n = 0
    for group in scenario.ues:
        for _ in range(group.count):
            n += 1
            ns = f"{name}-ue{n}"
            paths = []
            for k, att in enumerate(group.cells):
                c = cell_index[att.bs_id]
                cell = scenario.cells[c]
                path = UEPath(
                    bs_id=att.bs_id,
                    cell=f"{cell.bs_id}-{cell.phy_cell_id}",
                    rnti=17920 + 256 * c + n,
                    ip=f"10.30.{c}.{n}",
                    ifname=f"rf{c}",
                    table=100 + c,
                )
                _tun(ns, path.ifname)
                ip("addr", "add", f"{path.ip}/32", "dev", path.ifname, ns=ns)
                ip("route", "add", "default", "dev", path.ifname, "table", str(path.table), ns=ns)
                ip(
                    "rule",
                    "add",
                    "from",
                    path.ip,
                    "table",
                    str(path.table),
                    "prio",
                    str(1000 + c),
                    ns=ns,
                )
                if k == 0:
                    ip("route", "add", "default", "dev", path.ifname, "src", path.ip, ns=ns)
                paths.append(path)
            ues.append(UE(name=f"ue{n}", index=n, ns=ns, imsi=f"20893{n:010d}", paths=paths))
    return ues


def _emulator_config(scenario: Scenario, names: dict[str, str], ues: list[UE]) -> dict[str, Any]:
    """The emulator's JSON configuration: the scenario plus names and addresses."""
    groups = [g for g in scenario.ues for _ in range(g.count)]
    cfg: dict[str, Any] = {
        "stats_period_ms": scenario.stats_period_ms,
        "seed": scenario.seed,
        "dl_tun": {"netns": "", "name": DL_TUN},
        "cells": [c.model_dump(exclude_none=True) for c in scenario.cells],
        "ues": [],
        "wan": {
            "server_tun": {"netns": f"/run/netns/{names['server']}", "name": "wan0"},
            "mec_tun": {"netns": f"/run/netns/{names['mec']}", "name": "wan0"},
            "delay_ms": scenario.wan.delay_ms,
            "rate_mbps": scenario.wan.rate_mbps,
        },
    }
    uplink_cells = {c.bs_id for c in scenario.cells if c.uplink is not None}
    for ue, group in zip(ues, groups, strict=True):
        bearers = []
        for path, att in zip(ue.paths, group.cells, strict=True):
            ch = att.channel.model_dump(exclude={"trace_file"}, exclude_none=True)
            bearers.append(
                {
                    "bs_id": path.bs_id,
                    "rnti": path.rnti,
                    "ip": path.ip,
                    "tun": {"netns": f"/run/netns/{ue.ns}", "name": path.ifname},
                    "delay_ms": att.delay_ms,
                    "ul_delay_ms": att.ul_delay_ms,
                    "ul_rate_mbps": att.ul_rate_mbps,
                    "phr": att.phr,
                    "queue": att.queue.model_dump(),
                    "channel": ch,
                    **(_uplink_fields(att) if att.bs_id in uplink_cells else {}),
                }
            )
        cfg["ues"].append({"name": ue.name, "imsi": ue.imsi, "bearers": bearers})
    for cell in cfg["cells"]:
        if cell["harq"]["max_retx"] == 0:
            cell["harq"]["max_retx"] = -1  # the emulator reads 0 as "default"
    return cfg


def _uplink_fields(att: Attachment) -> dict[str, Any]:
    """A bearer's uplink-MAC settings (only on a cell with an uplink MAC)."""
    fields: dict[str, Any] = {"ul_buffer_bytes": att.ul_buffer_bytes}
    if att.ul_channel is not None:
        fields["ul_channel"] = att.ul_channel.model_dump(exclude={"trace_file"}, exclude_none=True)
    if att.grant_feed:
        fields["grant_feed"] = att.grant_feed
    return fields


def _start_emulator(ran: str, binary: Path, cfg: Path, log_path: Path, token: str) -> int:
    env = dict(os.environ)
    env.update(
        EMU_API_TOKENS=token,
        EMU_HTTP_HOST="0.0.0.0",
        EMU_HTTP_PORT=str(API_PORT),
        EMU_E2_PORT=str(E2_PORT),
        EMU_LOG_FORMAT="json",
        EMU_STATE_DIR=str(RUN_DIR),
    )
    with log_path.open("w") as out:
        proc = subprocess.Popen(
            # niceness -10: the emulator is the network; experiments' processes must not
            # starve its I/O goroutines (its TTI clock is real-time anyway)
            netns.ns_exec_argv(ran, ["nice", "-n", "-10", str(binary), "-config", str(cfg)]),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # survives the CLI; `testbed down` stops it
        )
    return proc.pid


def _wait_healthy(topo: Topology, log_path: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(topo.emulator.pid):
            raise TestbedError(f"the emulator exited:\n{_tail(log_path)}")
        try:
            r = httpx.get(f"{topo.emulator.url}/healthz", timeout=1.0)
            if r.status_code == 200 and r.json()["checks"]["tti_clock"]["ok"]:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TestbedError(f"the emulator did not become healthy in {timeout} s:\n{_tail(log_path)}")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text().splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def down(name: str = "mts", log: Any = print) -> bool:
    """Remove topology name entirely; idempotent. Returns whether anything was there."""
    check_name(name)
    with _lock():
        return _teardown(name, log)


def _teardown(name: str, log: Any = None) -> bool:
    found = False
    path = Topology.path_for(name)
    if path.exists():
        found = True
        try:
            pid = Topology.load(name).emulator.pid
            if "ran-emulator" in Path(f"/proc/{pid}/cmdline").read_text():
                netns.kill_pids([pid])
        except (FileNotFoundError, ValueError):
            pass
    for ns in leftovers(name):
        found = True
        if netns.is_current(ns):  # up --mec-here: drop the name and our links, keep the rest
            ip("link", "delete", "wan0", check=False)
            ip("netns", "delete", ns, check=False)
        else:
            netns.delete_namespace(ns)  # stops the processes inside, then the links go with it
    for dev in (f"{name}-mm", f"{name}-mr"):
        if Path(f"/sys/class/net/{dev}").exists():
            found = True
            ip("link", "delete", dev, check=False)
    for suffix in (".json", ".emulator.json", ".emulator.log", ".tmp"):
        (RUN_DIR / f"{name}{suffix}").unlink(missing_ok=True)
    if log:
        log(f"testbed {name}: {'removed' if found else 'nothing to remove'}")
    return found


def topologies() -> list[str]:
    """Names of the topologies that are up (or left over after a crash)."""
    names = {p.stem for p in RUN_DIR.glob("*.json") if not p.name.endswith(".emulator.json")}
    for ns in netns.list_namespaces():
        m = re.match(r"^([a-z][a-z0-9]{0,9})-(server|mec|ran|ue\d+)$", ns)
        if m:
            names.add(m.group(1))
    return sorted(names)
