# testbed: the TTI-level RAN emulator (Go) and the namespace testbed (Python, `testbed` CLI).
APT_PACKAGES += iproute2 iputils-ping iperf3 procps
BUILD_TARGETS += build/bin/ran-emulator
TEST_TARGETS += test-testbed
BENCH_TARGETS += bench-emulator

EMULATOR_SRC := $(shell find testbed/ran-emulator services/common/go -name '*.go' -o -name '*.json') go.mod go.sum

build/bin/ran-emulator: $(EMULATOR_SRC)
	@mkdir -p build/bin
	go build -o $@ ./testbed/ran-emulator

.PHONY: test-testbed bench-emulator
# test_run.py is `make run` in small: it needs the adapter and the MELD build too.
test-testbed: python rabbitmq build/bin/ran-emulator build/bin/rnis-adapter $(MELD_OBJ) $(MELD_LOADER) ## RAN emulator unit tests and testbed tests on real namespaces (root)
	@test -z "$$(gofmt -l testbed/ran-emulator)" || { gofmt -l testbed/ran-emulator; exit 1; }
	go vet ./testbed/ran-emulator/...
	go test -count=1 ./testbed/ran-emulator/...
	uv run pytest -q testbed/tests

bench-emulator: python build/bin/ran-emulator ## emulator capacity and TTI lateness -> docs/results/emulator/
	uv run python -m mts_lab.emulator.bench --out docs/results/emulator
