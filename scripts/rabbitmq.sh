#!/usr/bin/env bash
# Start Debian's RabbitMQ if it is not running (there is no systemd on the CI machine),
# wait until it accepts connections. Usage: scripts/rabbitmq.sh [ensure|stop|status]
set -euo pipefail
cmd=${1:-ensure}
running() { rabbitmqctl -q status >/dev/null 2>&1; }
case "$cmd" in
ensure)
    running && exit 0
    echo "rabbitmq: starting rabbitmq-server"
    mkdir -p /var/log/rabbitmq && chown rabbitmq:rabbitmq /var/log/rabbitmq 2>/dev/null || true
    # Debian's wrapper drops privileges to the rabbitmq user.
    "$(dirname "$0")/detach" rabbitmq-server >>/var/log/rabbitmq/foreground.log 2>&1 </dev/null &
    for _ in $(seq 1 120); do
        if running && rabbitmqctl -q await_startup >/dev/null 2>&1; then
            rabbitmq-plugins -q enable rabbitmq_management >/dev/null 2>&1 || true
            echo "rabbitmq: up"; exit 0
        fi
        sleep 1
    done
    echo "rabbitmq: did not start in 120 s; see /var/log/rabbitmq/" >&2; exit 1 ;;
stop) running && rabbitmqctl -q stop || true ;;
status) running && echo up || { echo down; exit 1; } ;;
*) echo "usage: $0 [ensure|stop|status]" >&2; exit 2 ;;
esac
