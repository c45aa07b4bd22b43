# Trust between components (issue 20): the abuse suite on the real services, and the
# benchmark of the platform's /healthz under a flood of failed logins.
TEST_TARGETS += test-security
BENCH_TARGETS += bench-security

.PHONY: test-security bench-security
test-security: python rabbitmq build/bin/rnis-adapter build/bin/flexran-source ## abuse suite: every API x every bad token kind, body limits, slowloris (root: the PEP)
	uv run pytest -q -s security/tests

bench-security: python ## platform /healthz latency under 300 concurrent failed logins (docs/results.md)
	uv run python -m mts_lab.platform.logins_bench --out docs/results/security
