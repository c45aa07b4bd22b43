"""Health of a service's dependencies (broker, RAN source, platform, kernel program...).

Components report with ``health.set("broker", ok=False, detail="connection refused")``;
``/healthz`` shows the report and answers 503 when anything required is down.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Check:
    ok: bool
    detail: str
    required: bool
    since: float = field(default_factory=time.time)


class Health:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._checks: dict[str, _Check] = {}

    def set(self, name: str, ok: bool, detail: str = "", *, required: bool | None = None) -> None:
        """Record a dependency's state; ``since`` only moves when ``ok`` changes.

        ``required`` None keeps what the check was registered with (True for a new one): a
        service marks a dependency optional once, and the client that reports on it (the
        AMQP client, say) need not know."""
        with self._lock:
            old = self._checks.get(name)
            if required is None:
                required = True if old is None else old.required
            if old is not None and old.ok == ok:
                old.detail, old.required = detail, required
            else:
                self._checks[name] = _Check(ok, detail, required)

    def ok(self) -> bool:
        with self._lock:
            return all(c.ok for c in self._checks.values() if c.required)

    def report(self) -> dict[str, Any]:
        with self._lock:
            checks = {
                name: {"ok": c.ok, "detail": c.detail, "required": c.required, "since": c.since}
                for name, c in sorted(self._checks.items())
            }
            healthy = all(c.ok for c in self._checks.values() if c.required)
        return {"status": "ok" if healthy else "degraded", "checks": checks}
