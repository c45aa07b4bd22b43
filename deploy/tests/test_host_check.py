"""host-check's reading of the host's forwarding rules (deploy/compose/host_check.py)."""

from __future__ import annotations

import importlib.util

from harness import REPO

spec = importlib.util.spec_from_file_location("host_check", REPO / "deploy/compose/host_check.py")
assert spec is not None and spec.loader is not None
host_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(host_check)

# `nft list chain ip filter DOCKER-USER` on the live OAI run's MEC host (issue 23), after
# the two lines of docs/oai-testbed.md#forwarding: host-check warned that nothing accepted
# the UE pool although these rules did.
LIVE_CHAIN = """table ip filter {
	chain DOCKER-USER {
		ip daddr 10.0.1.0/24 counter packets 59540 bytes 89255600 accept
		ip saddr 10.0.1.0/24 counter packets 29394 bytes 1542984 accept
		counter packets 25179 bytes 514418788 return
	}
}
"""


def test_the_documented_rules_accept_the_pool() -> None:
    assert host_check.docker_user_accepts(LIVE_CHAIN, "10.0.1.0/24")


def test_one_way_another_pool_or_no_rule_does_not() -> None:
    one_way = "\n".join(line for line in LIVE_CHAIN.splitlines() if "saddr" not in line)
    assert not host_check.docker_user_accepts(one_way, "10.0.1.0/24")
    assert not host_check.docker_user_accepts(LIVE_CHAIN, "12.1.1.0/24")
    assert not host_check.docker_user_accepts("", "10.0.1.0/24")
    dropped = LIVE_CHAIN.replace("accept", "drop")
    assert not host_check.docker_user_accepts(dropped, "10.0.1.0/24")
