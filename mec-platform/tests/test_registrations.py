"""MEC 011 v3.1.1 app registration over real HTTP: an instance registers itself only, with
what agrees with its AppD; bad bodies change nothing; termination removes it."""

from __future__ import annotations

from typing import Any

from mec_platform.testing import Running, external_app, onboard

AS = "/mec_app_support/v1"


def app_info(app_id: str, **changes: Any) -> dict[str, Any]:
    info = {"appName": "test-app", "appProvider": "mts-tests", "appDId": "test-app",
            "appInstanceId": app_id, "isInsByMec": True,
            "endpoint": {"uris": ["http://10.0.0.7:8080/"]}}  # fmt: skip
    return {k: v for k, v in {**info, **changes}.items() if v is not None}


def test_register_read_update_deregister(platform: Running) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    url = f"{AS}/registrations/{app_id}"
    assert app.get(url).status_code == 404

    r = app.post(f"{AS}/registrations", json={"AppInfo": app_info(app_id)})  # v3.1.1 file's form
    assert r.status_code == 201, r.text
    assert r.headers["location"].endswith(url)
    assert r.json() == app_info(app_id)
    again = app.post(f"{AS}/registrations", json=app_info(app_id))
    assert again.status_code == 400 and "registered already" in again.json()["detail"]

    r = app.get(url)
    assert r.status_code == 200 and r.json()["endpoint"] == {"uris": ["http://10.0.0.7:8080/"]}
    etag = r.headers["etag"]
    moved = app_info(app_id, endpoint={"fqdn": ["app.mec.local"]})
    assert app.put(url, json=moved, headers={"If-Match": '"stale"'}).status_code == 412
    assert app.put(url, json=moved, headers={"If-Match": etag}).status_code == 204
    assert app.get(url).json()["endpoint"] == {"fqdn": ["app.mec.local"]}

    assert app.delete(url).status_code == 204
    assert app.get(url).status_code == 404
    assert app.delete(url).status_code == 404


def test_only_what_the_appd_says_and_nothing_changes(platform: Running) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    cases = {
        "isInsByMec true": (403, app_info(app_id, isInsByMec=None)),
        "registers only its own application instance": (
            403, app_info(app_id, appInstanceId="other")),
        "appInstanceId is required": (400, app_info(app_id, appInstanceId=None)),
        "appDId must be the instance's AppD": (400, app_info(app_id, appDId="another-app")),
        "appName must be the AppD's": (400, app_info(app_id, appName="impostor")),
        "appProvider must be the AppD's": (400, app_info(app_id, appProvider="someone")),
        "appServiceRequired": (400, app_info(app_id, appServiceRequired=[{"serName": "rnis"}])),
        "exactly one of uris, fqdn": (400, app_info(app_id, endpoint={})),
        "appName": (400, {k: v for k, v in app_info(app_id).items() if k != "appName"}),
    }  # fmt: skip
    for expected, (status, body) in cases.items():
        r = app.post(f"{AS}/registrations", json=body)
        assert r.status_code == status, (body, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert expected in r.json()["detail"], r.json()
    assert app.get(f"{AS}/registrations/{app_id}").status_code == 404


def test_an_app_reaches_only_its_own_registration(platform: Running) -> None:
    onboard(platform)
    a_id, a = external_app(platform)
    _, b = external_app(platform)
    assert a.post(f"{AS}/registrations", json=app_info(a_id)).status_code == 201
    url = f"{AS}/registrations/{a_id}"
    assert b.get(url).status_code == 403
    assert b.put(url, json=app_info(a_id)).status_code == 403
    assert b.delete(url).status_code == 403
    assert b.post(f"{AS}/registrations", json=app_info(a_id)).status_code == 403  # as a
    assert platform.admin.post(f"{AS}/registrations", json=app_info(a_id)).status_code == 403
    assert a.get(url).status_code == 200  # untouched


def test_termination_removes_the_registration(platform: Running) -> None:
    onboard(platform)
    app_id, app = external_app(platform)
    assert app.post(f"{AS}/registrations", json=app_info(app_id)).status_code == 201
    r = platform.admin.post(f"/app_lcm/v1/app_instances/{app_id}/terminate",
                            json={"terminationType": "FORCEFUL"})  # fmt: skip
    assert r.status_code in (202, 409), r.text  # 409: never instantiated, delete it instead
    assert platform.admin.delete(f"/app_lcm/v1/app_instances/{app_id}").status_code == 204
    assert platform.admin.get(f"{AS}/registrations/{app_id}").status_code == 404
