"""Persistence: every platform resource in SQL (SQLite by default, PostgreSQL by URL).

Resources keep their ETSI representation in a JSON column; the columns beside it are
what queries filter on. A restart of the platform keeps everything.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

from sqlalchemy import JSON, Boolean, Float, ForeignKey, String, create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker


class Base(DeclarativeBase):
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON}


def _now() -> float:
    return time.time()


class SigningKey(Base):
    """The platform's JWT signing keys (private key PEM; the newest signs)."""

    __tablename__ = "signing_keys"
    kid: Mapped[str] = mapped_column(String(64), primary_key=True)
    private_pem: Mapped[str]
    created: Mapped[float] = mapped_column(Float, default=_now)


class Client(Base):
    """OAuth2 client credentials: the admin, or one app instance."""

    __tablename__ = "clients"
    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    secret_hash: Mapped[str]
    app_instance_id: Mapped[str | None] = mapped_column(String(64), index=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)


class RevokedClient(Base):
    """Credentials revoked before their tokens expired; published at /oauth2/revocations so
    every service refuses those tokens. A row can go once every token of it has expired."""

    __tablename__ = "revoked_clients"

    client_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    expires: Mapped[float] = mapped_column(Float, index=True)


class AppPackage(Base):
    __tablename__ = "app_packages"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    appd_id: Mapped[str] = mapped_column(String(128), unique=True)
    appd: Mapped[dict[str, Any]]
    checksum: Mapped[str]
    operational_state: Mapped[str] = mapped_column(String(16), default="ENABLED")
    created: Mapped[float] = mapped_column(Float, default=_now)


class AppInstance(Base):
    __tablename__ = "app_instances"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    app_pkg_id: Mapped[str] = mapped_column(ForeignKey("app_packages.id"))
    appd_id: Mapped[str] = mapped_column(String(128))
    name: Mapped[str | None]
    description: Mapped[str | None]
    instantiation_state: Mapped[str] = mapped_column(String(24), default="NOT_INSTANTIATED")
    operational_state: Mapped[str | None] = mapped_column(String(16))
    ready: Mapped[bool] = mapped_column(Boolean, default=False)
    # STOPPING/TERMINATING while a termination waits for confirm_termination.
    termination_pending: Mapped[str | None] = mapped_column(String(16))
    backend: Mapped[str | None] = mapped_column(String(16))
    backend_ref: Mapped[str | None]  # pid, container id or helm release
    created: Mapped[float] = mapped_column(Float, default=_now)


class LcmOpOcc(Base):
    __tablename__ = "lcm_op_occs"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    app_instance_id: Mapped[str] = mapped_column(String(64), index=True)
    operation: Mapped[str] = mapped_column(String(16))  # INSTANTIATE, TERMINATE, OPERATE
    state: Mapped[str] = mapped_column(String(16))  # STARTING, PROCESSING, COMPLETED, FAILED
    params: Mapped[dict[str, Any]]
    error: Mapped[str | None]
    start_time: Mapped[float] = mapped_column(Float, default=_now)
    state_entered_time: Mapped[float] = mapped_column(Float, default=_now)


class Service(Base):
    __tablename__ = "services"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    app_instance_id: Mapped[str] = mapped_column(String(64), index=True)
    ser_name: Mapped[str] = mapped_column(String(256), index=True)
    state: Mapped[str] = mapped_column(String(16))
    info: Mapped[dict[str, Any]]  # ServiceInfo without serInstanceId and links
    liveness_interval: Mapped[int | None]
    last_heartbeat: Mapped[float] = mapped_column(Float, default=_now)
    created: Mapped[float] = mapped_column(Float, default=_now)


class Subscription(Base):
    """A subscription of either Mp1 API (``api`` = service_mgmt | app_support)."""

    __tablename__ = "subscriptions"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    api: Mapped[str] = mapped_column(String(16))
    app_instance_id: Mapped[str] = mapped_column(String(64), index=True)
    body: Mapped[dict[str, Any]]
    created: Mapped[float] = mapped_column(Float, default=_now)


class AppRule(Base):
    """A traffic rule or DNS rule of an app instance (``kind`` = traffic | dns)."""

    __tablename__ = "app_rules"
    app_instance_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8), primary_key=True)
    rule_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    body: Mapped[dict[str, Any]]


class AppRegistration(Base):
    """An app instance's registration (MEC 011 v3.1.1 ``/registrations``): its AppInfo."""

    __tablename__ = "app_registrations"
    app_instance_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    app_info: Mapped[dict[str, Any]]
    created: Mapped[float] = mapped_column(Float, default=_now)


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _engine(url)
        Base.metadata.create_all(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transaction: committed on success, rolled back on error."""
        with self._sessions() as s, s.begin():
            yield s

    def close(self) -> None:
        self.engine.dispose()


def _private_sqlite_file(url: str) -> None:
    """The database holds the signing key: 0600 from creation on (SQLite gives its WAL and
    shared-memory files the database file's mode)."""
    path = make_url(url).database
    if not path or path == ":memory:":
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)
    os.close(fd)
    for suffix in ("-wal", "-shm"):
        if (extra := Path(path + suffix)).exists():
            extra.chmod(0o600)


def _engine(url: str) -> Engine:
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, pool_size=8)
    _private_sqlite_file(url)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    return engine
