# mec-platform: ETSI MEC 011 Mp1, the platform manager (MEC 010-2 style), OAuth2; the
# `mec-platform` service and the `mecctl` user CLI. docs/mec-platform.md
APT_PACKAGES += postgresql nftables wrk
TEST_TARGETS += test-platform
BENCH_TARGETS += bench-platform bench-notify

.PHONY: test-platform bench-platform bench-notify platform-conformance

test-platform: python ## MEC platform: Mp1, security, lifecycle, data plane (netns), PostgreSQL, conformance
	uv run pytest -q mec-platform/tests

platform-conformance: python ## only the schemathesis run against the official MEC 011 files (MTS_CONFORMANCE_EXAMPLES=200 for a long one)
	uv run pytest -q mec-platform/tests/test_conformance.py

bench-platform: python ## discovery req/s and p99 with 1,000 services; fan-out to 100 subscribers (docs/results/platform)
	uv run python -m mts_lab.platform.bench --out docs/results/platform

bench-notify: python ## a healthy notification receiver beside 1,000 stalled ones (issue 20; docs/results/notify)
	uv run python -m mts_lab.platform.notify_bench --out docs/results/notify
