"""``make experiment-meld-live``: goodput direct / through the PEP / PEP + MELD on a RAN you run.

Measures against a testbed that is already up (docs/oai-testbed.md): a live RAN whose UE
sits in network namespace UE_NS behind interface UE_IF, a content server in SERVER_NS,
and the suite's PEP on the UE's path with its REST API at PEP_URL (compose host mode).
Nothing here builds or starts the RAN. Per run, residual loss p is injected at the UE's
ingress (an nftables table of ours in UE_NS dropping each TCP packet arriving on UE_IF
with probability p: a loss on the radio leg, after the eNB), and the UE downloads SIZE
bytes three ways, in rotating order so that load drift hits them alike:

- ``direct``: from the server's port the PEP does not intercept (end-to-end TCP);
- ``pep``: from the intercepted port, MELD off (the RAN leg's plain CUBIC/Reno);
- ``pep+<mode>``: the same with the PEP's global mode set to MODE (meld-de by default).

Recorded per download: goodput at the UE; for the PEP's variants the kernel's loss
verdicts (counter deltas of ``GET /pep/v1/ran_aware/ues/<ue>``: kept = suppressed,
notified, of which stale / no data) and the age of the UE's radio state in the kernel
(5 Hz); with RNIS_METRICS, the report period and TTI the RNIS adapter measured.

    uv run python -m mts_lab.meld.live --ue-ns oai-ue --server-ns oai-srv \\
        --server-ip 10.79.0.2 --ue-ip 10.0.1.2 --env-file .env --out docs/results/meld-live
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from mts_lab import traffic
from mts_lab.meld.bed import environment, mean_ci95, percentile
from mts_lab.results import save_results

LOSS_TABLE = "mts_live_loss"  # the nftables table this experiment owns in UE_NS


def sh(ns: str, *cmd: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True, text=True,
                          capture_output=True, timeout=60, **kw)  # fmt: skip


def set_loss(ns: str, ifname: str, percent: float) -> None:
    """Drop each TCP packet arriving on ``ifname`` with probability ``percent`` / 100."""
    with contextlib.suppress(subprocess.CalledProcessError):
        sh(ns, "nft", "delete", "table", "inet", LOSS_TABLE)
    if percent <= 0:
        return
    per_100k = round(percent * 1000)
    chance = f"numgen random mod 100000 < {per_100k} " if per_100k < 100000 else ""
    rule = f'iifname "{ifname}" meta l4proto tcp {chance}counter drop'
    rules = (
        f"table inet {LOSS_TABLE} {{\n chain ingress {{\n"
        f"  type filter hook input priority -10;\n  {rule}\n }}\n}}\n"
    )
    sh(ns, "nft", "-f", "-", input=rules)


def dropped(ns: str) -> int:
    """Packets the loss rule dropped so far (0 without the table)."""
    try:
        out = sh(ns, "nft", "list", "table", "inet", LOSS_TABLE).stdout
    except subprocess.CalledProcessError:
        return 0
    m = re.search(r"counter packets (\d+)", out)
    return int(m.group(1)) if m else 0


class Pep:
    """The running PEP's RAN-aware API."""

    def __init__(self, url: str, token: str, ue_ip: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=10,
                                   headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        self.ue_ip = ue_ip

    def set_mode(self, mode: str) -> None:
        self.client.put("/pep/v1/ran_aware/mode", json={"mode": mode}).raise_for_status()

    def ue(self) -> dict[str, Any] | None:
        r = self.client.get(f"/pep/v1/ran_aware/ues/{self.ue_ip}")
        if r.status_code == 404:  # the PEP has not seen the UE yet
            return None
        r.raise_for_status()
        return dict(r.json())

    def counters(self) -> dict[str, int]:
        ue = self.ue()
        return dict(ue["counters"]) if ue else {}

    @contextlib.contextmanager
    def radio_ages(self, period: float = 0.2) -> Iterator[list[tuple[float | None, bool]]]:
        """(age ms, stale) of the UE's radio state in the kernel, sampled meanwhile."""
        samples: list[tuple[float | None, bool]] = []
        done = threading.Event()

        def watch() -> None:
            while not done.wait(period):
                with contextlib.suppress(httpx.HTTPError):
                    ue = self.ue()
                    if ue is not None and ue["radio"] is not None:
                        samples.append((ue["radio"]["age_ms"], bool(ue["radio"]["stale"])))

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        try:
            yield samples
        finally:
            done.set()
            t.join()


def rnis_metrics(url: str | None) -> dict[str, float]:
    """The RNIS adapter's measured report period and TTI (seconds), per bs_id."""
    if not url:
        return {}
    found: dict[str, float] = {}
    gauge = re.compile(r'(rnis_report_period_seconds|rnis_tti_seconds)\{bs_id="(\d+)"\} (\S+)')
    with contextlib.suppress(httpx.HTTPError):
        for line in httpx.get(url, timeout=5).text.splitlines():
            m = gauge.match(line)
            if m:
                found[f"{m.group(1)}/{m.group(2)}"] = float(m.group(3))
    return found


def download(args: argparse.Namespace, port: int) -> dict[str, Any]:
    proc = subprocess.run(
        ["ip", "netns", "exec", args.ue_ns,
         *traffic.command("fetch", args.server_ip, str(port), str(args.size))],
        capture_output=True, text=True, timeout=args.timeout, check=True,
    )  # fmt: skip
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["bytes"] != args.size:
        raise RuntimeError(f"got {result['bytes']} of {args.size} bytes")
    return {"fct_s": result["fct_s"], "goodput_mbps": args.size * 8 / result["fct_s"] / 1e6}


def one(args: argparse.Namespace, pep: Pep, variant: str) -> dict[str, Any]:
    if variant == "direct":
        port = args.direct_port
    else:
        port = args.pep_port
        pep.set_mode("off" if variant == "pep" else args.mode)
    time.sleep(1.0)  # the previous download's queues drain
    before, drops = pep.counters(), dropped(args.ue_ns)
    with pep.radio_ages() as ages:
        d = download(args, port)
    after = pep.counters()
    d.update(variant=variant, dropped=dropped(args.ue_ns) - drops,
             verdicts={k: after[k] - before.get(k, 0) for k in after},
             radio=ages, rnis=rnis_metrics(args.rnis_metrics))  # fmt: skip
    return d


def summarize(ds: list[dict[str, Any]]) -> dict[str, Any]:
    mean, ci = mean_ci95([d["goodput_mbps"] for d in ds])
    ages = [a for d in ds for a, _ in d["radio"] if a is not None]
    stale = [s for d in ds for _, s in d["radio"]]
    verdicts = {k: sum(d["verdicts"].get(k, 0) for d in ds) for k in ds[0]["verdicts"]}
    return {
        "goodput_mbps_mean": round(mean, 3), "goodput_mbps_ci95": round(ci, 3),
        "goodput_mbps": [round(d["goodput_mbps"], 3) for d in ds],
        "dropped_packets": sum(d["dropped"] for d in ds), "verdicts": verdicts,
        "radio_age_ms_p50": percentile(ages, 50), "radio_age_ms_p90": percentile(ages, 90),
        "radio_stale_fraction": round(sum(stale) / len(stale), 3) if stale else None,
    }  # fmt: skip


def table(results: dict[str, Any]) -> str:
    lines = ["loss %  variant        goodput Mbit/s (95% CI)  x direct  dropped  "
             "losses kept/notified (stale)  radio age p50/p90 ms  stale"]  # fmt: skip
    for loss, by_variant in results["summary"].items():
        base = by_variant["direct"]["goodput_mbps_mean"]
        for variant, s in by_variant.items():
            v = s["verdicts"]
            verdicts = (f"{v['losses']:>5} {v['suppressed']}/{v['notified']} ({v['stale']})"
                        if v else "")  # fmt: skip
            radio = (f"{s['radio_age_ms_p50']:.0f} / {s['radio_age_ms_p90']:.0f}"
                     if s["radio_stale_fraction"] is not None else "")  # fmt: skip
            lines.append(
                f"{loss:>6}  {variant:<13} {s['goodput_mbps_mean']:>7.2f} ± "
                f"{s['goodput_mbps_ci95']:<5.2f}          {s['goodput_mbps_mean'] / base:>5.2f}  "
                f"{s['dropped_packets']:>7}  {verdicts:<28}  {radio:<20}  "
                f"{s['radio_stale_fraction'] if s['radio_stale_fraction'] is not None else ''}"
            )
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    losses = list(results["summary"])
    variants = list(results["summary"][losses[0]])
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        s = [results["summary"][loss][variant] for loss in losses]
        xs = [x + i * width for x in range(len(losses))]
        means = [v["goodput_mbps_mean"] for v in s]
        cis = [v["goodput_mbps_ci95"] for v in s]
        ax.bar(xs, means, width, yerr=cis, label=variant, capsize=3)
    ax.set_xticks([x + width * (len(variants) - 1) / 2 for x in range(len(losses))])
    ax.set_xticklabels([f"{loss} % loss" for loss in losses])
    ax.set_ylabel("goodput (Mbit/s, mean ± 95 % CI)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def token_from(env_file: Path) -> str:
    for line in env_file.read_text().splitlines():
        if line.startswith("MTS_API_TOKEN="):
            return line.split("=", 1)[1].strip()
    raise SystemExit(f"{env_file}: no MTS_API_TOKEN")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ue-ns", required=True)
    p.add_argument("--ue-if", default="oaitun_ue1", help="the UE's radio-side interface")
    p.add_argument("--ue-ip", required=True)
    p.add_argument("--server-ns", default="", help="recorded only: where the server runs")
    p.add_argument("--server-ip", required=True)
    p.add_argument("--pep-port", type=int, default=5201, help="a port the PEP intercepts")
    p.add_argument("--direct-port", type=int, default=5202, help="a port it does not")
    p.add_argument("--pep-url", default="http://127.0.0.1:8102")
    p.add_argument("--env-file", type=Path, default=Path(".env"), help="for MTS_API_TOKEN")
    p.add_argument("--rnis-metrics", default="http://127.0.0.1:8101/metrics")
    p.add_argument("--mode", default="meld-de", choices=["meld-de", "meld-me", "rapid"])
    p.add_argument("--losses", default="0,0.5,1", help="residual loss in percent")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--size", type=int, default=8_000_000)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--note", default="", help="what the run was on (recorded)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)

    pep = Pep(args.pep_url, token_from(args.env_file), args.ue_ip)
    variants = ["direct", "pep", f"pep+{args.mode}"]
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {}
    load: list[tuple[float, float, float]] = []
    try:
        for loss in [float(x) for x in args.losses.split(",")]:
            set_loss(args.ue_ns, args.ue_if, loss)
            raw[str(loss)] = {v: [] for v in variants}
            for r in range(args.runs):
                order = variants[r % 3 :] + variants[: r % 3]
                for variant in order:
                    load.append(os.getloadavg())
                    d = one(args, pep, variant)
                    raw[str(loss)][variant].append(d)
                    print(f"loss {loss} % run {r + 1}/{args.runs} {variant:<13} "
                          f"{d['goodput_mbps']:6.2f} Mbit/s dropped {d['dropped']} "
                          f"{d['verdicts']}", flush=True)  # fmt: skip
    finally:
        set_loss(args.ue_ns, args.ue_if, 0)
        with contextlib.suppress(httpx.HTTPError):
            pep.set_mode("off")
    results = {
        "setup": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "summary": {loss: {v: summarize(ds) for v, ds in by.items()} for loss, by in raw.items()},
        "load_1min": {"min": min(x[0] for x in load), "max": max(x[0] for x in load)},
        "environment": environment(),
        "runs": raw,
    }
    save_results(results, args.out, "meld-live", plot, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
