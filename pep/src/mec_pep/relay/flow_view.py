"""What the relay shows of a flow: its state for the API, its buffered bytes, its backlog.

Every function here runs in the flow's relay thread (its sockets are valid only there).
"""

from __future__ import annotations

import time
from typing import Any

from mec_pep.flows import Leg
from mec_pep.relay import Conn
from mec_pep.sockets import SIOCINQ, SIOCOUTQ, SIOCOUTQNSD, queued, tcp_info


def buffered(conn: Conn) -> dict[str, dict[str, int]]:
    """Bytes the PEP holds per direction: receive queue → pipe → send queue.

    A send queue counts bytes not sent yet plus bytes sent and not acknowledged (the PEP
    must keep those to retransmit); ``*_unsent`` is the part not sent yet.
    """
    flow = conn.flow
    up_pipe, down_pipe = conn.pipe_bytes()
    ran_fd = conn.ran_fd
    wan_fd = flow.wan.fileno() if flow.wan is not None and conn.up is not None else -1
    to_ue = {
        "wan_receive_queue": queued(wan_fd, SIOCINQ) if wan_fd >= 0 else 0,
        "pipe": down_pipe,
        "ran_send_queue": queued(ran_fd, SIOCOUTQ),
        "ran_send_unsent": queued(ran_fd, SIOCOUTQNSD),
    }
    to_server = {
        "ran_receive_queue": queued(ran_fd, SIOCINQ),
        "pipe": up_pipe,
        "wan_send_queue": queued(wan_fd, SIOCOUTQ) if wan_fd >= 0 else 0,
        "wan_send_unsent": queued(wan_fd, SIOCOUTQNSD) if wan_fd >= 0 else 0,
    }
    to_ue["total"] = to_ue["wan_receive_queue"] + to_ue["pipe"] + to_ue["ran_send_queue"]
    to_server["total"] = (
        to_server["ran_receive_queue"] + to_server["pipe"] + to_server["wan_send_queue"]
    )
    return {"toward_ue": to_ue, "toward_server": to_server}


def backlog_toward_ue(conn: Conn) -> tuple[int, int]:
    """(total, not yet sent) bytes held toward the UE: the path manager's signal."""
    flow = conn.flow
    if flow.wan is None or conn.down is None:
        return 0, 0
    unsent = queued(conn.ran_fd, SIOCOUTQNSD)
    held = queued(flow.wan.fileno(), SIOCINQ) + conn.down.fill
    return held + queued(conn.ran_fd, SIOCOUTQ), held + unsent


def flow_state(conn: Conn, *, tcp: bool = True) -> dict[str, Any]:
    flow = conn.flow
    now = time.time()
    return {
        "id": flow.id,
        "mode": str(flow.mode),
        "ue": flow.ue,
        "stage": conn.stage.name.lower(),
        "destination": _address(flow.destination),
        "created_at": flow.created_at,
        "established_at": flow.established_at,
        "age_s": round(now - flow.created_at, 3),
        "idle_s": round(conn.relay.now - conn.last_active, 3),
        "bytes_to_ue": flow.bytes_to_ue,
        "bytes_from_ue": flow.bytes_from_ue,
        "buffered": buffered(conn),
        "ran": _leg(flow.ran, tcp=tcp),
        "wan": _leg(flow.wan, tcp=tcp and conn.up is not None),
        "ext": dict(flow.ext) if flow.ext else {},
    }


def _leg(leg: Leg | None, *, tcp: bool) -> dict[str, Any] | None:
    if leg is None:
        return None
    state: dict[str, Any] = {"local": _address(leg.local), "peer": _address(leg.peer)}
    if tcp:
        try:
            state["tcp"] = tcp_info(leg.sock)
        except OSError:
            state["tcp"] = None
    return state


def _address(address: tuple[str, int] | None) -> str | None:
    """host:port, [host]:port for IPv6 (RFC 3986)."""
    if not address:
        return None
    host, port = address[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
