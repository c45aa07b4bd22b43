#!/usr/bin/env bash
# A real Kubernetes control plane on this machine, for testing the Helm chart: etcd
# (Debian's etcd-server), kube-apiserver and kube-controller-manager v1.31 (built once by
# deploy/scripts/tools.sh kube). Every port is picked free and every file lives in DIR, so
# several clusters (several test runs) can coexist.
#
#   cluster.sh up DIR     start it; prints the kubeconfig path (DIR/kubeconfig)
#   cluster.sh down DIR   stop everything started from DIR and remove DIR
#
# Alone, there is no node (no kubelet, no scheduler): objects are validated, admitted, stored
# and reconciled by the controllers (a Deployment gets a ReplicaSet, which creates Pods), but
# Pods never run. `node.sh up DIR` adds a scheduler and a node (docs/kubernetes.md).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=$("$here/../scripts/tools.sh" path)

# shellcheck source=lib.sh
. "$here/lib.sh"

certs() {
    # A CA, the apiserver's serving cert (for 127.0.0.1), the service-account key pair.
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=mts-test-ca \
        -keyout "$dir/ca.key" -out "$dir/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
        -keyout "$dir/apiserver.key" -out "$dir/apiserver.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >"$dir/san.ext"
    openssl x509 -req -in "$dir/apiserver.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 2 -extfile "$dir/san.ext" -out "$dir/apiserver.crt" 2>/dev/null
    # The apiserver's client certificate towards kubelets (logs, exec, port-forward).
    openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
        -keyout "$dir/kubelet-client.key" -out "$dir/kubelet-client.csr" 2>/dev/null
    openssl x509 -req -in "$dir/kubelet-client.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 2 -out "$dir/kubelet-client.crt" 2>/dev/null
    openssl genrsa -out "$dir/sa.key" 2048 2>/dev/null
    openssl rsa -in "$dir/sa.key" -pubout -out "$dir/sa.pub" 2>/dev/null
}

kubeconfig() { # kubeconfig FILE URL TOKEN
    cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: mts-test
  cluster: {server: "$2", certificate-authority: "$dir/ca.crt"}
users:
- name: admin
  user: {token: "$3"}
contexts:
- name: mts-test
  context: {cluster: mts-test, user: admin}
current-context: mts-test
EOF
}

up() {
    mkdir -p "$dir"
    "$here/../scripts/tools.sh" kube
    certs
    local etcd_port etcd_peer api_port token url
    etcd_port=$(free_port) etcd_peer=$(free_port) api_port=$(free_port)
    token=$(openssl rand -hex 16)
    url=https://127.0.0.1:$api_port
    echo "$token,admin,admin,system:masters" >"$dir/tokens.csv"
    kubeconfig "$dir/kubeconfig" "$url" "$token"

    start etcd etcd --name default --data-dir "$dir/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" \
        --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-cluster "default=http://127.0.0.1:$etcd_peer"
    wait_for etcd 30 curl -sf "http://127.0.0.1:$etcd_port/health"

    start kube-apiserver "$bin/kube-apiserver" \
        --etcd-servers "http://127.0.0.1:$etcd_port" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
        --tls-cert-file "$dir/apiserver.crt" --tls-private-key-file "$dir/apiserver.key" \
        --client-ca-file "$dir/ca.crt" --token-auth-file "$dir/tokens.csv" \
        --authorization-mode RBAC --allow-privileged \
        --service-cluster-ip-range 10.96.0.0/16 \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$dir/sa.pub" \
        --service-account-signing-key-file "$dir/sa.key" \
        --kubelet-client-certificate "$dir/kubelet-client.crt" \
        --kubelet-client-key "$dir/kubelet-client.key" \
        --kubelet-preferred-address-types InternalIP,Hostname
    wait_for kube-apiserver 90 curl -sf --cacert "$dir/ca.crt" -H "Authorization: Bearer $token" \
        "$url/readyz"

    start kube-controller-manager "$bin/kube-controller-manager" \
        --kubeconfig "$dir/kubeconfig" --bind-address 127.0.0.1 --secure-port 0 \
        --service-account-private-key-file "$dir/sa.key" --root-ca-file "$dir/ca.crt" \
        --use-service-account-credentials=false --leader-elect=false
    # The controller manager creates each namespace's "default" service account.
    wait_for "service accounts" 60 curl -sf --cacert "$dir/ca.crt" \
        -H "Authorization: Bearer $token" "$url/api/v1/namespaces/default/serviceaccounts/default"
    echo "$dir/kubeconfig"
}

down() {
    local pidfile pid
    # A node of this cluster first (it restores what it changed on the machine).
    [[ -d $dir/node ]] && "$here/node.sh" down "$dir"
    for pidfile in "$dir"/{kube-controller-manager,kube-apiserver,etcd}.pid; do
        [[ -f $pidfile ]] || continue
        pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || continue
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$dir"
}

cmd=${1:-}
dir=${2:-}
[[ -n $dir ]] || { echo "usage: $0 up|down DIR" >&2; exit 2; }
dir=$(realpath -m "$dir")
logdir=$dir
case $cmd in
up | down) "$cmd" ;;
*) echo "usage: $0 up|down DIR" >&2; exit 2 ;;
esac
