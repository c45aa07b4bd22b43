"""The service end to end on the real RabbitMQ: RNIS + PEP backlog in, REST out.

Actuation is off here (``PM_ACTUATION=none``): test_mptcp.py covers the kernel side.
"""

import subprocess
import time
import uuid
from ipaddress import IPv4Address

import pytest
from fastapi.testclient import TestClient

from mec_common.amqp import AmqpPublisher
from mec_common.bus.backlog import PepBacklog
from mec_common.bus.rnis import RnisCellMeasurements, RnisCellUe, RnisMeasurement
from path_manager.app import build_app
from path_manager.settings import PmSettings

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
UE, PATHS = "10.30.1.7", ["10.30.1.7", "10.30.2.7", "10.30.3.7"]


@pytest.fixture
def service(tmp_path):
    yield from _service(tmp_path)


@pytest.fixture
def cell_service(tmp_path):
    yield from _service(tmp_path, rnis_feed="cell")


def _service(tmp_path, **overrides):
    if subprocess.run(["rabbitmqctl", "-q", "status"], capture_output=True).returncode != 0:
        pytest.fail("RabbitMQ is not running: start it with `make rabbitmq`")
    suffix = uuid.uuid4().hex[:8]
    settings = PmSettings(
        api_tokens=[TOKEN], amqp_url=AMQP_URL, rnis_exchange=f"test-rnis-{suffix}",
        pep_exchange=f"test-pep-{suffix}", actuation="none", state_dir=tmp_path, mode="fpt+r",
        **overrides,
    )  # fmt: skip
    app, manager = build_app(settings)
    rnis = AmqpPublisher(AMQP_URL, settings.rnis_exchange)
    pep = AmqpPublisher(AMQP_URL, settings.pep_exchange)
    rnis.start()
    pep.start()
    with TestClient(app) as client:
        assert manager.rnis.connected.wait(10) and manager.backlog.connected.wait(10)
        yield client, manager, rnis, pep
    rnis.close()
    pep.close()
    for exchange in (settings.rnis_exchange, settings.pep_exchange):
        subprocess.run(["rabbitmqctl", "-q", "eval", "rabbit_exchange:delete(rabbit_misc:r("
                        f'<<"/">>, exchange, <<"{exchange}">>), false, <<"test">>).'],
                       capture_output=True)  # fmt: skip


def measurement(path: str, cqi: int, capacity_bps: int, rlc_bytes: int | None = None) -> bytes:
    m = RnisMeasurement(
        cell=f"10000-{PATHS.index(path)}", bs_id=10000, rnti=70, ue_ipv4=path, wb_cqi=cqi,
        cqi_capacity_bps=capacity_bps, observed_ns=time.time_ns(), cell_ues=1,
        rlc_queue_bytes=rlc_bytes,
    )  # fmt: skip
    return m.model_dump_json().encode()


def publish_backlog(pep: AmqpPublisher, **counts: int) -> None:
    """One PEP backlog message for UE, as the PEP sends it (mec_common.bus.backlog)."""
    message = PepBacklog(ue=IPv4Address(UE), ts_ns=time.time_ns(), flows=1, **counts)
    pep.publish(message.routing_key(), message.to_json())


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_auth_and_problem_details(service):
    client, *_ = service
    assert client.get("/pm/v1/ues").status_code == 401
    r = client.get("/pm/v1/ues/10.9.9.9", headers=AUTH)
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    r = client.put("/pm/v1/ues/not-an-ip", json={"paths": PATHS}, headers=AUTH)
    assert r.status_code == 400
    r = client.put("/pm/v1/ues/10.30.1.7", json={"paths": []}, headers=AUTH)
    assert r.status_code == 400
    assert client.get("/healthz").status_code in (200, 503)
    assert "pm_decisions_total" in client.get("/metrics").text


def test_control_settings_at_run_time(service):
    client, manager, *_ = service
    r = client.put("/pm/v1/control", json={"mode": "cdf", "q_high": 400}, headers=AUTH)
    assert r.status_code == 200 and r.json()["mode"] == "cdf" and r.json()["q_high"] == 400
    bad = client.put("/pm/v1/control", json={"reactive_guard": 0.5}, headers=AUTH)
    assert bad.status_code == 400 and "T_R" in bad.json()["detail"]
    assert client.get("/pm/v1/control", headers=AUTH).json()["reactive_guard"] == 0.05
    assert manager.control_settings.mode.value == "cdf"


def test_feeds_drive_paths_and_decisions(service):
    client, manager, rnis, pep = service
    r = client.put(f"/pm/v1/ues/{UE}", json={"paths": PATHS}, headers=AUTH)
    assert r.status_code == 200 and r.json()["active_paths"] == [PATHS[0]]
    # Radio: path 0 in NLoS (CQI 3, 100 Mbit/s), paths 1-2 in LoS (CQI 14, 900 Mbit/s).
    # The bindings apply asynchronously after the PUT: publish until every path has samples.
    radios = manager.ues[IPv4Address(UE)].paths.values()

    def publish_radio() -> bool:
        rnis.publish("rnis.v1.meas.10000-0.-." + PATHS[0].replace(".", "_"),
                     measurement(PATHS[0], 3, 100_000_000))  # fmt: skip
        for p in PATHS[1:]:
            rnis.publish("rnis.v1.meas.x.-." + p.replace(".", "_"), measurement(p, 14, 900_000_000))
        return all(r.samples >= 5 for r in radios)

    assert wait_until(publish_radio, timeout=15)
    paths = client.get(f"/pm/v1/ues/{UE}/paths", headers=AUTH).json()
    by_ip = {p["path"]: p for p in paths}
    assert by_ip[PATHS[0]]["in_los"] is False and by_ip[PATHS[1]]["in_los"] is True
    assert by_ip[PATHS[1]]["capacity_los_bps"] == pytest.approx(900e6)
    # The PEP's backlog for the UE grows past Q_HT: a reactive ADD (fpt+r) follows at once.
    for backlog in (100_000, 400_000, 800_000, 1_200_000):
        publish_backlog(pep, backlog_bytes=backlog, unsent_bytes=backlog, received_bytes=backlog)
        time.sleep(0.01)
    assert wait_until(lambda: len(client.get(f"/pm/v1/ues/{UE}", headers=AUTH)
                                  .json()["active_paths"]) >= 2)  # fmt: skip
    decisions = client.get(f"/pm/v1/ues/{UE}/decisions?changes_only=true", headers=AUTH).json()
    first = decisions[0]
    assert first["trigger"] == "reactive" and first["action"] == "add"
    assert first["path"] in PATHS[1:] and "Q_HT" in first["reason"]
    # Predictive controls run every 150 ms and log their probabilities.
    assert wait_until(lambda: client.get("/pm/v1/prediction-stats", headers=AUTH)
                      .json()["prediction_ms"]["count"] >= 2)  # fmt: skip
    stats = client.get("/pm/v1/prediction-stats", headers=AUTH).json()
    assert stats["control_interval_ms"]["min"] >= 150.0
    log = client.get(f"/pm/v1/ues/{UE}/decisions", headers=AUTH).json()
    assert any(d["trigger"] == "predictive" and d["p_high"] is not None for d in log)
    assert client.delete(f"/pm/v1/ues/{UE}", headers=AUTH).status_code == 204


def test_arrival_rate_comes_from_the_peps_received_bytes(service):
    """Schema 2: the PEP's cumulative received_bytes gives the arrival rate directly."""
    client, manager, _, pep = service
    assert client.put(f"/pm/v1/ues/{UE}", json={"paths": PATHS}, headers=AUTH).status_code == 200
    ue = manager.ues[IPv4Address(UE)]
    rate = 3_000_000  # bytes/s = 2000 packets of 1500 bytes per second
    start = time.monotonic()

    def publish(received: int) -> None:
        publish_backlog(pep, backlog_bytes=0, unsent_bytes=0, received_bytes=received)

    # The binding applies asynchronously after the PUT: publish until the count arrives.
    assert wait_until(lambda: publish(0) or bool(ue.received))
    start = time.monotonic()
    while time.monotonic() - start < 0.4:
        publish(int((time.monotonic() - start) * rate))
        time.sleep(0.005)
    assert wait_until(lambda: ue.arrival_pps > 0)
    assert ue.arrival_pps == pytest.approx(2000, rel=0.25)
    shown = client.get(f"/pm/v1/ues/{UE}", headers=AUTH).json()["arrival_rate_pps"]
    assert shown == pytest.approx(ue.arrival_pps, rel=0.25)


def test_the_queue_is_the_peps_unsent_bytes_plus_the_rlc_queues(service):
    """PM_QUEUE_MEASURE=pep+rlc (default): what waits in the PEP and in the cells' RLC queues;
    the bytes in flight (in the PEP's backlog, not in either) do not count."""
    client, manager, rnis, pep = service
    assert client.put(f"/pm/v1/ues/{UE}", json={"paths": PATHS}, headers=AUTH).status_code == 200
    ue = manager.ues[IPv4Address(UE)]
    rlc = {PATHS[0]: 30_000, PATHS[1]: 12_000, PATHS[2]: 0}

    def publish_radio() -> bool:
        for p, queued in rlc.items():
            rnis.publish("rnis.v1.meas.x.-." + p.replace(".", "_"),
                         measurement(p, 14, 900_000_000, rlc_bytes=queued))  # fmt: skip
        return all(r.rlc_queue_bytes == rlc[str(r.id)] for r in ue.paths.values())

    assert wait_until(publish_radio, timeout=15)

    def publish_once() -> bool:
        publish_backlog(pep, backlog_bytes=500_000, unsent_bytes=60_000, received_bytes=1_000_000)
        return ue.queue_bytes > 0

    assert wait_until(publish_once)
    assert ue.queue_bytes == 60_000 + 42_000
    shown = client.get(f"/pm/v1/ues/{UE}", headers=AUTH).json()["queue_packets"]
    assert shown == pytest.approx(102_000 / 1500)
    manager.settings.queue_measure = "pep_backlog"  # the whole backlog, in flight included
    ue.queue_bytes = 0
    assert wait_until(publish_once) and ue.queue_bytes == 500_000


def test_cell_messages_feed_the_paths(cell_service):
    """PM_RNIS_FEED=cell: one message per cell carries every UE; only our paths are used."""
    client, manager, rnis, _ = cell_service
    r = client.put(f"/pm/v1/ues/{UE}", json={"paths": PATHS[:2]}, headers=AUTH)
    assert r.status_code == 200
    radios = manager.ues[IPv4Address(UE)].paths

    def publish_cells() -> bool:
        for i, path in enumerate(PATHS[:2]):
            ues = [RnisCellUe(rnti=70, ue_ipv4=path, wb_cqi=3 + 11 * i,
                              cqi_capacity_bps=(100 + 800 * i) * 1_000_000),
                   RnisCellUe(rnti=71, ue_ipv4="10.30.9.9", wb_cqi=15)]  # fmt: skip
            msg = RnisCellMeasurements(cell=f"10000-{i}", bs_id=10000, ues=ues, cell_ues=2,
                                       observed_ns=time.time_ns())  # fmt: skip
            rnis.publish(msg.routing_key(), msg.model_dump_json().encode())
        return all(r.samples >= 3 for r in radios.values())

    assert wait_until(publish_cells, timeout=15)
    by_ip = {p["path"]: p for p in client.get(f"/pm/v1/ues/{UE}/paths", headers=AUTH).json()}
    assert by_ip[PATHS[0]]["in_los"] is False and by_ip[PATHS[1]]["in_los"] is True
    assert by_ip[PATHS[1]]["capacity_los_bps"] == pytest.approx(900e6)


def test_the_control_resource_shows_every_control_setting():
    """``ControlView`` is the REST shape of ``ControlSettings``: a setting added to one and
    not the other would vanish from GET /pm/v1/control (or fail validation there)."""
    from dataclasses import fields

    from path_manager.api import ControlUpdate, ControlView
    from path_manager.control import ControlSettings

    settings = {f.name for f in fields(ControlSettings)}
    assert set(ControlView.model_fields) == settings
    assert set(ControlUpdate.model_fields) == settings
