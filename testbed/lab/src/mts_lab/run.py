"""``make run``: the whole MEC Transport Suite on the emulated RAN, with a live status.

    testbed (LTE 25 PRB, lossy radio, 55 ms RTT)
      └ MEC namespace: MEC platform (Mp1, data plane) ── onboards and starts
                         ├ rnis-adapter  (polls the emulator's FlexRAN API → RabbitMQ)
                         └ pep           (split TCP; MELD in the kernel, fed over AMQP)

The same file is downloaded at the UE three times: end to end (before the PEP exists),
through the PEP with MELD off, and through the PEP with MELD. The result (goodput, MELD's
decisions) is printed and written to ``build/run/`` as JSON and PNG. Everything started is
stopped again, also on Ctrl-C.
The content server and the downloader are ``mts_lab.traffic``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from mts_lab import REPO, traffic
from mts_lab.results import pyplot, save_figure
from mts_testbed import builder
from mts_testbed.netns import stop_processes
from mts_testbed.topology import Topology

SCENARIO = REPO / "testbed/configs/lte-25prb-meld.yaml"
APPDS = REPO / "mec-platform/appds"
DASHBOARD_APPD = REPO / "dashboard/appd.yaml"
OUT = REPO / "build/run"
CONTENT_PORT = 5201
PROGRESS_S = 0.25

PLATFORM_PORT, PEP_PORT, DASHBOARD_PORT = 8100, 8102, 8104


# ---- live status ------------------------------------------------------------------------------


class Status:
    """One line that rewrites itself on a terminal, a line per second elsewhere."""

    def __init__(self) -> None:
        self.tty = sys.stdout.isatty()
        self.last = 0.0

    def step(self, text: str) -> None:
        self.clear()
        print(f"==> {text}", flush=True)

    def live(self, text: str) -> None:
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            print("\r\033[K" + text[:width], end="", flush=True)
        elif time.monotonic() - self.last >= 1.0:
            print("    " + text, flush=True)
            self.last = time.monotonic()

    def clear(self) -> None:
        if self.tty:
            print("\r\033[K", end="", flush=True)


# ---- the system ---------------------------------------------------------------------------------


@dataclass
class Download:
    label: str
    size: int
    timeline: list[tuple[float, int]] = field(default_factory=list)
    meld: dict[str, int] | None = None

    @property
    def seconds(self) -> float:
        return self.timeline[-1][0] if self.timeline else float("nan")

    @property
    def mbps(self) -> float:
        return self.size * 8 / self.seconds / 1e6


class System:
    """The testbed, a RabbitMQ user for the MEC host, the platform and its apps."""

    def __init__(
        self, name: str, scenario: Path, status: Status, rnis_source: str = "flexran"
    ) -> None:
        self.name, self.status = name, status
        self.rnis_source = rnis_source  # flexran or e2: how the RNIS adapter reads the RAN
        self.work = Path(tempfile.mkdtemp(prefix=f"mts-{name}-"))
        self.procs: list[subprocess.Popen[Any]] = []
        self.amqp_user = f"mts-{name}"
        # hex: a token_urlsafe password may start with "-", which rabbitmqctl takes for an option
        self.amqp_password = secrets.token_hex(16)
        self.admin_secret = secrets.token_urlsafe(24)
        self.pep_token = secrets.token_urlsafe(24)
        self.topo: Topology | None = None
        self.admin: httpx.Client | None = None
        self.admin_token = ""
        self.instances: dict[str, str] = {}  # app name -> instance id
        self.scenario = scenario

    # -- bring-up
    def up(self) -> None:
        scenario = self.scenario.relative_to(REPO)
        self.status.step(f"testbed up: {scenario} (namespaces {self.name}-*)")
        self.topo = builder.up(self.scenario, self.name, log=lambda *a, **k: None)
        self.status.step("content server in the server namespace")
        server = self.start_traffic(
            self.topo.server.ns, "serve", str(CONTENT_PORT), stdout=subprocess.PIPE
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        self.status.step(f"RabbitMQ user {self.amqp_user} for the MEC host")
        rabbitmqctl("add_user", self.amqp_user, self.amqp_password)
        rabbitmqctl("set_permissions", "-p", "/", self.amqp_user, ".*", ".*", ".*")

    def start_platform(self) -> None:
        topo = self.require_topo()
        self.status.step("MEC platform in the MEC namespace (Mp1, app LCM, data plane)")
        log = (self.work / "platform.log").open("wb")
        platform = str(REPO / ".venv/bin/mec-platform")
        proc = topo.popen(topo.mec.ns, platform, "serve", env=self.platform_env(), stdout=log,
                          stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self.procs.append(proc)
        url = f"http://{topo.mgmt['mec_peer']}:{PLATFORM_PORT}"
        wait_for(lambda: httpx.get(f"{url}/healthz", timeout=2).status_code == 200,
                 90, "the platform", proc, self.work / "platform.log")  # fmt: skip
        # scrypt verifies the secret: seconds on a loaded machine (httpx's default is 5 s)
        token = httpx.post(f"{url}/oauth2/token", data={"grant_type": "client_credentials"},
                           auth=("admin", self.admin_secret),
                           timeout=30).json()["access_token"]  # fmt: skip
        self.admin_token = token
        self.admin = httpx.Client(base_url=url, timeout=30,
                                  headers={"Authorization": f"Bearer {token}"})  # fmt: skip

    def platform_env(self) -> dict[str, str]:
        """The platform's environment; each app receives only its own part of it (the AppDs
        grant RNIS_*, PEP_*, PM_* with inheritEnv) and PATH."""
        topo = self.require_topo()
        amqp = f"amqp://{self.amqp_user}:{self.amqp_password}@{topo.mgmt['mec_host']}:5672/%2F"
        return {
            **os.environ,
            "PATH": f"{REPO / 'build/bin'}:{REPO / '.venv/bin'}:{os.environ['PATH']}",
            "PLATFORM_HTTP_HOST": "0.0.0.0",
            # links must work from the root namespace as well as from the MEC host's
            "PLATFORM_PUBLIC_URL": f"http://{topo.mgmt['mec_peer']}:{PLATFORM_PORT}",
            "RNIS_PUBLIC_URL": f"http://{topo.mgmt['mec_peer']}:8101",
            "PEP_PUBLIC_URL": f"http://{topo.mgmt['mec_peer']}:{PEP_PORT}",
            "DASHBOARD_PUBLIC_URL": f"http://{topo.mgmt['mec_peer']}:{DASHBOARD_PORT}",
            "PLATFORM_STATE_DIR": str(self.work / "platform"),
            "PLATFORM_ADMIN_CLIENT_SECRET": self.admin_secret,
            "PLATFORM_DATAPLANE": "true",
            "PLATFORM_LOG_LEVEL": "WARNING",
            "RNIS_SOURCE": self.rnis_source,
            "RNIS_FLEXRAN_URL": topo.emulator.url_from_mec,
            "RNIS_FLEXRAN_TOKEN": topo.emulator.token,
            "RNIS_E2_ADDR": topo.emulator.e2_addr_from_mec,
            "RNIS_E2_TOKEN": topo.emulator.token,
            "RNIS_AMQP_URL": amqp,
            "RNIS_STATE_DIR": str(self.work / "rnis"),
            "RNIS_LOG_LEVEL": "WARNING",
            "PEP_AMQP_URL": amqp,
            "PEP_API_TOKENS": self.pep_token,
            "PEP_STATE_DIR": str(self.work / "pep"),
            "PEP_MELD_MODE": "off",
            "PEP_RNIS_UE_NETWORKS": ",".join(f"{p.ip}/32" for ue in topo.ues for p in ue.paths),
            "PEP_LOG_LEVEL": "WARNING",
            "DASHBOARD_STATE_DIR": str(self.work / "dashboard"),
            "DASHBOARD_LOG_LEVEL": "WARNING",
        }

    def instantiate(self, appd: Path) -> str:
        admin = self.require_admin()
        package = check(admin.post("/app_pkgm/v1/app_packages", content=appd.read_bytes(),
                                   headers={"Content-Type": "application/yaml"}))  # fmt: skip
        instance = check(admin.post("/app_lcm/v1/app_instances",
                                    json={"appDId": package["appDId"]}))  # fmt: skip
        self.instances[package["appName"]] = instance["id"]
        op = check(admin.post(f"/app_lcm/v1/app_instances/{instance['id']}/instantiate", json={}))
        deadline = time.monotonic() + 120
        while op["operationState"] not in ("COMPLETED", "FAILED"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{appd.name}: instantiation stuck in {op['operationState']}")
            time.sleep(0.2)
            op = check(admin.get(f"/app_lcm/v1/app_lcm_op_occs/{op['id']}"))
        if op["operationState"] == "FAILED":
            raise RuntimeError(f"{appd.name}: {op.get('error', op)}")
        return str(instance["id"])

    def wait_for_services(self, names: set[str], timeout: float = 90) -> None:
        admin = self.require_admin()

        def registered() -> bool:
            services = check(admin.get("/mec_service_mgmt/v1/services"))
            return names <= {s["serName"] for s in services if s.get("state") == "ACTIVE"}

        wait_for(registered, timeout, f"Mp1 services {sorted(names)}")

    def access(self) -> str:
        """Where the APIs are and how to authenticate (for --keep)."""
        peer = self.require_topo().mgmt["mec_peer"]
        return "\n".join([
            f"    platform (Mp1, app LCM): http://{peer}:{PLATFORM_PORT}/docs"
            f"  admin client secret: {self.admin_secret}",
            f"    RNIS (MEC 012):          http://{peer}:8101/docs  (platform-issued tokens)",
            f"    PEP:                     http://{peer}:{PEP_PORT}/docs  token: {self.pep_token}",
            f"    dashboard:               {self.dashboard_url()}  sign in with a platform token,"
            f" e.g. the admin's (15 min): {self.admin_token}",
            f"      (a new one: curl -s -u admin:{self.admin_secret}"
            f" -d grant_type=client_credentials http://{peer}:{PLATFORM_PORT}/oauth2/token)",
            f"    logs: {self.work}",
        ])  # fmt: skip

    def dashboard_url(self) -> str:
        return f"http://{self.require_topo().mgmt['mec_peer']}:{DASHBOARD_PORT}/"

    # -- the PEP's API (from the root namespace over the management link)
    def pep(self, method: str, path: str, **kw: Any) -> Any:
        url = f"http://{self.require_topo().mgmt['mec_peer']}:{PEP_PORT}/pep/v1{path}"
        headers = {"Authorization": f"Bearer {self.pep_token}"}
        return check(httpx.request(method, url, headers=headers, timeout=10, **kw))

    def ue_ip(self) -> str:
        return self.require_topo().ue(1).paths[0].ip

    def wait_for_radio(self) -> None:
        def fresh() -> bool:
            with contextlib.suppress(httpx.HTTPError, RuntimeError):
                radio = self.pep("GET", f"/ran_aware/ues/{self.ue_ip()}")["radio"]
                return radio is not None and not radio["stale"]
            return False

        wait_for(fresh, 60, "fresh radio state at the PEP (RNIS → AMQP → PEP → kernel)")

    # -- traffic
    def download(self, label: str, size: int, via_pep: bool) -> Download:
        topo = self.require_topo()
        result = Download(label, size)
        before = self.meld_counters() if via_pep else None
        proc = self.start_traffic(topo.ue(1).ns, "fetch", topo.server.addresses["wan0"],
                          str(CONTENT_PORT), str(size), "--progress", str(PROGRESS_S),
                          stdout=subprocess.PIPE)  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            sample = json.loads(line)
            if "t" in sample:  # progress
                result.timeline.append((sample["t"], sample["bytes"]))
                self.status.live(self.progress(result, via_pep))
            elif "fct_s" in sample:  # the end
                result.timeline.append((round(sample["fct_s"], 3), sample["bytes"]))
        if proc.wait() != 0 or not result.timeline or result.timeline[-1][1] != size:
            raise RuntimeError(f"{label}: the download failed")
        if before is not None:
            after = self.meld_counters()
            result.meld = {k: after[k] - before[k] for k in after}
        self.status.clear()
        return result

    def progress(self, d: Download, via_pep: bool) -> str:
        t, got = d.timeline[-1]
        text = f"{d.label:<22} {got / 1e6:6.1f}/{d.size / 1e6:.1f} MB  {got * 8 / max(t, 1e-3) / 1e6:5.1f} Mbit/s  {t:5.1f} s"  # noqa: E501
        if via_pep:
            with contextlib.suppress(httpx.HTTPError, RuntimeError):
                ue = self.pep("GET", f"/ran_aware/ues/{self.ue_ip()}")
                c, radio = ue["counters"], ue["radio"] or {}
                text += (f" | TBS {radio.get('d_tbs_bytes', '-')} B,"
                         f" RLC {radio.get('rlc_queue_bytes', 0) / 1e3:.0f} kB"
                         f" | losses {c['losses']}, MELD kept {c['suppressed']}")  # fmt: skip
        return text

    def meld_counters(self) -> dict[str, int]:
        counters = self.pep("GET", f"/ran_aware/ues/{self.ue_ip()}")["counters"]
        return {k: int(v) for k, v in counters.items()}

    # -- tear-down
    def down(self) -> None:
        """Stop everything in order. The children run in sessions of their own, so a Ctrl-C
        reaches only this process, and a second one does not cut the tear-down short."""
        self.status.clear()
        previous = (
            signal.signal(signal.SIGINT, signal.SIG_IGN),
            signal.signal(signal.SIGTERM, signal.SIG_IGN),
        )
        try:
            self._stop_all()
        finally:
            signal.signal(signal.SIGINT, previous[0])
            signal.signal(signal.SIGTERM, previous[1])

    def _stop_all(self) -> None:
        for app in reversed(list(self.instances)):
            with contextlib.suppress(Exception):
                self.terminate(self.instances[app])
        stop_processes(self.procs, timeout=15)
        with contextlib.suppress(Exception):
            rabbitmqctl("delete_user", self.amqp_user)
        builder.down(self.name, log=lambda *a, **k: None)

    def terminate(self, instance: str) -> None:
        admin = self.require_admin()
        op = check(admin.post(f"/app_lcm/v1/app_instances/{instance}/terminate",
                              json={"terminationType": "GRACEFUL"}))  # fmt: skip
        deadline = time.monotonic() + 30
        while op["operationState"] not in ("COMPLETED", "FAILED") and time.monotonic() < deadline:
            time.sleep(0.2)
            op = check(admin.get(f"/app_lcm/v1/app_lcm_op_occs/{op['id']}"))

    # -- helpers
    def start_traffic(self, ns: str, *args: str, **kw: Any) -> subprocess.Popen[str]:
        """Start ``mts_lab.traffic ARGS`` in namespace ``ns``."""
        topo = self.require_topo()
        proc = topo.popen(ns, *traffic.command(*args), text=True, start_new_session=True, **kw)
        self.procs.append(proc)
        return proc

    def require_topo(self) -> Topology:
        assert self.topo is not None, "the testbed is not up"
        return self.topo

    def require_admin(self) -> httpx.Client:
        assert self.admin is not None, "the platform is not up"
        return self.admin


def check(r: httpx.Response) -> Any:
    """The JSON body of a successful response, else an error with the ProblemDetails."""
    if r.status_code >= 400:
        raise RuntimeError(f"{r.request.method} {r.request.url.path}: {r.status_code} {r.text}")
    return r.json() if r.content else None


def rabbitmqctl(*args: str) -> None:
    proc = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"rabbitmqctl {args[0]}: {proc.stderr.strip() or proc.stdout.strip()}")


def wait_for(
    ready: Callable[[], bool],
    timeout: float,
    what: str,
    proc: subprocess.Popen[Any] | None = None,
    log: Path | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if ready():
                return
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log else ""
            raise RuntimeError(f"{what} exited ({proc.returncode}):\n{tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.3)


# ---- the run ------------------------------------------------------------------------------------


def run(args: argparse.Namespace, status: Status) -> list[Download]:
    system = System(args.name, args.scenario, status, args.rnis_source)
    downloads: list[Download] = []
    try:
        system.up()
        status.step(f"download {args.size / 1e6:.0f} MB end to end (no PEP yet)")
        downloads.append(system.download("end to end", args.size, via_pep=False))
        report_one(downloads[-1])
        system.start_platform()
        for appd in (APPDS / "rnis-adapter.yaml", APPDS / "pep.yaml", DASHBOARD_APPD):
            status.step(f"onboard and instantiate {appd.name} (process backend)")
            system.instantiate(appd)
        system.wait_for_services({"rnis", "pep", "dashboard"})
        print(f"    dashboard: {system.dashboard_url()} (sign in with a platform token)",
              flush=True)  # fmt: skip
        status.step("waiting for the RNIS feed to reach the PEP's kernel program")
        system.wait_for_radio()
        for mode, label in (("off", "PEP, MELD off"), (args.mode, f"PEP + {args.mode.upper()}")):
            system.pep("PUT", "/ran_aware/mode", json={"mode": mode})
            status.step(f"download {args.size / 1e6:.0f} MB through the PEP, MELD mode {mode}")
            downloads.append(system.download(label, args.size, via_pep=True))
            report_one(downloads[-1])
        if args.keep:
            status.step("--keep: the system stays up until Ctrl-C")
            print(system.access(), flush=True)
            signal.pause()
    finally:
        status.step("stopping the apps, the platform and the testbed")
        system.down()
    return downloads


def report_one(d: Download) -> None:
    extra = ""
    if d.meld is not None:
        extra = f"  (losses {d.meld['losses']}, cwnd cut {d.meld['notified']}, kept {d.meld['suppressed']})"  # noqa: E501
    print(f"    {d.label}: {d.mbps:.1f} Mbit/s, {d.seconds:.1f} s{extra}", flush=True)


def write_results(downloads: list[Download], args: argparse.Namespace) -> Path:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    result = {
        "scenario": str(args.scenario.relative_to(REPO)),
        "size_bytes": args.size,
        "rnis_source": args.rnis_source,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg": os.getloadavg(),
        "downloads": [
            {
                "label": d.label,
                "seconds": d.seconds,
                "goodput_mbps": round(d.mbps, 3),
                "meld": d.meld,
                "timeline": d.timeline,
            }
            for d in downloads
        ],
    }
    (out / "result.json").write_text(json.dumps(result, indent=1))
    plot(downloads, out / "result.png", args.scenario.name)
    return out


def plot(downloads: list[Download], path: Path, scenario: str) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    for d in downloads:
        ax.plot([t for t, _ in d.timeline], [b / 1e6 for _, b in d.timeline],
                label=f"{d.label}: {d.mbps:.1f} Mbit/s")  # fmt: skip
    ax.set_xlabel("time (s)")
    ax.set_ylabel("received at the UE (MB)")
    ax.set_title(f"One download at the UE, emulated RAN ({scenario})")
    ax.grid(alpha=0.3)
    ax.legend()
    save_figure(fig, path, dpi=120)


def summary(downloads: list[Download]) -> str:
    base = downloads[0].mbps
    lines = [f"{'download':<22} {'goodput':>12} {'time':>8} {'vs e2e':>8}   MELD decisions"]
    for d in downloads:
        meld = "-"
        if d.meld is not None:
            meld = f"{d.meld['losses']} losses: {d.meld['notified']} cut cwnd, {d.meld['suppressed']} kept"  # noqa: E501
        lines.append(f"{d.label:<22} {d.mbps:>7.1f} Mbit/s {d.seconds:>6.1f} s "
                     f"{d.mbps / base:>7.2f}x   {meld}")  # fmt: skip
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m mts_lab.run",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="Run the whole MEC Transport Suite on the emulated RAN (root): testbed, MEC "
        "platform, RNIS adapter and PEP with MELD; download a file at the UE end to end, "
        "through the PEP, and through the PEP with MELD; print and save the result.",
    )
    parser.add_argument("--scenario", type=Path, default=SCENARIO, help="testbed scenario")
    parser.add_argument("--name", default="run", help="testbed name (namespaces <name>-*)")
    parser.add_argument("--size", type=int, default=10_000_000, help="bytes per download")
    parser.add_argument("--mode", default="meld-de", choices=["meld-de", "meld-me", "rapid"],
                        help="MELD mode of the last download")  # fmt: skip
    parser.add_argument("--out", type=Path, default=OUT, help="result.json and result.png here")
    parser.add_argument("--keep", action="store_true", help="stay up until Ctrl-C")
    parser.add_argument("--rnis-source", default=os.environ.get("RNIS_SOURCE") or "flexran",
                        choices=["flexran", "e2"],
                        help="how the RNIS adapter reads the emulator: its FlexRAN API or its "
                        "mts-e2 stream (docs/e2.md); default: $RNIS_SOURCE")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    args.scenario = args.scenario.resolve()
    signal.signal(signal.SIGTERM, _interrupt)
    status = Status()
    started = time.monotonic()
    try:
        downloads = run(args, status)
    except KeyboardInterrupt:
        print("interrupted; everything was stopped", file=sys.stderr)
        return 130
    except (RuntimeError, builder.TestbedError) as exc:
        print(f"make run failed: {exc}\n(logs: {Path(tempfile.gettempdir())}/mts-{args.name}-*)",
              file=sys.stderr)  # fmt: skip
        return 1
    out = write_results(downloads, args)
    print(f"\n{summary(downloads)}\n\nRNIS source {args.rnis_source}; "
          f"in {time.monotonic() - started:.0f} s; "
          f"{out / 'result.json'}, {out / 'result.png'}")  # fmt: skip
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
