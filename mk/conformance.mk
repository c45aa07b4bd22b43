# Conformance to the ETSI MEC specs as an operator's lab checks it (issue 21): one test per
# reported failure, on the real platform and the real RNIS adapter. docs/conformance.md
TEST_TARGETS += test-conformance

.PHONY: test-conformance
test-conformance: python rabbitmq $(RNIS_BINS) ## MEC 011/012/010-2 conformance: ETags, query parameters, 404s, links
	uv run pytest -q conformance/tests
