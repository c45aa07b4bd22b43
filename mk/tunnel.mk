# tunnel: the multipath tunnel (Go) with FQ-CoDel at its ingress. docs/tunnel.md
APT_PACKAGES += iproute2 iperf3 iputils-ping curl
TUNNEL_SRC = $(shell find tunnel services/common/go -name '*.go' -not -name '*_test.go') go.mod go.sum

BUILD_TARGETS += build/bin/tunnel
TEST_TARGETS += test-tunnel
BENCH_TARGETS += bench-tunnel

build/bin/tunnel: $(TUNNEL_SRC)
	@mkdir -p build/bin
	nice -n 10 go build -trimpath -o $@ ./tunnel/cmd/tunnel

.PHONY: test-tunnel bench-tunnel
test-tunnel: python rabbitmq build/bin/tunnel build/bin/ran-emulator ## tunnel: Go unit tests; two namespaces joined by it (2 paths, path down, FQ-CoDel vs FIFO, bad datagrams), Mp1, RNIS feed, the path manager actuator, a small experiment on the emulated testbed (root)
	gofmt -l tunnel | (! grep .) || (echo "gofmt: files above need formatting" && false)
	go vet ./tunnel/...
	nice -n 10 go test -count=1 ./tunnel/...
	uv run pytest -q tunnel/tests

bench-tunnel: python build/bin/tunnel ## tunnel throughput over two 1 Gbit/s paths, added latency at half load, CPU -> docs/results/tunnel-bench/
	uv run python -m mts_lab.tunnel.bench --out docs/results/tunnel-bench

EXPERIMENT_TARGETS += experiment-tunnel
.PHONY: experiment-tunnel
experiment-tunnel: python build/bin/tunnel build/bin/ran-emulator ## tunnel: research 003's tests 1-5 on the emulated multi-cell testbed, FIFO vs FQ-CoDel, RR vs LowRTT, 5 runs -> docs/results/tunnel/ (root, ~30 min)
	uv run python -m mts_lab.tunnel.experiment --out docs/results/tunnel --runs $${RUNS:-5}
