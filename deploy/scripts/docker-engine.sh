#!/usr/bin/env bash
# Start Debian's Docker engine if it is not running (there is no systemd on the CI machine)
# and wait until it answers. Usage: docker-engine.sh [ensure|stop|status]
#
# Debian's docker.io ships the engine (dockerd 20.10, with BuildKit built in) and its CLI
# as /usr/bin/docker; we always use that CLI: newer CLIs found earlier on PATH want the
# buildx plugin for BuildKit builds, which Debian 12 does not package.
set -euo pipefail
docker=/usr/bin/docker
log=/var/log/mts-dockerd.log
pidfile=/run/docker.pid

running() { "$docker" info >/dev/null 2>&1; }

case ${1:-ensure} in
ensure)
    running && exit 0
    echo "docker-engine: starting dockerd (log: $log)"
    # cgroupfs: there is no systemd to delegate cgroups to.
    "$(dirname "$0")/../../scripts/detach" dockerd --pidfile "$pidfile" --exec-opt native.cgroupdriver=cgroupfs \
        >>"$log" 2>&1 </dev/null &
    for _ in $(seq 1 60); do
        if running; then echo "docker-engine: up"; exit 0; fi
        sleep 1
    done
    echo "docker-engine: dockerd did not answer in 60 s; see $log" >&2
    tail -n 20 "$log" >&2
    exit 1
    ;;
stop)
    [[ -f $pidfile ]] || exit 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || exit 0
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 1; done
    echo "docker-engine: dockerd $pid still running after 30 s" >&2
    exit 1
    ;;
status) running && echo up || { echo down; exit 1; } ;;
*) echo "usage: $0 [ensure|stop|status]" >&2; exit 2 ;;
esac
