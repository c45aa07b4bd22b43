"""The PEP service: data plane, interception rules, extensions, backlog feed, Mp1."""

from __future__ import annotations

import importlib
import importlib.util
import resource
import threading
from pathlib import Path
from typing import Any

from mec_common.amqp import AmqpConsumer, AmqpPublisher
from mec_common.bus.flowrtt import bind_all
from mec_common.flow_rtt_view import FlowRttView
from mec_common.health import Health
from mec_common.logging import get_logger
from mec_common.mp1 import MecAppRegistration, Mp1Client
from mec_common.tproxy import TproxyError
from mec_pep.backlog import BacklogFeed
from mec_pep.config import PepSettings
from mec_pep.core import CoreDataPlane, check_core_settings, choose_relay
from mec_pep.dataplane import DataPlane
from mec_pep.flows import FlowTable, Hooks, PepContext, PepExtension, ProxyMode
from mec_pep.policy import AccessPolicy
from mec_pep.transparent import TransparentRules

log = get_logger(__name__)

EXTENSION_MODULE = "mec_pep.ran_aware"
TFO_SYSCTL = Path("/proc/sys/net/ipv4/tcp_fastopen")
TFO_SERVER = 0x2


class PepService:
    """Everything but HTTP; ``mec_pep.api.build_app`` puts the REST API on top."""

    def __init__(
        self, settings: PepSettings, *, extensions: list[PepExtension] | None = None
    ) -> None:
        self.settings = settings
        self.health = Health()
        self.hooks = Hooks()
        self.dataplane: DataPlane | CoreDataPlane
        self.relay, self.relay_reason = choose_relay(settings)  # "uring" or "python", why
        if self.relay == "uring":
            self.dataplane = CoreDataPlane(settings, settings.relay_threads, self.hooks)
            self.flows: FlowTable = self.dataplane.flows
        else:
            self.flows = FlowTable()
            self.dataplane = DataPlane(settings, self.flows, self.hooks, settings.relay_threads)
        self.context = PepContext(settings, self.health, self.flows, self.dataplane)
        self._given_extensions = extensions
        self.transparent: TransparentRules | None = None
        self.publisher: AmqpPublisher | None = None
        self.backlog: BacklogFeed | None = None
        self.flow_rtt: FlowRttView | None = None  # the observer's RTT per flow, if consumed
        self._flow_rtt_feed: AmqpConsumer | None = None
        self.registration: MecAppRegistration | None = None
        self.config_lock = threading.Lock()  # one config change at a time

    @property
    def extensions(self) -> tuple[PepExtension, ...]:
        return self.hooks.extensions

    # ---- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        s = self.settings
        check_congestion_controls(s)
        if s.tlv_port is not None:
            self._enable_tfo_server()
        # Extensions first: descriptors they open (BPF maps) are then valid in the relays.
        self.hooks.extensions = self._load_extensions()
        if s.relay_core == "uring":  # auto has checked the same in choose_relay
            check_core_settings(s)
        log.info("relay chosen", relay=self.relay, reason=self.relay_reason)
        self.dataplane.start()
        threads = self.dataplane.thread_count
        self.health.set(
            "relay", True, f"{self.relay}, {threads} relay threads ({self.relay_reason})"
        )
        if s.transparent_port is not None and s.tproxy_install_rules:
            self.transparent = TransparentRules(s)
            self.transparent.remove_leftovers()
            self._apply_tproxy()
        if s.backlog_interval_ms > 0:
            self.publisher = AmqpPublisher(
                s.amqp_url,
                s.backlog_exchange,
                health=self.health,
                health_name="amqp",
                name="pep-backlog",
            )
            self.health.set("amqp", False, "connecting", required=False)
            self.publisher.start()
            self.backlog = BacklogFeed(self.dataplane, self.publisher, s.backlog_interval_ms / 1e3)
            self.backlog.start()
        if s.flowrtt_exchange:
            self.consume_flow_rtt(s.flowrtt_exchange)

    def consume_flow_rtt(self, exchange: str) -> None:
        """Every flow the MEC host's observer measures (the PEP's flows are among them)."""
        self.flow_rtt = FlowRttView()
        self.health.set("flowrtt_feed", False, "connecting", required=False)
        self._flow_rtt_feed = AmqpConsumer(
            self.settings.amqp_url, exchange, [bind_all()], self.flow_rtt.on_message,
            health=self.health, health_name="flowrtt_feed", name="pep-flowrtt",
        )  # fmt: skip
        self._flow_rtt_feed.start()

    def stop(self) -> None:
        if self.registration is not None:
            self.registration.stop()
        if self.backlog is not None:
            self.backlog.stop()
        if self.publisher is not None:
            self.publisher.close()
        if self._flow_rtt_feed is not None:
            self._flow_rtt_feed.close()
        if self.transparent is not None:
            try:
                self.transparent.remove()
            except TproxyError as exc:
                log.error("could not remove the TPROXY rules", error=str(exc))
        self.dataplane.stop()
        for ext in self.extensions:
            try:
                ext.stop()
            except Exception:
                log.exception("extension stop failed", extension=ext.name)

    def register_with_platform(self, public_url: str, callback_url: str) -> None:
        """With a platform: register the PEP API as a MEC service (runs in the background)."""
        client = Mp1Client.from_settings(self.settings)
        if client is None:
            return
        self.registration = MecAppRegistration(
            client,
            [service_info(public_url)],
            health=self.health,
            termination_callback_url=callback_url,
        )
        self.registration.start()

    def _load_extensions(self) -> list[PepExtension]:
        """The RAN-aware extension if installed and enabled; a broken one is reported, and
        the PEP runs as a plain split-TCP proxy rather than not at all."""
        if self._given_extensions is not None:
            return list(self._given_extensions)
        if not self.settings.ran_aware or importlib.util.find_spec(EXTENSION_MODULE) is None:
            log.info("running without the RAN-aware extension", module=EXTENSION_MODULE)
            return []
        try:
            module = importlib.import_module(EXTENSION_MODULE)
            extension: PepExtension = module.create_extension(self.context)
        except Exception as exc:
            log.exception("RAN-aware extension failed to load; running without it")
            self.health.set("ran_aware", False, f"failed to load: {exc}", required=False)
            return []
        log.info("extension loaded", extension=extension.name)
        return [extension]

    def _enable_tfo_server(self) -> None:
        """TLV clients send their header in the SYN: the kernel must accept SYN data."""
        value = int(TFO_SYSCTL.read_text())
        if value & TFO_SERVER:
            return
        if not self.settings.tfo_sysctl:
            log.warning("TFO server side is off (net.ipv4.tcp_fastopen); TLV costs one RTT")
            return
        try:
            TFO_SYSCTL.write_text(str(value | TFO_SERVER))
            log.info("enabled TFO server side", sysctl=value | TFO_SERVER)
        except OSError as exc:
            log.warning("cannot enable the TFO server side; TLV costs one RTT", error=str(exc))

    def _apply_tproxy(self) -> None:
        assert self.transparent is not None and self.settings.transparent_port is not None
        port = self.dataplane.addresses[ProxyMode.TRANSPARENT][1]
        try:
            setup = self.transparent.apply(port)
        except TproxyError as exc:
            self.health.set("tproxy", False, str(exc))
            raise
        detail = f"table {setup.table}, {len(setup.intercepts)} rule(s)"
        self.health.set("tproxy", True, detail)

    # ---- state --------------------------------------------------------------------------

    def tfo_server_enabled(self) -> bool:
        try:
            return bool(int(TFO_SYSCTL.read_text()) & TFO_SERVER)
        except OSError:
            return False

    def descriptor_limit(self) -> int:
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    # ---- run-time configuration --------------------------------------------------------

    def reconfigure(self, changes: dict[str, Any]) -> None:
        """Apply validated changes (see ``models.ConfigPatch``); all or nothing.

        Raises ``ValidationError`` for invalid values, and ``OSError``/``TproxyError`` when a
        listener or the interception rules cannot follow, ``OSError`` (more flows than its
        table) or ``CoreSettingsError`` (more networks than it takes) when the compiled core
        cannot; the old settings are then restored.
        """
        with self.config_lock:
            current = self.settings
            candidate = PepSettings(**{**current.model_dump(), **changes})
            old = {name: getattr(current, name) for name in changes}
            try:
                self._switch_listeners(candidate, changes)
                for name in changes:
                    setattr(current, name, getattr(candidate, name))
                self._after_change(changes)
            except BaseException:
                for name, value in old.items():
                    setattr(current, name, value)
                self._switch_listeners(current, changes, restoring=True)
                self._after_change(changes)
                raise

    def _switch_listeners(
        self, target: PepSettings, changes: dict[str, Any], *, restoring: bool = False
    ) -> None:
        for mode, name in ((ProxyMode.SOCKS5, "socks5_port"), (ProxyMode.TLV, "tlv_port")):
            if name not in changes:
                continue
            port = getattr(target, name)
            bound = self.dataplane.addresses.get(mode)
            if port is None:
                self.dataplane.unlisten(mode)
            elif bound is None or (port != bound[1] and port != 0) or restoring:
                self.dataplane.listen(mode, port)

    def _after_change(self, changes: dict[str, Any]) -> None:
        s = self.settings
        if {"allowed_clients", "allowed_destinations"} & changes.keys():
            self.dataplane.set_policy(AccessPolicy(s.allowed_clients, s.allowed_destinations))
            if self.transparent is not None:
                self._apply_tproxy()
        if {"ran_rcvbuf", "ran_sndbuf", "force_buffers"} & changes.keys():
            self.dataplane.resize_buffers()
        self.dataplane.set_limits()


def check_congestion_controls(settings: PepSettings) -> None:
    """Fail at start, not per flow, if a configured congestion control is not in the kernel."""
    available = Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    for leg in ("ran", "wan"):
        name = getattr(settings, f"{leg}_congestion_control")
        if name and name not in available:
            raise OSError(f"PEP_{leg.upper()}_CONGESTION_CONTROL={name} is not available "
                          f"(kernel has: {' '.join(available)})")  # fmt: skip


SER_NAME = "pep"


def service_info(public_url: str) -> dict[str, Any]:
    """The PEP API as a MEC service (ETSI MEC 011 ServiceInfo)."""
    api = public_url.rstrip("/") + "/pep/v1"
    return {
        "serName": SER_NAME,
        # CategoryRef.href is a URI (MEC 011): the API's own absolute URL
        "serCategory": {"href": api, "id": "pep", "name": "PEP", "version": "v1"},
        "version": "v1",
        "state": "ACTIVE",
        "transportInfo": {
            "id": "pep-rest",
            "name": "REST",
            "type": "REST_HTTP",
            "protocol": "HTTP",
            "version": "1.1",
            "endpoint": {"uris": [api]},
            "security": {},
        },
        "serializer": "JSON",
        "scopeOfLocality": "MEC_HOST",
        "consumedLocalOnly": True,
        "isLocal": True,
    }
