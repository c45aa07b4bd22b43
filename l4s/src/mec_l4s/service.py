"""The observer run as a service: load and attach the BPF program, read its samples."""

from __future__ import annotations

import threading

from mec_common.health import Health
from mec_common.logging import get_logger
from mec_l4s.observer import FlowTable, Observer
from mec_l4s.settings import FlowRttSettings

log = get_logger(__name__)


class FlowRttService:
    def __init__(self, settings: FlowRttSettings, health: Health) -> None:
        self.settings = settings
        self.health = health
        self.table = FlowTable(settings.max_flows)
        self.observer: Observer | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        s = self.settings
        if not s.interfaces:
            self.health.set("observer", False, "no interfaces configured (FLOWRTT_INTERFACES)")
            return
        try:
            observer = Observer.load(s.bpf_object, s.instance)
        except (OSError, RuntimeError) as exc:
            self.health.set("observer", False, f"cannot load {s.bpf_object}: {exc}")
            log.error("observer not loaded", error=str(exc))
            return
        try:
            observer.configure(s.delay_cutoff_ms, s.min_gap_pct)
            for ifname in s.interfaces:
                observer.attach(ifname, s.netns)
        except OSError as exc:
            observer.close()
            self.health.set("observer", False, f"cannot attach: {exc}")
            log.error("observer not attached", error=str(exc))
            return
        self.observer = observer
        self.health.set("observer", True, f"on {', '.join(s.interfaces)}")
        self._thread = threading.Thread(target=self._poll, name="flowrtt-poll", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        assert self.observer is not None
        while not self._stop.wait(self.settings.poll_ms / 1000):
            self.table.add(self.observer.poll())

    def counters(self) -> dict[str, int]:
        return self.observer.counters() if self.observer is not None else {}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.observer is not None:
            self.observer.close()
            self.observer = None
