#!/usr/bin/env bash
# Build the suite's images from deploy/docker/Dockerfile, one target per service, tagged
# $MTS_REGISTRY/<service>:$MTS_TAG (default mts/<service>:latest, the names
# docker-compose.yml and the Helm chart use).
#
#   build-images.sh [SERVICE...]     default: every service
#
# Base images: the local ones from base-images.sh unless MTS_PUBLIC_BASE=1 (then the
# Dockerfile's public defaults, for machines that can pull). Extra CA for registries behind
# a TLS-intercepting proxy: MTS_BUILD_CA=FILE (default: this machine's CA bundle).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
docker=/usr/bin/docker
registry=${MTS_REGISTRY:-mts}
tag=${MTS_TAG:-latest}
ca=${MTS_BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}
services=(mec-host rabbitmq mec-platform rnis-adapter pep path-manager flowrtt dashboard testbed pause)

(($#)) && services=("$@")
base_args=()
[[ ${MTS_PUBLIC_BASE:-0} == 1 ]] || read -ra base_args <<<"$("$here/base-images.sh")"
secret=()
[[ -s $ca ]] && secret=(--secret "id=ca,src=$ca")

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for service in "${services[@]}"; do
    start=$SECONDS
    printf 'images: %-14s ' "$service"
    if ! DOCKER_BUILDKIT=1 "$docker" build --progress=plain -f "$root/deploy/docker/Dockerfile" \
        --target "$service" -t "$registry/$service:$tag" "${base_args[@]}" "${secret[@]}" \
        "$root" >"$log" 2>&1; then
        echo "FAILED"
        tail -n 40 "$log" >&2
        exit 1
    fi
    size=$("$docker" image inspect -f '{{.Size}}' "$registry/$service:$tag")
    printf '%s:%s  %4d MB  %3d s\n' "$registry/$service" "$tag" $((size / 1000000)) \
        $((SECONDS - start))
done
