# Helpers of cluster.sh and node.sh (sourced): processes started in the background with
# their log and pid files in $logdir, and waiting for them.

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start NAME CMD...: run CMD in a session of its own, logging to $logdir/NAME.log, pid in
# $logdir/NAME.pid.
start() {
    local name=$1; shift
    setsid "$@" >"$logdir/$name.log" 2>&1 </dev/null &
    echo $! >"$logdir/$name.pid"
}

wait_for() { # wait_for WHAT SECONDS CMD...
    local what=$1 seconds=$2; shift 2
    for _ in $(seq 1 "$((seconds * 2))"); do "$@" >/dev/null 2>&1 && return; sleep 0.5; done
    echo "$(basename "$0"): $what not ready after $seconds s; logs in $logdir" >&2
    return 1
}
