"""The RNIS consumer on the real RabbitMQ: bindings per served UE, map updates, bad input."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from mec_common.amqp import AmqpPublisher
from mec_common.bus.rnis import (
    RnisCellMeasurements,
    RnisCellUe,
    RnisEvent,
    RnisMeasurement,
    bind_all,
    bind_cell_batch,
    bind_ue_ip,
)
from mec_common.health import Health
from mec_common.mp1 import with_credentials
from mec_pep.ran_aware.feed import Endpoint, RnisFeed
from mec_pep.ran_aware.kernel import MeldKernel
from mec_pep.ran_aware.settings import RanAwareSettings

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def measurement(ue: str, **fields: object) -> RnisMeasurement:
    base: dict[str, object] = {
        "cell": "10000-0", "bs_id": 10000, "rnti": 17921, "ue_ipv4": ue,
        "radio_tbs_bytes": 1234, "rlc_queue_bytes": 100, "harq_processes": 8,
        "best_cqi_tbs_bytes": 2292, "rapid_capacity_bps": 16_000_000,
        "observed_ns": time.time_ns(), "cell_ues": 1,
    }  # fmt: skip
    base.update(fields)
    return RnisMeasurement.model_validate(base)


@pytest.fixture
def broker(unique: Callable[[str], str]) -> Iterator[tuple[str, AmqpPublisher]]:
    exchange = unique("rnis-test")
    publisher = AmqpPublisher(AMQP_URL, exchange, name=unique("feed-test-pub"))
    publisher.start()
    wait_for(publisher.connected.is_set, what="the test publisher to connect")
    try:
        yield exchange, publisher
    finally:
        publisher.close()


def make_feed(kernel: MeldKernel, exchange: str, health: Health, **kw: object) -> RnisFeed:
    options: dict[str, object] = {
        "amqp_url": AMQP_URL, "exchange": exchange, "explicit": {"url", "exchange"},
        "mp1": None, "ue_networks": [], "unbind_after_s": 0.0, "default_harq": 8,
        "full_bytes": 108_000,
    }  # fmt: skip
    options.update(kw)
    return RnisFeed(kernel, health, **options)  # type: ignore[arg-type]


def publish(publisher: AmqpPublisher, m: RnisMeasurement) -> None:
    publisher.publish(m.routing_key(), m.model_dump_json().encode(), {"schema": 1})


def test_served_ue_updates_the_kernel(kernel: MeldKernel, broker) -> None:  # type: ignore[no-untyped-def]
    exchange, publisher = broker
    health = Health()
    feed = make_feed(kernel, exchange, health)
    served, other = "10.30.9.1", "10.30.9.2"
    feed.flow_opened(served)
    feed.start()
    try:
        wait_for(lambda: feed.endpoint is not None and health.report()["checks"]["rnis"]["ok"],
                 what="the feed to connect")  # fmt: skip
        assert bind_ue_ip(served) in feed.bindings()
        assert not any("10_30_9_2" in key for key in feed.bindings())
        assert not health.report()["checks"]["rnis"]["required"]

        def delivered() -> bool:  # bindings are asynchronous: publish until one lands
            publish(publisher, measurement(served, radio_tbs_bytes=1111))
            publish(publisher, measurement(other, radio_tbs_bytes=2222))
            r = kernel.radio(served)
            return r is not None and r.d_tbs == 1111

        wait_for(delivered, what="a measurement in the kernel map")
        r = kernel.radio(served)
        assert r is not None and r.q_th_bytes == 2292 * 8 and r.capacity_Bps == 2_000_000
        assert r.full_bytes == 108_000  # the deployment's RLC buffer, for MELD-overflow
        assert kernel.window(served, 0, 2**63).buckets >= 1  # and its history
        assert kernel.radio(other) is None  # not a UE of ours

        publisher.publish("rnis.v1.meas.10000-0.-.10_30_9_1", b"{not json", {})
        wait_for(lambda: feed.stats.rejected >= 1, what="the bad message to be rejected")
        assert kernel.radio(served) is not None

        detach = RnisEvent(event="detach", cell="10000-0", bs_id=10000, rnti=17921,
                           ue_ipv4=served, time_ns=time.time_ns())  # type: ignore[arg-type]  # fmt: skip
        publisher.publish(detach.routing_key(), detach.model_dump_json().encode(), {})
        wait_for(lambda: kernel.radio(served) is None, what="detach to forget the UE")
        assert kernel.window(served, 0, 2**63).buckets == 0
    finally:
        feed.stop()


def test_bindings_follow_flows(kernel: MeldKernel, broker) -> None:  # type: ignore[no-untyped-def]
    exchange, _ = broker
    feed = make_feed(kernel, exchange, Health(), unbind_after_s=5.0)
    feed.start()
    ue = "10.30.9.3"
    try:
        wait_for(lambda: feed.endpoint is not None, what="the feed to connect")
        feed.flow_opened(ue)
        feed.flow_opened(ue)
        assert bind_ue_ip(ue) in feed.bindings()
        feed.flow_closed(ue)
        feed.flow_closed(ue)
        feed.housekeeping(time.monotonic())  # closed just now: still bound
        assert bind_ue_ip(ue) in feed.bindings()
        feed.housekeeping(time.monotonic() + 6)
        assert bind_ue_ip(ue) not in feed.bindings()
    finally:
        feed.stop()


def test_configured_networks_are_bound_at_start(kernel: MeldKernel, broker) -> None:  # type: ignore[no-untyped-def]
    import ipaddress

    exchange, _ = broker
    feed = make_feed(kernel, exchange, Health(),
                     ue_networks=[ipaddress.IPv4Network("10.30.8.0/30")])  # fmt: skip
    assert feed.bindings() == sorted(
        key for ip in ("10.30.8.0", "10.30.8.1", "10.30.8.2", "10.30.8.3")
        for key in (bind_ue_ip(ip), bind_ue_ip(ip, "event"))
    )  # fmt: skip
    with pytest.raises(ValueError, match="more than"):
        make_feed(kernel, exchange, Health(), ue_networks=[ipaddress.IPv4Network("10.0.0.0/8")])


def test_discovered_broker_gets_our_credentials() -> None:
    url = with_credentials("amqp://10.99.1.1:5672/%2F", "amqp://pep:secret@127.0.0.1/%2F")
    assert url == "amqp://pep:secret@10.99.1.1:5672/%2F"
    assert Endpoint(url, "rnis", "mp1").public_url() == "amqp://10.99.1.1:5672/%2F"


def test_cell_messages_update_the_served_ues(kernel: MeldKernel, broker) -> None:  # type: ignore[no-untyped-def]
    """PEP_RNIS_FEED=cell: one binding for every cell's batch; only served UEs reach the map."""
    exchange, publisher = broker
    feed = make_feed(kernel, exchange, Health(), kind="cell")
    served, other = "10.30.9.5", "10.30.9.6"
    feed.flow_opened(served)
    assert feed.bindings() == sorted([bind_all("cell"), bind_ue_ip(served, "event")])
    feed.start()
    try:
        wait_for(lambda: feed.endpoint is not None, what="the feed to connect")
        cell = RnisCellMeasurements(
            cell="10000-0", bs_id=10000, observed_ns=time.time_ns(), cell_ues=2,
            ues=[RnisCellUe(rnti=17921, ue_ipv4=served, radio_tbs_bytes=777,  # type: ignore[arg-type]
                            best_cqi_tbs_bytes=2292, harq_processes=8),
                 RnisCellUe(rnti=17922, ue_ipv4=other, radio_tbs_bytes=888)],  # type: ignore[arg-type]
        )  # fmt: skip

        def delivered() -> bool:
            publisher.publish(cell.routing_key(), cell.model_dump_json().encode(), {})
            r = kernel.radio(served)
            return r is not None and r.d_tbs == 777

        wait_for(delivered, what="the served UE's part of a cell message in the kernel map")
        assert kernel.radio(other) is None
        publisher.publish(cell.routing_key(), b'{"ues": 3}', {})
        wait_for(lambda: feed.stats.rejected >= 1, what="the bad cell message to be rejected")
    finally:
        feed.stop()
        kernel.forget_radio(served)


def test_a_node_consumes_the_batches_of_its_cells_only(kernel: MeldKernel, broker) -> None:  # type: ignore[no-untyped-def]
    """Two MEC-host nodes: the PEP of one binds its own cells' batches (PEP_RNIS_CELLS or
    its node's entry of PEP_RNIS_CELLS_BY_NODE), so another node's cells never reach it."""
    exchange, publisher = broker
    feed = make_feed(kernel, exchange, Health(), kind="cell", cells=["10000-1", "10001-0"])
    served = "10.30.9.7"
    feed.flow_opened(served)
    assert feed.bindings() == sorted([bind_cell_batch("10000-1"), bind_cell_batch("10001-0"),
                                      bind_ue_ip(served, "event")])  # fmt: skip
    feed.start()

    def batch(cell: str, bs_id: int, tbs: int) -> RnisCellMeasurements:
        return RnisCellMeasurements(
            cell=cell, bs_id=bs_id, observed_ns=time.time_ns(), cell_ues=1,
            ues=[RnisCellUe(rnti=17921, ue_ipv4=served, radio_tbs_bytes=tbs)],  # type: ignore[arg-type]
        )  # fmt: skip

    try:
        wait_for(lambda: feed.endpoint is not None, what="the feed to connect")
        other, own = batch("10000-0", 10000, 555), batch("10000-1", 10000, 666)

        def delivered() -> bool:
            publisher.publish(own.routing_key(), own.model_dump_json().encode(), {})
            r = kernel.radio(served)
            return r is not None and r.d_tbs == 666

        wait_for(delivered, what="the batch of the node's cell in the kernel map")
        # The other node's cell last (one queue is FIFO): routed here, it would overwrite.
        for _ in range(5):
            publisher.publish(other.routing_key(), other.model_dump_json().encode(), {})
        time.sleep(0.5)
        assert kernel.radio(served).d_tbs == 666  # type: ignore[union-attr]
    finally:
        feed.stop()
        kernel.forget_radio(served)


def test_the_cells_of_a_node_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEP_RNIS_FEED", "cell")
    monkeypatch.setenv(
        "PEP_RNIS_CELLS_BY_NODE", '{"mec-a": ["10000-0"], "mec-b": ["10000-1", "10001-0"]}'
    )
    monkeypatch.setenv("PEP_NODE_NAME", "mec-b")
    assert RanAwareSettings().feed_cells() == ["10000-1", "10001-0"]
    monkeypatch.setenv("PEP_NODE_NAME", "mec-c")  # no entry: PEP_RNIS_CELLS (empty: every cell)
    assert RanAwareSettings().feed_cells() == []
    monkeypatch.setenv("PEP_RNIS_CELLS", "10002-0,10002-1")
    assert RanAwareSettings().feed_cells() == ["10002-0", "10002-1"]
    # Bad input: a cell that cannot be a routing key word; cells with the per-UE feed.
    monkeypatch.setenv("PEP_RNIS_CELLS", "10002-*")
    with pytest.raises(ValueError, match="routing key word"):
        RanAwareSettings()
    monkeypatch.setenv("PEP_RNIS_CELLS", "10002-0")
    monkeypatch.setenv("PEP_RNIS_FEED", "ue")
    with pytest.raises(ValueError, match="need PEP_RNIS_FEED=cell"):
        RanAwareSettings()
