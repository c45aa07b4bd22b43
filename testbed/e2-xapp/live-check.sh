#!/bin/bash
# Live check of the E2 path on one machine: FlexRIC's nearRT-RIC and emu_agent_gnb, our
# xApp, then the stream recorded as the RNIS adapter receives it (rnis-adapter e2-record).
# Needs a FlexRIC build (FLEXRIC_BUILD, with its service models in SM_DIR) and
# build/bin/mts-e2-xapp (make e2-xapp). On a kernel without SCTP set SHIM=1: every FlexRIC
# process then runs with build/lib/sctp_over_udp.so (docs/e2.md).
#
#   testbed/e2-xapp/live-check.sh OUT.jsonl [LINES] [INTERVAL_MS]
#
# With ADAPTER=1 the RNIS adapter (RNIS_SOURCE=e2, RabbitMQ on localhost) then reads the
# stream for 3 s and its /healthz and skip counters are printed.
set -euo pipefail
out=$(realpath -m "${1:?usage: live-check.sh OUT.jsonl [LINES] [INTERVAL_MS]}")
lines=${2:-200}
interval=${3:-10}
repo=$(cd "$(dirname "$0")/../.." && pwd)
build=${FLEXRIC_BUILD:-/var/cache/mts/e2/flexric-build}
sm=${SM_DIR:-/var/cache/mts/e2/sm/}
port=${E2_STREAM_PORT:-36431}
work=$(mktemp -d)
pids=()
cleanup() {
	# last started first: the xApp unsubscribes while the RIC is still there
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill "${pids[i]}" 2>/dev/null || true
		sleep 0.3
	done
	sleep 0.5
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	if [ "${ADAPTER:-0}" = 1 ]; then # the adapter declared this (durable) exchange
		rabbitmqadmin delete exchange name="rnis-live-check-$$" > /dev/null 2>&1 || true
	fi
	echo "logs in $work" >&2
}
trap cleanup EXIT
cd "$work" # FlexRIC's processes write files (log.txt) into their working directory
preload=()
if [ "${SHIM:-0}" = 1 ]; then
	preload=(env "LD_PRELOAD=$repo/build/lib/sctp_over_udp.so")
fi
printf '[NEAR-RIC]\nNEAR_RIC_IP = 127.0.0.1\n\n[XAPP]\nDB_DIR = %s/\n' "$work" > "$work/flexric.conf"
head -c 24 /dev/urandom | base64 | tr -d '/+=' > "$work/token"
"${preload[@]}" "$build/examples/ric/nearRT-RIC" -c "$work/flexric.conf" -p "$sm" > "$work/ric.log" 2>&1 &
pids+=($!)
sleep 1
"${preload[@]}" "$build/examples/emulator/agent/emu_agent_gnb" -c "$work/flexric.conf" -p "$sm" > "$work/agent.log" 2>&1 &
pids+=($!)
sleep 2 # the xApp must come after the node: FlexRIC's RIC fails an E42 setup without E2 nodes
"${preload[@]}" "$repo/build/bin/mts-e2-xapp" -c "$work/flexric.conf" -p "$sm" -t "$work/token" \
	-l "127.0.0.1:$port" -i "$interval" > "$work/xapp.log" 2>&1 &
pids+=($!)
sleep 2
"$repo/build/bin/rnis-adapter" e2-record --addr "127.0.0.1:$port" --token-file "$work/token" \
	--lines "$lines" --seconds 30 > "$out"
echo "recorded $(wc -l < "$out") lines into $out" >&2
if [ "${ADAPTER:-0}" = 1 ]; then
	http=$((port + 1))
	RNIS_SOURCE=e2 RNIS_E2_ADDR="127.0.0.1:$port" RNIS_E2_TOKEN_FILE="$work/token" RNIS_HTTP_HOST=127.0.0.1 \
		RNIS_HTTP_PORT=$http RNIS_STATE_DIR="$work" RNIS_API_TOKENS=live-check-token-0123456789 \
		RNIS_AMQP_EXCHANGE="rnis-live-check-$$" "$repo/build/bin/rnis-adapter" serve > "$work/adapter.log" 2>&1 &
	pids+=($!)
	sleep 3
	curl -s "http://127.0.0.1:$http/healthz"; echo
	curl -s "http://127.0.0.1:$http/metrics" | grep -E '^rnis_(parse_errors_total|polls_total|ran_source_up|measurements_total)'
fi
