# MEC Transport Suite. `make run` runs the whole system on the emulated RAN;
# `make test` runs every test. Both install what they need (Debian 12, root).
SHELL := /bin/bash
.DEFAULT_GOAL := help
.SHELLFLAGS := -eu -o pipefail -c

export UV_PYTHON_DOWNLOADS := never
export UV_LINK_MODE := copy
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(HOME)/.cargo/bin:$(HOME)/.local/bin:$(PATH)

# Each component's fragment in mk/ adds to these.
APT_PACKAGES := rabbitmq-server iproute2 nftables iperf3 curl jq procps
BUILD_TARGETS :=
TEST_TARGETS :=
BENCH_TARGETS :=
EXPERIMENT_TARGETS :=

include $(sort $(wildcard mk/*.mk))

.PHONY: help setup system python build rabbitmq test lint fmt run bench experiments clean

help: ## this list
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-22s %s\n", $$1, $$2}'

system: ## install Debian packages and uv (idempotent)
	@scripts/setup-system.sh $(sort $(APT_PACKAGES))

python: system ## create .venv with every component (uv workspace)
	@uv sync --all-packages --quiet

build: python $(BUILD_TARGETS) ## build everything that is not Python (emulator, BPF object)

setup: system python build

rabbitmq: system ## start RabbitMQ if it is not running
	@scripts/rabbitmq.sh ensure

lint: python ## ruff and mypy over every Python component; relative links in the docs
	uv run ruff check .
	uv run ruff format --check .
	uv run mypy
	uv run python scripts/check_doc_links.py

fmt: python ## format Python code
	uv run ruff format .
	uv run ruff check --fix .

test: setup rabbitmq lint $(TEST_TARGETS) ## every test (what CI runs)
	@echo "make test: all passed"

bench: setup rabbitmq $(BENCH_TARGETS) ## every benchmark

experiments: setup rabbitmq $(EXPERIMENT_TARGETS) ## every experiment (long)

run: setup rabbitmq ## the whole system on the emulated RAN, with a live status
	uv run python -m mts_lab.run

clean: ## remove build outputs (not the venv)
	rm -rf build/
