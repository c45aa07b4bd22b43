"""The residual loss of ``make experiment-meld-live`` (mts_lab.meld.live), on real TCP.

The live experiment drops TCP packets at the UE's ingress with an nftables table of its
own; here it drops everything, then nothing, on a client's interface in the lab's
namespaces: a connection fails while the table is there and the rule counts the drops;
once it is gone nothing is left behind and connections work again.
"""

from __future__ import annotations

import socket

import pytest

from mts_lab.line import Lab, in_netns
from mts_lab.meld.live import LOSS_TABLE, dropped, set_loss

pytestmark = [pytest.mark.netns]


def connects(lab: Lab, port: int) -> bool:
    def attempt() -> bool:
        try:
            socket.create_connection((lab.server_ip, port), timeout=1.0).close()
            return True
        except OSError:
            return False

    return in_netns(lab.client_ns, attempt)


def test_loss_at_the_ue_ingress_drops_and_goes() -> None:
    lab = Lab.create("live")
    try:
        listener = in_netns(lab.server_ns, lambda: socket.create_server((lab.server_ip, 0)))
        port = listener.getsockname()[1]
        assert connects(lab, port)
        set_loss(lab.client_ns, "c0", 100.0)  # every TCP packet arriving at the "UE"
        assert not connects(lab, port)  # the SYN-ACK never arrives
        assert dropped(lab.client_ns) > 0
        set_loss(lab.client_ns, "c0", 0.5)  # replaces it: one in 200 packets
        assert "numgen random mod 100000 < 500" in lab.sh(lab.client_ns, "nft list ruleset")
        set_loss(lab.client_ns, "c0", 0.0)
        assert LOSS_TABLE not in lab.sh(lab.client_ns, "nft list tables")
        assert dropped(lab.client_ns) == 0
        assert connects(lab, port)
        listener.close()
    finally:
        lab.down()
