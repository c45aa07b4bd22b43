# services/common: the shared library (Python mec_common, Go services/common/go).
TEST_TARGETS += test-common

.PHONY: test-common
test-common: python rabbitmq ## tests of mec_common and the Go common packages
	go test ./services/common/go/...
	uv run pytest -q services/common/tests
