#!/usr/bin/env bash
# A real Kubernetes node on this machine, joined to the control plane that cluster.sh started
# in the same DIR: kube-scheduler, a containerd of its own (own root, state and socket, not
# Docker's), CNI (Debian's plugins: bridge -> portmap -> firewall), kubelet and kube-proxy
# v1.31 (deploy/scripts/tools.sh kube), CoreDNS for Service names (tools.sh coredns), the
# pause image and the suite's images imported from Docker. docs/kubernetes.md explains
# every setting.
#
#   node.sh up DIR      after `cluster.sh up DIR`; waits for the Node to be Ready
#   node.sh down DIR    stop it and undo every change it made to the machine (before
#                       `cluster.sh down DIR`)
#   node.sh restart DIR restart the kubelet and containerd (a node reboot, for the tests)
#   node.sh join DIR    a second node (a worker) in a network namespace of this machine:
#                       its own containerd (root, state, socket), CNI bridge and pod range,
#                       kubelet and kube-proxy, its node IP in the namespace; registered to
#                       the same apiserver (after `up`; `down` removes it first)
#
# A kubelet and kube-proxy change machine-wide state (iptables chains KUBE-*, CNI-*; the
# sysctls of SYSCTLS): one node at a time on a machine, under a lock held while it runs;
# `down` restores the sysctls and removes the chains, the bridge, mounts and cgroups.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$("$root/deploy/scripts/tools.sh" path)
docker=/usr/bin/docker
LOCK=/run/lock/mts-k8s-node.lock
LOCK_WAIT=${MTS_K8S_LOCK_WAIT:-1200}  # another run's node (a whole test) may hold it
# Images survive runs (a warm start imports nothing): containerd's root is kept here.
CONTAINERD_ROOT=${MTS_K8S_CONTAINERD_ROOT:-/var/lib/mts-k8s/containerd}
BRIDGE=mtsk8s0
POD_CIDR=10.244.0.0/24
GATEWAY=10.244.0.1  # the bridge's address: pods' gateway
CLUSTER_DNS=10.244.0.1  # CoreDNS, on the first node's bridge (every node's pods use it)
CGROUP_ROOT=/mts-k8s  # the kubelet's pods live under it in every cgroup v1 hierarchy
IMAGES=(pause rabbitmq mec-platform rnis-adapter pep path-manager dashboard)
# Kernel settings the kubelet (defaults it enforces) and kube-proxy write: restored by down.
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
    kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet
    net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables)

# shellcheck source=lib.sh
. "$here/lib.sh"

api() { # api PATH [CURL-ARGS...]: GET (by default) on the control plane, as the admin
    local path=$1; shift
    curl -sf --max-time 10 --cacert "$dir/ca.crt" "$@" \
        -H "Authorization: Bearer $(cut -d, -f1 "$dir/tokens.csv")" \
        "$(sed -n 's/.*server: "\([^"]*\)".*/\1/p' "$dir/kubeconfig")$path"
}
api_delete() { api "$1" -X DELETE >/dev/null; }

lock() {
    # Held by a process of the node's own session, so it is released when down stops it,
    # or when the whole node dies.
    mkdir -p "$(dirname "$LOCK")"
    setsid flock -w "$LOCK_WAIT" "$LOCK" sh -c "touch '$node/locked'; exec sleep infinity" \
        </dev/null >/dev/null 2>&1 &
    echo $! >"$node/lock.pid"
    for _ in $(seq 1 "$((LOCK_WAIT * 2))"); do
        [[ -f $node/locked ]] && return
        kill -0 "$(cat "$node/lock.pid")" 2>/dev/null || break
        sleep 0.5
    done
    echo "node: another node holds $LOCK (waited $LOCK_WAIT s)" >&2
    return 1
}

bpffs_shared() {
    # The PEP mounts the node's bpffs with HostToContainer propagation, which the runtime
    # refuses on a private mount (systemd makes every mount shared; this machine has no
    # systemd). Made shared for the node's lifetime; down makes it private again.
    # Mounts can be stacked at /sys/fs/bpf (some machines bind sysfs's fs/bpf under the
    # bpffs). containerd checks the first one listed, `mount --make-shared PATH` reaches
    # only the top one, so a stack is made shared from /sys down, as systemd has it.
    local props
    props=$(findmnt -nl -o PROPAGATION --mountpoint /sys/fs/bpf 2>/dev/null | sort -u)
    [[ $props == *private* ]] || return 0
    if (($(findmnt -nl -o TARGET --mountpoint /sys/fs/bpf | wc -l) == 1)); then
        mount --make-shared /sys/fs/bpf
        touch "$node/bpffs.was-private"
    elif [[ $(findmnt -R -nl -o PROPAGATION /sys | sort -u) == private ]]; then
        mount --make-rshared /sys
        touch "$node/sysfs.was-private"
    else
        echo "node: /sys/fs/bpf is stacked and private, and /sys mixes propagations;" \
            "make /sys/fs/bpf shared by hand" >&2
        return 1
    fi
}

save_sysctls() {
    local key
    for key in "${SYSCTLS[@]}"; do
        [[ -e /proc/sys/${key//.//} ]] && echo "$key=$(sysctl -n "$key")"
    done >"$node/sysctls.saved"
}

containerd_up() {
    mkdir -p "$CONTAINERD_ROOT" "$node/containerd" "$node/cni/net.d"
    # restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, so a negative
    # oom_score_adj (the pause container's -998) fails every sandbox. No systemd: cgroupfs.
    cat >"$node/containerd/config.toml" <<EOF
version = 2
root = "$CONTAINERD_ROOT"
state = "$node/containerd/state"
[grpc]
  address = "$node/containerd/containerd.sock"
[ttrpc]
  address = "$node/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/mts/pause:latest"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$node/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$node/cni/net.d"
EOF
    start containerd "${NS[@]}" containerd --config "$node/containerd/config.toml"
    wait_for containerd 60 ctr --address "$node/containerd/containerd.sock" version
}

ctr_() { ctr --address "$node/containerd/containerd.sock" -n k8s.io "$@"; }

import_image() { # import_image NAME: Docker's build into containerd, tried up to 3 times
    # An import can fail while containerd's garbage collector removes a parent snapshot
    # the unpack is building on (containerd/containerd#2382, #3787). Seen once here, in a
    # clean-clone CI run on 2026-11-27 ("parent snapshot ... does not exist"), where the
    # same import passed in the next run: a race, so the import is tried again.
    local try
    for try in 1 2 3; do
        "$docker" save "mts/$1:latest" | ctr_ images import - >/dev/null && return
        echo "node: importing mts/$1:latest failed (try $try of 3)" >&2
        sleep 2
    done
    return 1
}

import_images() {
    # An image is imported again only when Docker's build differs from the one containerd
    # has: Docker's image ID is the digest of its config, which containerd keeps.
    local image id
    for image in "${IMAGES[@]}"; do
        id=$("$docker" image inspect -f '{{.Id}}' "mts/$image:latest")
        if ! ctr_ images ls "name==docker.io/mts/$image:latest" 2>/dev/null | grep -q . ||
            [[ $(cat "$CONTAINERD_ROOT/mts-$image.id" 2>/dev/null) != "$id" ]]; then
            import_image "$image"
            echo "$id" >"$CONTAINERD_ROOT/mts-$image.id"
            echo "node: imported mts/$image:latest"
        fi
    done
}

prune_images() {
    # Every import leaves the previous build behind: the CRI plugin names each image also by
    # its ID (sha256:<config>), and that name keeps the old layers and snapshots alive. The
    # root is the suite's own (only node.sh imports into it): every image there that is not
    # the current build of one of IMAGES goes, and containerd's GC frees its content and
    # snapshots (--sync: before the node starts).
    local keep ref digest
    keep=$(for image in "${IMAGES[@]}"; do
        ctr_ images ls "name==docker.io/mts/$image:latest" | awk 'NR > 1 {print $3}'
    done)
    ctr_ images ls | awk 'NR > 1 {print $1, $3}' | while read -r ref digest; do
        grep -qx "$digest" <<<"$keep" && continue
        ctr_ images rm --sync "$ref" >/dev/null
        echo "node: pruned $ref"
    done
}

cni_up() {
    # The bridge exists before the first pod so that CoreDNS can listen on its address.
    "${NS[@]}" ip link add "$BRIDGE" type bridge
    "${NS[@]}" ip addr add "$GATEWAY/${POD_CIDR#*/}" dev "$BRIDGE"
    "${NS[@]}" ip link set "$BRIDGE" up
    # firewall: Docker sets the FORWARD policy to DROP; the plugin accepts the pods' traffic.
    cat >"$node/cni/net.d/10-mts.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "mts-k8s",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$node/cni/ipam",
              "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$GATEWAY"}]],
              "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"}
  ]
}
EOF
}

coredns_up() {
    cat >"$node/Corefile" <<EOF
.:53 {
    bind $GATEWAY
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $dir/kubeconfig mts-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf
    cache 30
}
EOF
    start coredns "$bin/coredns" -conf "$node/Corefile"
}

kubelet_up() {
    local node_ip=$1 name=$2 port
    port=$(free_port)
    # The kubelet checks that its cgroup root exists in every hierarchy.
    for h in /sys/fs/cgroup/*/; do
        [[ -d $h && ! -L ${h%/} ]] && mkdir -p "$h${CGROUP_ROOT#/}"
    done
    # Disk thresholds are absolute and image GC is off: a percentage of a large disk can
    # exceed what a machine may really use (CI saw 4.7 GB free under a 5.4 GB = 2 %
    # threshold), and the eviction that followed deleted the pause image, which the node
    # cannot pull back without a registry. node.sh prunes the node's images itself.
    cat >"$node/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: $port
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $dir/ca.crt}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$node/containerd/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
failSwapOn: false
failCgroupV1: false
oomScoreAdj: 0
clusterDNS: [$CLUSTER_DNS]
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $node/pod-logs
makeIPTablesUtilChains: false
serializeImagePulls: false
evictionHard: {memory.available: 100Mi, nodefs.available: 512Mi, imagefs.available: 512Mi}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerWithTaints: [${TAINTS[*]}]
EOF
    start kubelet "${NS[@]}" "$bin/kubelet" --config "$node/kubelet.yaml" --kubeconfig "$dir/kubeconfig" \
        --root-dir "$node/kubelet" --hostname-override "$name" --node-ip "$node_ip" --v 1
}

kube_proxy_up() {
    local name=$1
    # 0: leave the machine's conntrack settings alone; no localhost NodePorts
    # (route_localnet stays as it is).
    start kube-proxy "${NS[@]}" "$bin/kube-proxy" --kubeconfig "$dir/kubeconfig" --hostname-override "$name" \
        --proxy-mode iptables --cluster-cidr "$POD_CIDR" --oom-score-adj 0 \
        --conntrack-max-per-core 0 --conntrack-tcp-timeout-established 0 \
        --conntrack-tcp-timeout-close-wait 0 --iptables-localhost-nodeports=false \
        --healthz-bind-address "127.0.0.1:$(free_port)" \
        --metrics-bind-address "127.0.0.1:$(free_port)"
}

scheduler_up() {
    start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$dir/kubeconfig" \
        --authentication-kubeconfig "$dir/kubeconfig" --authorization-kubeconfig "$dir/kubeconfig" \
        --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false
}

node_ready() {
    api "/api/v1/nodes/$1" | python3 -c 'import json,sys; n=json.load(sys.stdin); sys.exit(0 if any(c["type"]=="Ready" and c["status"]=="True" for c in n["status"]["conditions"]) else 1)'
}

up() {
    [[ -f $dir/kubeconfig ]] || { echo "node: no control plane in $dir (cluster.sh up first)" >&2; exit 1; }
    mkdir -p "$node"
    "$root/deploy/scripts/tools.sh" kube >/dev/null
    "$root/deploy/scripts/tools.sh" coredns >/dev/null
    lock
    local node_ip name
    node_ip=$(ip -4 route get 1.1.1.1 | sed -n 's/.* src \([0-9.]*\).*/\1/p')
    name=mts-node-$(basename "$dir" | tr -c 'a-z0-9\n' '-' | cut -c1-40)
    echo "$name" >"$node/name"
    echo "$node_ip" >"$node/ip"
    save_sysctls
    nft list tables >"$node/nft-tables.before"
    bpffs_shared
    scheduler_up
    containerd_up
    import_images
    prune_images
    cni_up
    coredns_up
    kubelet_up "$node_ip" "$name"
    kube_proxy_up "$name"
    wait_for "node $name" 120 node_ready "$name"
    echo "$name"
}

stop() { # stop NAME: SIGTERM, then SIGKILL after 10 s
    local pidfile=$node/$1.pid pid
    [[ -f $pidfile ]] || return 0
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
}

remove_pods() {
    # Through the API while the kubelet runs: it stops each pod through the CRI, so
    # containerd tears its network down with CNI. What is left after 60 s is killed.
    local name pods
    name=$(cat "$node/name" 2>/dev/null) || return 0
    pods=$(api "/api/v1/pods?fieldSelector=spec.nodeName%3D$name" | python3 -c '
import json, sys
for p in json.load(sys.stdin)["items"]:
    print(p["metadata"]["namespace"] + "/" + p["metadata"]["name"])' 2>/dev/null) || return 0
    local pod
    for pod in $pods; do
        api_delete "/api/v1/namespaces/${pod%/*}/pods/${pod#*/}?gracePeriodSeconds=0" || true
    done
    for _ in $(seq 1 120); do
        [[ -z $(ctr_ tasks ls -q 2>/dev/null) ]] && return 0
        sleep 0.5
    done
}

kill_containers() {
    [[ -S $node/containerd/containerd.sock ]] || return 0
    local task
    for task in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks kill -s SIGKILL "$task" 2>/dev/null || true; done
    sleep 1
    for task in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$task" 2>/dev/null || true; done
    for task in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$task" 2>/dev/null || true; done
}

remove_iptables() {
    # Chains of kube-proxy (KUBE-*), the kubelet's canaries and the CNI plugins (CNI-*):
    # rules that jump to them first, then the chains.
    local cmd table rule chain
    for cmd in iptables ip6tables; do
        for table in filter nat mangle; do
            { "$cmd" -t "$table" -S 2>/dev/null || true; } | { grep -E '^-A .* -j (KUBE|CNI)-' || true; } |
                sed 's/^-A/-D/' | while read -r rule; do
                    eval "$cmd -t $table $rule" 2>/dev/null || true
                done
            chains=$({ "$cmd" -t "$table" -S 2>/dev/null || true; } | sed -n 's/^-N \(\(KUBE\|CNI\)-[^ ]*\)$/\1/p')
            for chain in $chains; do "$cmd" -t "$table" -F "$chain" 2>/dev/null || true; done
            for chain in $chains; do "$cmd" -t "$table" -X "$chain" 2>/dev/null || true; done
        done
    done
}

remove_empty_tables() {
    # The nftables tables iptables-nft made for the kubelet and kube-proxy (ip mangle, ip6
    # filter, ...): those absent before up, if no rule is left in them.
    local family name
    nft list tables | while read -r _ family name; do
        grep -qx "table $family $name" "$node/nft-tables.before" && continue
        nft list table "$family" "$name" | grep -qvE '^\s*(table|chain|type|}|$)' && continue
        nft delete table "$family" "$name" 2>/dev/null || true
    done
}

down() {
    [[ -d $node ]] || return 0
    [[ -d $dir/worker ]] && (leave)
    if [[ ! -f $node/locked ]]; then
        # Never got the machine: what is there belongs to another node.
        stop_lock
        rm -rf "$node"
        return 0
    fi
    remove_pods
    stop kubelet
    kill_containers
    stop kube-proxy
    "$bin/kube-proxy" --cleanup >/dev/null 2>&1 || true
    stop containerd
    stop coredns
    stop kube-scheduler
    remove_iptables
    [[ -f $node/nft-tables.before ]] && remove_empty_tables
    ip link del "$BRIDGE" 2>/dev/null || true
    # Mounts the kubelet and containerd made under DIR (volumes, rootfs, netns), deepest first.
    awk -v d="$node" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
        while read -r m; do umount -l "$m" 2>/dev/null || true; done
    # cgroups, deepest first (empty now that every process is gone).
    find /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    if [[ -f $node/bpffs.was-private ]]; then
        mount --make-private /sys/fs/bpf 2>/dev/null || true
    fi
    if [[ -f $node/sysfs.was-private ]]; then
        mount --make-rprivate /sys 2>/dev/null || true
    fi
    if [[ -f $node/sysctls.saved ]]; then
        sysctl -q -p "$node/sysctls.saved" >/dev/null 2>&1 || true
    fi
    stop_lock
    rm -rf "$node"
}

stop_lock() {
    # The lock's holder is a session of its own (flock and its sleeping child).
    [[ -f $node/lock.pid ]] && kill -- "-$(cat "$node/lock.pid")" 2>/dev/null || true
    rm -f "$node/lock.pid" "$node/locked"
}

restart() {
    # A node reboot as the runtime sees it: the kubelet and containerd stop and start again
    # with the same configuration; the Pods' containers (their shims) live on meanwhile,
    # and the kubelet takes them over again.
    [[ -f $node/locked ]] || { echo "node: no node in $dir" >&2; exit 1; }
    stop kubelet
    stop containerd
    start containerd containerd --config "$node/containerd/config.toml"
    wait_for containerd 60 ctr --address "$node/containerd/containerd.sock" version
    kubelet_up "$(cat "$node/ip")" "$(cat "$node/name")"
    wait_for "node $(cat "$node/name")" 120 node_ready "$(cat "$node/name")"
}

# ---- a second node in a network namespace (join / leave) ----------------------------------
# Its hostNetwork Pods get the namespace (containerd runs in it); its kubelet and
# kube-proxy run there too (nsenter --net: `ip netns exec` would remount /sys and hide the
# cgroup and bpffs mounts). The apiserver listens on 127.0.0.1 only: the namespace's
# 127.0.0.1:<api port> is relayed to it through a unix socket (socat on each side).
WORKER_NS=mtsk8s-w1
WORKER_IP=10.245.0.2  # its node IP, on a veth to the machine (10.245.0.1)

worker() { # the settings of the worker node (called in place of the first node's)
    node=$dir/worker
    logdir=$node
    NS=(nsenter "--net=/run/netns/$WORKER_NS")
    CONTAINERD_ROOT=${MTS_K8S_WORKER_CONTAINERD_ROOT:-/var/lib/mts-k8s/containerd-worker}
    BRIDGE=mtsk8s1
    POD_CIDR=10.244.1.0/24
    GATEWAY=10.244.1.1
    CGROUP_ROOT=/mts-k8s-w1
    IMAGES=(pause pep)  # what a MEC-host node runs: the PEP DaemonSet
    # Only Pods that tolerate it run there: a release of another test (its PEP with BPF,
    # whose congestion controls and pins are per kernel) never lands on this machine twice.
    TAINTS=('{key: mts.example/worker, value: "true", effect: NoSchedule}')
}

worker_network() {
    ip netns add "$WORKER_NS"
    ip link add mtsk8sw1 type veth peer name eth0 netns "$WORKER_NS"
    ip addr add "${WORKER_IP%.*}.1/30" dev mtsk8sw1
    ip link set mtsk8sw1 up
    "${NS[@]}" ip link set lo up
    "${NS[@]}" ip addr add "$WORKER_IP/30" dev eth0
    "${NS[@]}" ip link set eth0 up
    "${NS[@]}" ip route add default via "${WORKER_IP%.*}.1"
    # One pod network over both nodes, as a CNI would make it: the worker's pod range
    # through its node IP, and forwarding to and from it (Docker's FORWARD policy is DROP).
    ip route add "$POD_CIDR" via "$WORKER_IP"
    iptables -I FORWARD -i mtsk8sw1 -j ACCEPT
    iptables -I FORWARD -o mtsk8sw1 -j ACCEPT
    local port
    port=$(sed -n 's/.*server: "https:\/\/127.0.0.1:\([0-9]*\)".*/\1/p' "$dir/kubeconfig")
    start api-relay socat "UNIX-LISTEN:$node/api.sock,fork,unlink-early" "TCP:127.0.0.1:$port"
    wait_for "api relay" 10 test -S "$node/api.sock"
    start api-relay-ns "${NS[@]}" socat "TCP-LISTEN:$port,bind=127.0.0.1,fork,reuseaddr" \
        "UNIX-CONNECT:$node/api.sock"
}

join() {
    [[ -f $node/locked ]] || { echo "node: no node in $dir (node.sh up first)" >&2; exit 1; }
    worker
    [[ ! -d $node ]] || { echo "node: $dir has a worker already" >&2; exit 1; }
    mkdir -p "$node"
    local name
    name=mts-worker-$(basename "$dir" | tr -c 'a-z0-9\n' '-' | cut -c1-38)
    echo "$name" >"$node/name"
    worker_network
    containerd_up
    import_images
    prune_images
    cni_up
    kubelet_up "$WORKER_IP" "$name"
    kube_proxy_up "$name"
    wait_for "node $name" 120 node_ready "$name"
    echo "$name"
}

leave() {
    worker
    [[ -d $node ]] || return 0
    remove_pods
    stop kubelet
    kill_containers
    stop kube-proxy
    stop containerd
    stop api-relay-ns
    stop api-relay
    api_delete "/api/v1/nodes/$(cat "$node/name")" || true
    awk -v d="$node" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
        while read -r m; do umount -l "$m" 2>/dev/null || true; done
    find /sys/fs/cgroup/*/"${CGROUP_ROOT#/}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    iptables -D FORWARD -i mtsk8sw1 -j ACCEPT 2>/dev/null || true
    iptables -D FORWARD -o mtsk8sw1 -j ACCEPT 2>/dev/null || true
    ip netns del "$WORKER_NS" 2>/dev/null || true  # its veth, route, bridge and iptables with it
    rm -rf "$node"
}

cmd=${1:-}
dir=${2:-}
[[ -n $dir ]] || { echo "usage: $0 up|down DIR" >&2; exit 2; }
dir=$(realpath -m "$dir")
node=$dir/node
logdir=$node
NS=()  # the first node runs in the machine's network namespace
TAINTS=()
case $cmd in
up | down | restart | join | leave) "$cmd" ;;
*) echo "usage: $0 up|down|restart|join|leave DIR" >&2; exit 2 ;;
esac
