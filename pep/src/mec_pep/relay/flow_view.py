"""What the relay shows of a flow: its state for the API, its buffered bytes, its backlog.

Every function here runs in the flow's relay thread (its sockets are valid only there).
"""

from __future__ import annotations

from typing import Any

from mec_pep.flows import Leg, flow_record, leg_record
from mec_pep.relay import Conn
from mec_pep.sockets import SIOCINQ, SIOCOUTQ, SIOCOUTQNSD, queued, tcp_info


def buffered(conn: Conn) -> dict[str, dict[str, int]]:
    """Bytes the PEP holds per direction (``held``): receive queue → pipe → send queue."""
    flow = conn.flow
    up_pipe, down_pipe = conn.pipe_bytes()
    wan_fd = flow.wan.fileno() if flow.wan is not None and conn.up is not None else -1
    return held(conn.ran_fd, wan_fd, up_pipe, down_pipe)


def held(ran_fd: int, wan_fd: int, up_pipe: int, down_pipe: int) -> dict[str, dict[str, int]]:
    """Bytes a flow holds per direction: receive queue → pipe (or the relay's buffer) → send
    queue; ``wan_fd`` -1 while the WAN leg is not connected.

    A send queue counts bytes not sent yet plus bytes sent and not acknowledged (the PEP
    must keep those to retransmit); ``*_unsent`` is the part not sent yet.
    """
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
    wan_tcp = tcp and conn.up is not None
    return flow_record(
        flow,
        stage=conn.stage.name.lower(),
        idle_s=conn.relay.now - conn.last_active,
        buffered=buffered(conn),
        ran=leg_record(flow.ran, _tcp_info(flow.ran) if tcp else None, with_tcp=tcp),
        wan=leg_record(
            flow.wan, _tcp_info(flow.wan) if wan_tcp and flow.wan else None, with_tcp=wan_tcp
        ),
    )


def _tcp_info(leg: Leg) -> dict[str, Any] | None:
    try:
        return tcp_info(leg.sock)
    except OSError:
        return None
