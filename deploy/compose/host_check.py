"""Checks before the suite starts in the machine's network namespace (deploy/compose/host.yml).

Fails (exit 1, so `docker compose up` fails and starts nothing else) when:
- a port the suite is about to listen on is taken on MTS_BIND: in host mode a service
  would otherwise restart in a loop with "address already in use";
- MTS_LISTEN / MTS_CONNECT are not MTS_BIND (the services would listen elsewhere);
- RNIS_IP_MAP names a file that does not exist (the RNIS adapter would not start).

Reports (exit 0) how this host forwards the UEs' traffic: IP forwarding, and the FORWARD
policy. Docker sets that policy to DROP when it turns forwarding on itself, so whatever
UE traffic the PEP does not terminate (UDP, ICMP, TCP ports outside PEP_TPROXY_PORTS) and
this host routes is dropped unless a rule accepts it (docs/oai-testbed.md#forwarding).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def parse_ports(spec: str) -> dict[str, tuple[str, int]]:
    """``NAME=ADDRESS:PORT ...`` -> {NAME: (ADDRESS, PORT)}; an empty PORT: that listener is off."""
    ports = {}
    for item in spec.split():
        name, _, address = item.partition("=")
        host, _, port = address.rpartition(":")
        if port:
            ports[name] = (host.strip("[]"), int(port))
    return ports


def taken_ports(ports: dict[str, tuple[str, int]]) -> list[str]:
    taken = []
    for name, (host, port) in ports.items():
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no conflict
            try:
                s.bind((host, port))
                s.listen()
            except OSError as exc:
                taken.append(f"{name}={port} on {host}: {exc.strerror}")
    return taken


def forward_policy() -> str:
    """The FORWARD chain's policy (iptables-nft, as Docker on Debian 12 writes it)."""
    done = subprocess.run(
        ["nft", "list", "chain", "ip", "filter", "FORWARD"],
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if "policy" in line:
            return line.split("policy", 1)[1].strip(" ;")
    return "unknown (no ip filter FORWARD chain in nftables: iptables-legacy or none)"


def docker_user_accepts(chain: str, pool: str) -> bool:
    """Whether the DOCKER-USER chain (``nft list chain ip filter DOCKER-USER``) accepts the
    UE pool both ways, as the two iptables lines of docs/oai-testbed.md#forwarding write it."""
    rules = [line.split() for line in chain.splitlines()]
    return all(
        any(r[:3] == ["ip", way, pool] and r[-1] == "accept" for r in rules)
        for way in ("saddr", "daddr")
    )


def docker_user_chain() -> str:
    return subprocess.run(
        ["nft", "list", "chain", "ip", "filter", "DOCKER-USER"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


def report_forwarding() -> None:
    forwarding = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip() == "1"
    policy = forward_policy()
    print(f"host-check: IPv4 forwarding {'on' if forwarding else 'off'}, FORWARD policy {policy}")
    pools = os.environ.get("PEP_ALLOWED_CLIENTS", "").replace(",", " ").split()
    clients = " ".join(pools) or "<UE pool>"
    if not forwarding:
        print(
            "host-check: WARNING: this host routes no UE traffic (sysctl net.ipv4.ip_forward=1 "
            "if the UEs' traffic to the servers is routed through it)"
        )
    elif (
        policy == "drop"
        and pools
        and all(docker_user_accepts(docker_user_chain(), pool) for pool in pools)
    ):
        print(f"host-check: DOCKER-USER accepts the UE pool ({clients}) both ways")
    elif policy == "drop":
        print(
            "host-check: WARNING: FORWARD drops what no rule accepts: UE traffic the PEP does "
            "not terminate is dropped here. Accept the UE pool before Docker's rules: "
            f"iptables -I DOCKER-USER -s {clients} -j ACCEPT; "
            f"iptables -I DOCKER-USER -d {clients} -j ACCEPT"
        )


def problems() -> list[str]:
    """Everything that would keep the suite from starting here, at once."""
    found = []
    bind = os.environ["MTS_BIND"]
    for var in ("MTS_LISTEN", "MTS_CONNECT"):
        if os.environ.get(var) != bind:
            found.append(f"host mode needs {var}=${{MTS_BIND}} in .env (env.sh ran writes it)")
    ip_map = os.environ.get("RNIS_IP_MAP", "")
    if ip_map and not Path(ip_map).is_file():
        found.append(
            f"RNIS_IP_MAP={ip_map}: no such file (RNIS_IP_MAP_DIR, default deploy/compose/rnis, "
            "is /etc/mts/rnis): copy deploy/compose/rnis/ip-map.example.json to "
            "deploy/compose/rnis/ip-map.json and edit it, or unset RNIS_IP_MAP"
        )
    ports = parse_ports(os.environ["MTS_PORTS"])
    taken = taken_ports(ports)
    if len(taken) == len(ports):
        # Every one taken: this suite already runs (a second `up`, which starts this check
        # again); a stranger holding exactly our ports is not told apart.
        print("host-check: every port of the suite is in use: already running")
    elif taken:
        found += [f"port in use (set another in .env, or stop what holds it): {t}" for t in taken]
    else:
        print("host-check: ports free: " + ", ".join(f"{n}={p}" for n, (_, p) in ports.items()))
    return found


def main() -> None:
    found = problems()
    if found:
        sys.exit("\n".join(f"host-check: {p}" for p in found))
    report_forwarding()


if __name__ == "__main__":
    main()
