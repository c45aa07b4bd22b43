"""The observer run as a service: load and attach the BPF program, read its samples, and
publish each flow's RTT on AMQP (``mec_common.bus.flowrtt``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from mec_common.amqp import AmqpPublisher, Backoff
from mec_common.bus.flowrtt import SCHEMA_VERSION
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
        self.publisher: AmqpPublisher | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        s = self.settings
        if not s.interfaces:
            self.health.set("observer", False, "no interfaces configured (FLOWRTT_INTERFACES)")
            return
        # an interface may come later (a deployment's RAN side set up after the service):
        # retried with backoff and shown in /healthz until attached
        if not self._attach():
            self._run("flowrtt-attach", self._attach_with_backoff)

    def _attach_with_backoff(self) -> None:
        backoff = Backoff(first=1.0, cap=30.0)
        while not self._stop.wait(backoff.next_delay()):
            if self._attach():
                return

    def _attach(self) -> bool:
        """Load the observer and attach it to every interface; on success start reading its
        samples (and the feed)."""
        s = self.settings
        try:
            observer = Observer.load(s.bpf_object, s.instance)
        except (OSError, RuntimeError) as exc:
            self.health.set("observer", False, f"cannot load {s.bpf_object}: {exc}")
            log.error("observer not loaded", error=str(exc))
            return False
        try:
            observer.configure(s.delay_cutoff_ms, s.min_gap_pct)
            for ifname in s.interfaces:
                observer.attach(ifname, s.netns)
        except OSError as exc:
            observer.close()
            self.health.set("observer", False, f"cannot attach: {exc}")
            log.error("observer not attached", error=str(exc))
            return False
        if self._stop.is_set():  # closed while attaching
            observer.close()
            return True
        self.observer = observer
        self.health.set("observer", True, f"on {', '.join(s.interfaces)}")
        self._run("flowrtt-poll", self._poll)
        if s.amqp_period_ms > 0:
            self._start_feed()
        return True

    def _run(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _poll(self) -> None:
        assert self.observer is not None
        while not self._stop.wait(self.settings.poll_ms / 1000):
            self.table.add(self.observer.poll())

    def _start_feed(self) -> None:
        """The publisher retries a lost broker with backoff and reports it as ``amqp`` in
        /healthz (not required: the REST API serves without it)."""
        self.health.set("amqp", False, "connecting", required=False)
        self.publisher = AmqpPublisher(
            self.settings.amqp_url,
            self.settings.amqp_exchange,
            health=self.health,
            health_name="amqp",
            name=f"flowrtt-feed-{self.settings.instance}",
        )
        self.publisher.start()
        self._run("flowrtt-feed", self._feed)

    def _feed(self) -> None:
        assert self.publisher is not None
        while not self._stop.wait(self.settings.amqp_period_ms / 1000):
            for summary in self.table.take_updated(time.time_ns()):
                self.publisher.publish(
                    summary.routing_key(), summary.to_json(), {"schema": SCHEMA_VERSION}
                )

    def counters(self) -> dict[str, int]:
        return self.observer.counters() if self.observer is not None else {}

    def close(self) -> None:
        self._stop.set()
        while self._threads:  # the attach thread's own ones included
            self._threads.pop(0).join(timeout=5)
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
        if self.observer is not None:
            self.observer.close()
            self.observer = None
