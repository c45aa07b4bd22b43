"""`testbed`: bring the emulated RAN testbed up or down, and show its state.

testbed up --config testbed/configs/lte-25prb-meld.yaml [--name mts]
testbed status [--name mts] [--json]
testbed down [--name mts]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import httpx

from mts_testbed import builder
from mts_testbed.topology import Topology


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="testbed", description="Emulated RAN testbed: namespaces, links and the RAN emulator."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="build a topology from a scenario and start the emulator")
    p_up.add_argument("--config", required=True, type=Path, help="scenario YAML (testbed/configs/)")
    p_up.add_argument(
        "--name", default="mts", help="topology name (namespaces <name>-*), default mts"
    )
    p_up.add_argument(
        "--emulator", type=Path, default=builder.DEFAULT_EMULATOR, help="ran-emulator binary"
    )
    p_up.add_argument(
        "--mec-here",
        action="store_true",
        help="the current network namespace is the MEC host (named <name>-mec), e.g. the one "
        "the containers of docker-compose.yml share; default: a new namespace",
    )
    p_down = sub.add_parser("down", help="remove a topology (idempotent, also after a crash)")
    p_down.add_argument("--name", default="mts")
    p_status = sub.add_parser("status", help="list topologies, or show one with live counters")
    p_status.add_argument("--name", help="show this topology in detail")
    p_status.add_argument("--json", action="store_true", help="machine-readable output")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            builder.up(args.config, args.name, args.emulator, mec_here=args.mec_here)
        elif args.command == "down":
            builder.down(args.name)
        else:
            return status(args.name, args.json)
    except (builder.TestbedError, ValueError, OSError) as e:
        print(f"testbed: {e}", file=sys.stderr)
        return 1
    return 0


def status(name: str | None, as_json: bool) -> int:
    if name is None:
        names = builder.topologies()
        if as_json:
            print(json.dumps(names))
        else:
            print("\n".join(names) if names else "no topology is up")
        return 0
    try:
        topo = Topology.load(name)
    except FileNotFoundError:
        left = builder.leftovers(name)
        print(f"topology {name!r} is not up" + (f"; leftovers: {left}" if left else ""))
        return 1
    headers = {"Authorization": f"Bearer {topo.emulator.token}"}
    try:
        bearers = httpx.get(
            f"{topo.emulator.url}/emulator/v1/bearers", headers=headers, timeout=2
        ).json()
        timing = httpx.get(
            f"{topo.emulator.url}/emulator/v1/timing", headers=headers, timeout=2
        ).json()
    except httpx.HTTPError as e:
        print(f"topology {name}: emulator not reachable at {topo.emulator.url}: {e}")
        return 1
    if as_json:
        print(
            json.dumps(
                {
                    "topology": topo.model_dump(exclude={"emulator": {"token"}}),
                    "bearers": bearers,
                    "timing": timing,
                },
                indent=2,
            )
        )
        return 0
    print(f"topology {name}: {topo.scenario}")
    print(
        f"  emulator {topo.emulator.url} pid {topo.emulator.pid}; TTI lateness p50 "
        f"{timing['lateness_p50_us']} µs, p99 {timing['lateness_p99_us']} µs"
    )
    print(
        f"  {'ue':6} {'cell':9} {'ip':12} {'cqi':>3} {'queue B':>9} {'deliv MB':>9} "
        f"{'q-drop':>7} {'aqm':>6} {'harq-fail':>9} {'lost':>6}"
    )
    for b in bearers:
        c = b["counters"]
        print(
            f"  {b['ue']:6} {b['bs_id']:<9} {b['ip']:12} {b['channel']['cqi']:>3} "
            f"{b['queue_bytes']:>9} {c['dl_delivered_bytes'] / 1e6:>9.2f} "
            f"{c['dl_queue_drop_pkts']:>7} {c['dl_aqm_drop_pkts']:>6} {c['harq_failures']:>9} "
            f"{c['dl_residual_lost_pkts'] + c['dl_channel_loss_pkts']:>6}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
