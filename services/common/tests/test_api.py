"""The REST conventions every service gets from create_app."""

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from mec_common.api import AuthenticatedPrincipal, ProblemError, create_app
from mec_common.auth import TokenVerifier, ensure_static_token
from mec_common.config import Port, ServiceSettings
from mec_common.health import Health


class Thing(BaseModel):
    name: str
    size: int


@pytest.fixture
def app() -> FastAPI:
    health = Health()
    health.set("broker", True, "connected")
    app = create_app(
        title="t",
        version="1",
        description="d",
        settings=ServiceSettings(),
        health=health,
        token_verifier=TokenVerifier(["s3cret"]),
    )

    @app.post("/things", status_code=201)
    def add(thing: Thing, who: AuthenticatedPrincipal) -> Thing:
        if thing.name == "taken":
            raise ProblemError(409, "a thing with that name exists")
        return thing

    return app


AUTH = {"Authorization": "Bearer s3cret"}


def test_requests_without_a_valid_token_get_401_problem_details(app: FastAPI) -> None:
    client = TestClient(app)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        r = client.post("/things", json={"name": "a", "size": 1}, headers=headers)
        assert r.status_code == 401
        assert r.headers["content-type"] == "application/problem+json"
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["status"] == 401
        assert r.json()["instance"] == "http://testserver/things"
    assert client.post("/things", json={"name": "a", "size": 1}, headers=AUTH).status_code == 201


def test_errors_are_problem_details(app: FastAPI) -> None:
    client = TestClient(app)
    r = client.post("/things", json={"name": "a", "size": "big"}, headers=AUTH)
    assert r.status_code == 400 and "size" in r.json()["detail"]
    r = client.post(
        "/things", content=b"{not json", headers={**AUTH, "content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["title"] == "Bad Request"
    r = client.post("/things", json={"name": "taken", "size": 1}, headers=AUTH)
    assert r.status_code == 409 and r.json()["detail"] == "a thing with that name exists"
    r = client.get("/nowhere", headers=AUTH)
    assert r.status_code == 404 and r.headers["content-type"] == "application/problem+json"
    r = client.delete("/things", headers=AUTH)
    assert r.status_code == 405 and r.json()["status"] == 405


def test_health_metrics_and_docs_need_no_token(app: FastAPI) -> None:
    client = TestClient(app)
    assert client.get("/healthz").json()["status"] == "ok"
    app.state.health.set("broker", False, "connection refused")
    r = client.get("/healthz")
    assert r.status_code == 503 and r.json()["checks"]["broker"]["detail"] == "connection refused"
    assert "python_info" in client.get("/metrics").text
    docs = client.get("/docs")
    assert docs.status_code == 200 and "/docs-static/swagger-ui-bundle.js" in docs.text
    assert client.get("/docs-static/swagger-ui-bundle.js").status_code == 200
    spec = client.get("/openapi.json").json()
    assert "ProblemDetails" in spec["components"]["schemas"]


def test_a_service_without_tokens_generates_one(tmp_path: Path) -> None:
    tokens = ensure_static_token([], tmp_path, "svc")
    assert len(tokens[0]) >= 32
    assert (tmp_path / "svc.token").stat().st_mode & 0o777 == 0o600
    assert ensure_static_token([], tmp_path, "svc") == tokens, "reused on the next start"
    assert ensure_static_token(["mine"], tmp_path, "svc") == ["mine"]


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic_settings import SettingsConfigDict

    class PepSettings(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix="XPEP_")
        http_port: Port = 8102

    monkeypatch.setenv("XPEP_API_TOKENS", "a, b,")
    monkeypatch.setenv("XPEP_HTTP_PORT", "9000")
    s = PepSettings()
    assert s.api_tokens == ["a", "b"] and s.http_port == 9000
    monkeypatch.setenv("XPEP_HTTP_PORT", "70000")
    with pytest.raises(ValueError):
        PepSettings()


def test_split_commas_builds_typed_lists_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typing import Annotated

    from pydantic import BeforeValidator, Field
    from pydantic_settings import NoDecode, SettingsConfigDict

    from mec_common.config import split_commas

    class Settings(ServiceSettings):
        model_config = SettingsConfigDict(env_prefix="XSPLIT_")
        ports: Annotated[list[int], NoDecode, BeforeValidator(split_commas)] = Field([80])

    assert split_commas(" a, b,,c ") == ["a", "b", "c"]
    assert split_commas("") == [] and split_commas(["x, y"]) == ["x, y"]
    assert Settings().ports == [80]
    monkeypatch.setenv("XSPLIT_PORTS", "443, 8443")
    assert Settings().ports == [443, 8443]
    monkeypatch.setenv("XSPLIT_PORTS", "443,http")
    with pytest.raises(ValueError):
        Settings()
