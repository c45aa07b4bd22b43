# rnis-adapter: FlexRAN → RNIS feed (AMQP) and ETSI MEC 012 API (Go), its test source and
# benchmark consumer. docs/rnis-adapter.md
RNIS_BINS := build/bin/rnis-adapter build/bin/flexran-source build/bin/rnis-bench-consumer
RNIS_GO_SRC = $(shell find rnis-adapter services/common/go -name '*.go' -not -name '*_test.go') \
	$(wildcard rnis-adapter/internal/mec012/spec/*.yaml) go.mod go.sum

BUILD_TARGETS += $(RNIS_BINS)
TEST_TARGETS += test-rnis
BENCH_TARGETS += bench-rnis bench-rnis-e2 bench-rnis-notify
EXPERIMENT_TARGETS += experiment-meld-replay

$(RNIS_BINS): build/bin/%: $(RNIS_GO_SRC)
	@mkdir -p build/bin
	nice -n 10 go build -trimpath -o $@ ./rnis-adapter/cmd/$*

.PHONY: test-rnis bench-rnis bench-rnis-e2 bench-rnis-notify fuzz-rnis
test-rnis: python rabbitmq $(RNIS_BINS) build/bin/ran-emulator ## RNIS adapter: Go unit tests, short fuzz, integration tests on RabbitMQ
	gofmt -l rnis-adapter | (! grep .) || (echo "gofmt: files above need formatting" && false)
	go vet ./rnis-adapter/...
	nice -n 10 go test ./rnis-adapter/...
	@# A count, not a duration: Go < 1.27 can fail a duration-bound run at its deadline with
	@# "context deadline exceeded" and no crasher (go.dev/issue/75804), on a loaded machine.
	nice -n 10 go test -run '^$$' -fuzz FuzzParse -fuzztime 200000x ./rnis-adapter/internal/flexran
	nice -n 10 go test -run '^$$' -fuzz FuzzDecode -fuzztime 50000x ./rnis-adapter/internal/e2
	uv run pytest -q rnis-adapter/tests

fuzz-rnis: ## fuzz the FlexRAN parser for 5 minutes
	go test -run '^$$' -fuzz FuzzParse -fuzztime 5m ./rnis-adapter/internal/flexran

bench-rnis-notify: ## MEC 012 notifications: a healthy receiver beside 1,000 stalled ones (issue 20; docs/results/rnis-notify)
	@mkdir -p docs/results/rnis-notify
	MTS_STALLED_RECEIVERS=1000 MTS_NOTIFY_ROUNDS=20 MTS_NOTIFY_OUT=$(CURDIR)/docs/results/rnis-notify/notify.json \
		go test -count=1 -run TestStalledReceiversDelayOnlyThemselves -v ./rnis-adapter/internal/mec012

bench-rnis: python rabbitmq $(RNIS_BINS) ## RNIS benchmark: 64 UEs at 1 kHz → adapter → AMQP consumer (docs/results/rnis)
	uv run python rnis-adapter/bench/bench_rnis.py --out docs/results/rnis

bench-rnis-e2: python rabbitmq $(RNIS_BINS) ## the same through the E2 source: 64 UEs pushed every 1 ms as an mts-e2 stream (docs/results/rnis-e2)
	uv run python rnis-adapter/bench/bench_rnis.py --source e2 --out docs/results/rnis-e2

.PHONY: emulator-captures experiment-meld-replay
emulator-captures: ## rewrite the OAI-like emulator timelines MELD is replayed on (rnis-adapter/testdata/flexran/emulator-oai-like) and the FlexRAN/E2 report pairs (rnis-adapter/testdata/e2/emulator)
	EMU_WRITE_CAPTURES=$(CURDIR)/rnis-adapter/testdata/flexran/emulator-oai-like \
	EMU_WRITE_E2_PAIRS=$(CURDIR)/rnis-adapter/testdata/e2/emulator/pairs.jsonl \
		go test -count=1 -run 'WriteOAILikeCaptures|WriteE2Pairs' ./testbed/ran-emulator/internal/api

experiment-meld-replay: ## MELD's D_TBS inputs replayed on the live OAI timelines and the OAI-like emulator (table in docs/meld-rapid.md)
	go test -count=1 -run MELDReplay -v ./rnis-adapter/internal/meas
