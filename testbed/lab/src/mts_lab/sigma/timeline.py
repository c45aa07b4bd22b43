"""Where a single upload's round trips go: the sender's TCP_INFO every ~1 ms (issue 15).

    python -m mts_lab.sigma.timeline --out docs/results/sigma [--runs 3] [--one-way-ms 61.6]

SIGMA and CUBIC alternate on one 2-BDP upload, the sink advertising 2 BDP from its first
ACK (``--sink-window-bdp`` of the experiment). Per run: the handshake, when the first
data was sent, when the sender's window from the peer (``snd_wnd``) first exceeded 64 KiB,
how long the sender was limited by it (``rwnd_limited``), when it had sent 1 and 2 BDP,
and the duration; against the line-rate ideal (handshake + 2 BDP at the uplink's rate +
one way). Writes timeline.json and timeline.png (run 1's bytes sent and ``snd_wnd``).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path
from typing import Any

from mec_pep.sockets import tcp_info
from mts_lab.meld.bed import environment, mean_ci95
from mts_lab.results import Results, pyplot, save_results
from mts_lab.sigma.bed import Scale, UplinkBed
from mts_lab.sigma.experiment import MSS, PIN_ROOT
from mts_ue.sigma import Sigma

UNSCALED_MAX = 65535  # bytes: a SYN's window field is never scaled (RFC 7323 §2.2)
FIELDS = ("t_s", "snd_cwnd", "bytes_sent", "bytes_acked", "snd_wnd", "rwnd_limited_us")


def sample_upload(bed: UplinkBed, cc: str, size: int) -> dict[str, Any]:
    """One upload of size bytes, the sender's TCP_INFO sampled until the sink has it all."""
    bed.wait_drained()
    flow = bed.flow(0, bed.sigma.cubic if cc == "sigma" else cc)
    connected = time.monotonic() - flow.start
    sender = threading.Thread(target=flow.send, args=(size,), daemon=True)
    sender.start()
    samples: list[list[float]] = []
    try:
        while flow.end is None:
            if time.monotonic() - flow.start > 60:
                raise TimeoutError(f"{cc}: the upload did not finish")
            i = tcp_info(flow.sock)
            samples.append([time.monotonic() - flow.start, *(i[k] for k in FIELDS[1:])])
            time.sleep(0.001)
    finally:
        sender.join(5)
        flow.close()
    return {"cc": cc, "connect_s": connected, "duration_s": (flow.end or 0) - flow.start,
            "samples": samples}  # fmt: skip


def phases(run: dict[str, Any], bdp: int) -> dict[str, float | None]:
    """The moments of one run (seconds from connect()), from its samples."""
    rows = [dict(zip(FIELDS, s, strict=True)) for s in run["samples"]]

    def first(cond: Any) -> float | None:
        return next((r["t_s"] for r in rows if cond(r)), None)

    return {
        "connect_s": run["connect_s"],
        "first_data_s": first(lambda r: r["bytes_sent"] > 0),
        "window_opened_s": first(lambda r: r["snd_wnd"] > UNSCALED_MAX),
        "rwnd_limited_s": rows[-1]["rwnd_limited_us"] / 1e6 if rows else None,
        "sent_1bdp_s": first(lambda r: r["bytes_sent"] >= bdp),
        "sent_2bdp_s": first(lambda r: r["bytes_sent"] >= 2 * bdp),
        "duration_s": run["duration_s"],
    }


def run(runs: int, scale: Scale) -> Results:
    sigma = Sigma.load(PIN_ROOT, f"t{os.getpid() % 100000}")
    raw: dict[str, list[dict[str, Any]]] = {"sigma": [], "cubic": []}
    start_load = os.getloadavg()
    try:
        bed = UplinkBed(sigma, scale, 1)
        try:
            bed.open_sink_window(int(2 * scale.bdp_bytes / MSS))
            bed.wait_for_feed()
            for i in range(runs):
                for cc in raw:  # interleaved
                    raw[cc].append(sample_upload(bed, cc, 2 * scale.bdp_bytes))
                    print(f"run {i + 1}/{runs} {cc}: {raw[cc][-1]['duration_s']:.3f} s", flush=True)
        finally:
            bed.close()
    finally:
        sigma.close()
    ideal = scale.rtt_s + 2 * scale.bdp_bytes / scale.rate_Bps + scale.rtt_s / 2
    out: Results = {"scale": scale.as_dict(), "ideal_duration_s": round(ideal, 4),
                    "environment_start": {"loadavg": start_load}, "by_cc": {}}  # fmt: skip
    for cc, rs in raw.items():
        ph = [phases(r, scale.bdp_bytes) for r in rs]
        summary: dict[str, Any] = {"runs": ph, "samples_run1": rs[0]["samples"]}
        for key in ("duration_s", "rwnd_limited_s", "window_opened_s"):
            values = [v for p in ph if (v := p[key]) is not None]
            if values:
                mean, half = mean_ci95(values) if len(values) > 1 else (values[0], 0.0)
                summary[key], summary[f"{key}_ci95"] = round(mean, 4), round(half, 4)
        out["by_cc"][cc] = summary
    out["environment"] = environment()
    return out


def table(results: Results) -> str:
    rtt = results["scale"]["one_way_ms"] * 2 / 1000
    ideal = results["ideal_duration_s"]
    lines = [f"ideal {ideal:.3f} s ({ideal / rtt:.2f} RTT)"]
    for cc, s in results["by_cc"].items():
        lines.append(
            f"{cc:>5}: {s['duration_s']:.3f} ± {s['duration_s_ci95']:.3f} s "
            f"({s['duration_s'] / rtt:.2f} RTT), limited by the peer's window "
            f"{s.get('rwnd_limited_s', 0):.3f} s, "
            f"window > 64 KiB at {s.get('window_opened_s', 0):.3f} s"
        )
    return "\n".join(lines)


def plot(results: Results, path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for cc, s in results["by_cc"].items():
        rows = s["samples_run1"]
        t = [r[0] for r in rows]
        ax.plot(t, [r[2] / 1e6 for r in rows], label=f"{cc}: bytes sent")
        ax.plot(t, [r[4] / 1e6 for r in rows], "--", label=f"{cc}: window from the sink")
    ax.axhline(UNSCALED_MAX / 1e6, color="grey", lw=0.8)
    ax.set_xlabel("seconds from connect()")
    ax.set_ylabel("MB")
    ax.set_title("2-BDP upload, run 1: the SYN-ACK's unscaled 64 KiB window holds the first RTT")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.sigma.timeline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=Path("docs/results/sigma"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one-way-ms", type=float, default=61.6,
                        help="61.6: the research's BDP in segments (~833 MSS)")  # fmt: skip
    args = parser.parse_args(argv)
    results = run(args.runs, Scale(one_way_ms=args.one_way_ms))
    save_results(results, args.out, "timeline", plot, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
