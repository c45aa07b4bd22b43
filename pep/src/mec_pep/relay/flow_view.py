"""What the relay shows of a flow: its state for the API, its buffered bytes, its backlog.

Every function here runs in the flow's relay thread (its sockets are valid only there).
"""

from __future__ import annotations

from typing import Any

from mec_pep.flows import Leg, flow_record, leg_record
from mec_pep.relay import Conn, Relay
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
    to_server = {
        "ran_receive_queue": queued(ran_fd, SIOCINQ),
        "pipe": up_pipe,
        "wan_send_queue": queued(wan_fd, SIOCOUTQ) if wan_fd >= 0 else 0,
        "wan_send_unsent": queued(wan_fd, SIOCOUTQNSD) if wan_fd >= 0 else 0,
    }
    to_server["total"] = (
        to_server["ran_receive_queue"] + to_server["pipe"] + to_server["wan_send_queue"]
    )
    return {"toward_ue": toward_ue(ran_fd, wan_fd, down_pipe), "toward_server": to_server}


def toward_ue(ran_fd: int, wan_fd: int, in_relay: int) -> dict[str, int]:
    """Bytes a flow holds toward the UE (the path manager's backlog, whichever relay holds
    them): the WAN leg's receive queue, the relay's pipe or buffer (``in_relay``), the RAN
    leg's send queue (sent and unacknowledged included; ``ran_send_unsent`` is its unsent
    part, ``SIOCOUTQNSD``)."""
    q = {
        "wan_receive_queue": queued(wan_fd, SIOCINQ) if wan_fd >= 0 else 0,
        "pipe": in_relay,
        "ran_send_queue": queued(ran_fd, SIOCOUTQ),
        "ran_send_unsent": queued(ran_fd, SIOCOUTQNSD),
    }
    q["total"] = q["wan_receive_queue"] + q["pipe"] + q["ran_send_queue"]
    return q


def held_toward_ue(relay: Relay) -> tuple[list[tuple[str, dict[str, int]]], dict[str, int]]:
    """Runs in the relay thread: (UE, ``toward_ue``) of each flow that may hold bytes toward
    its UE and does (a flow seen at zero leaves the sampled set until it moves bytes toward
    the UE again), and the bytes read from servers per UE since the start."""
    found = []
    for conn in list(relay.busy):
        wan, down = conn.flow.wan, conn.down
        q = None if wan is None or down is None else toward_ue(conn.ran_fd, wan.fileno(), down.fill)
        if q is None or q["total"] == 0:
            relay.busy.discard(conn)
        else:
            found.append((conn.flow.ue, q))
    return found, dict(relay.read_for_ue)


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
