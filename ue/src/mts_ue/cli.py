"""``mts-sigma``: register SIGMA on a UE, read its grant feed and counters, unregister.

mts-sigma load [--pin-root /sys/fs/bpf/mts-ue] [--instance default] [--stale-ms 20]
mts-sigma grant UE_IP      # the last grant the modem driver wrote (JSON)
mts-sigma counters UE_IP   # why SIGMA decided or fell back (JSON)
mts-sigma unload
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mec_common.bpf import StructOpsUnavailableError
from mts_ue.sigma import Sigma, ca_names

DEFAULT_PIN_ROOT = Path("/sys/fs/bpf/mts-ue")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mts-sigma", description=__doc__.split("\n")[0])
    parser.add_argument("--pin-root", type=Path, default=DEFAULT_PIN_ROOT)
    parser.add_argument("--instance", default="default")
    sub = parser.add_subparsers(dest="cmd", required=True)
    load = sub.add_parser("load", help="register sigma_reno and sigma_cubic, pin their maps")
    load.add_argument("--stale-ms", type=float, default=20.0, help="a grant older is stale")
    for name in ("grant", "counters"):
        sub.add_parser(name, help=f"print a UE's {name} (JSON)").add_argument("ue")
    sub.add_parser("unload", help="unregister (connections keep SIGMA until they close)")
    args = parser.parse_args(argv)
    pin_dir = args.pin_root / args.instance
    try:
        if args.cmd == "load":
            sigma = Sigma.load(args.pin_root, args.instance)
            sigma.configure(stale_ms=args.stale_ms)
            print(json.dumps({"pin_dir": str(pin_dir), "ops": sigma.names}))
            return 0
        sigma = Sigma(pin_dir, ca_names(args.instance))
        if args.cmd == "unload":
            sigma.close()
            return 0
        value = sigma.read_grant(args.ue) if args.cmd == "grant" else sigma.counters(args.ue)
        sigma.detach()
        print(json.dumps(value.as_dict() if value is not None else None))
        return 0 if value is not None else 1
    except (OSError, StructOpsUnavailableError) as exc:
        print(f"mts-sigma: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
