#!/usr/bin/env bash
# Build the deployment tools that Debian 12 does not ship in a usable version, from pinned
# Go module versions, once: results are cached in $MTS_CACHE/bin (default /var/cache/mts)
# and reused by every later run (a clean clone included).
#
#   tools.sh compose   docker compose v2 plugin  -> /usr/local/lib/docker/cli-plugins/
#   tools.sh helm      helm v3                    -> $MTS_CACHE/bin/helm
#   tools.sh kube      kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
#                      kube-proxy (deploy/k8s/tools/go.mod)
#                      -> $MTS_CACHE/bin/
#   tools.sh coredns   CoreDNS, the cluster DNS of deploy/k8s/cluster.sh's node
#                      -> $MTS_CACHE/bin/coredns
#   tools.sh path      print the directory to put on PATH
set -euo pipefail

COMPOSE_VERSION=v2.29.7
HELM_VERSION=v3.16.3
HELM_KUBE_MINOR=31  # helm v3.16 is built with client-go v0.31
KUBE_VERSION=v1.31.4
COREDNS_VERSION=v1.11.3
KUBE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)

here=$(cd "$(dirname "$0")" && pwd)
cache=${MTS_CACHE:-/var/cache/mts}
bin=$cache/bin
mkdir -p "$bin"
export PATH=/usr/local/go/bin:$PATH
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

# go_install PKG VERSION NAME: `go install PKG@VERSION` into $bin/NAME-VERSION, niced
# (other builds share the machine), then link $bin/NAME to it.
go_install() {
    local pkg=$1 version=$2 name=$3 tmp
    if [[ ! -x $bin/$name-$version ]]; then
        echo "tools: building $name $version (a few minutes, once; cached in $bin)"
        tmp=$(mktemp -d)
        GOBIN=$tmp nice -n 10 go install -trimpath -ldflags="-s -w $4" "$pkg@$version"
        mv "$tmp/$(basename "$pkg")" "$bin/$name-$version"
        rm -rf "$tmp"
    fi
    ln -sfn "$name-$version" "$bin/$name"
}

compose() {
    go_install github.com/docker/compose/v2/cmd "$COMPOSE_VERSION" docker-compose \
        "-X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION"
    install -d /usr/local/lib/docker/cli-plugins
    ln -sfn "$bin/docker-compose" /usr/local/lib/docker/cli-plugins/docker-compose
}

helm() {
    # The Kubernetes version helm assumes without a cluster (helm template, lint): that of
    # its client-go, as helm's own Makefile sets it.
    local k8s="-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
    k8s+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_KUBE_MINOR"
    k8s+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"
    k8s+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_KUBE_MINOR"
    go_install helm.sh/helm/v3/cmd/helm "$HELM_VERSION" helm \
        "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION $k8s"
}

coredns() {
    go_install github.com/coredns/coredns "$COREDNS_VERSION" coredns ""
}

kube() {
    local missing=() b
    for b in "${KUBE_BINARIES[@]}"; do
        [[ -x $bin/$b-$KUBE_VERSION ]] || missing+=("$b")
    done
    if ((${#missing[@]})); then
        echo "tools: building ${missing[*]} $KUBE_VERSION (15-30 min, once; cached in $bin)"
        local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION"
        ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
        local minor=${KUBE_VERSION#v1.}
        ldflags+=" -X k8s.io/component-base/version.gitMinor=${minor%%.*}"
        ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
        for b in "${missing[@]}"; do
            (cd "$here/../k8s/tools" && nice -n 15 go build -p 2 -trimpath -ldflags="$ldflags" \
                -o "$bin/$b-$KUBE_VERSION" "k8s.io/kubernetes/cmd/$b")
        done
    fi
    for b in "${KUBE_BINARIES[@]}"; do ln -sfn "$b-$KUBE_VERSION" "$bin/$b"; done
}

case ${1:-} in
compose | helm | kube | coredns) "$1" ;;
path) echo "$bin" ;;
*) echo "usage: $0 compose|helm|kube|coredns|path" >&2; exit 2 ;;
esac
