#!/usr/bin/env bash
# Build the local base images the service images start from, for machines that cannot pull
# from an image registry (the CI machine): Debian 12 from debootstrap, imported with
# `docker import`, and the Python and Go bases derived from it. Each image carries the key
# of what it was built from (label mts.base.key) and is only rebuilt when that changes; the
# debootstrap tarball is cached in $MTS_CACHE/rootfs (default /var/cache/mts), so a new
# Docker data root costs an import, not a download.
#
#   base-images.sh            build whatever is missing, print the --build-arg flags
#   base-images.sh build-args print the --build-arg flags only
#
# With a registry at hand, skip this: the Dockerfiles default to the public images
# (debian:bookworm-slim, python:3.11-slim, golang:1.24-bookworm).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
docker=/usr/bin/docker
cache=${MTS_CACHE:-/var/cache/mts}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# ca-certificates so that HTTPS works in every image; the rest of minbase is Debian's.
debootstrap_packages=ca-certificates

DEBIAN_IMAGE=mts-local/debian:bookworm
PYTHON_IMAGE=mts-local/python:3.11-bookworm
GO_IMAGE=mts-local/golang:bookworm

build_args() {
    echo "--build-arg DEBIAN_IMAGE=$DEBIAN_IMAGE --build-arg PYTHON_IMAGE=$PYTHON_IMAGE" \
        "--build-arg GO_IMAGE=$GO_IMAGE"
}

# slim ROOT: what debian:bookworm-slim leaves out (docs, man pages, translations), also
# for packages installed later; and no apt caches.
slim() {
    local d
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
        'path-exclude /usr/share/locale/*' 'path-include /usr/share/locale/locale.alias' \
        >"$1/etc/dpkg/dpkg.cfg.d/mts-slim"
    for d in "$1"/usr/share/{man,info,locale}/*; do
        [[ $d == */locale.alias ]] || rm -rf "$d"
    done
    find "$1/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*
}

key_of() { sha256sum | cut -c1-16; }
image_key() { "$docker" image inspect -f '{{index .Config.Labels "mts.base.key"}}' "$1" 2>/dev/null || true; }

debian() {
    local key tarball tmp
    key=$( (echo "bookworm minbase $debootstrap_packages $mirror"; declare -f slim) | key_of)
    [[ $(image_key "$DEBIAN_IMAGE") == "$key" ]] && return
    tarball=$cache/rootfs/debian-bookworm-$key.tar
    if [[ ! -s $tarball ]]; then
        echo "base-images: debootstrap Debian 12 (about 2 min, once; cached in $tarball)"
        mkdir -p "$cache/rootfs"
        tmp=$(mktemp -d)
        trap 'rm -rf "$tmp"' RETURN
        nice -n 10 debootstrap --variant=minbase --include="$debootstrap_packages" \
            bookworm "$tmp/root" "$mirror" >"$tmp/debootstrap.log" 2>&1 \
            || { tail -n 20 "$tmp/debootstrap.log" >&2; return 1; }
        slim "$tmp/root"
        tar -C "$tmp/root" --numeric-owner -cf "$tarball.part" .
        mv "$tarball.part" "$tarball"
    fi
    echo "base-images: importing $DEBIAN_IMAGE"
    "$docker" import --change "LABEL mts.base.key=$key" --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$tarball" "$DEBIAN_IMAGE" >/dev/null
}

# derived IMAGE DOCKERFILE CONTEXT KEY-INPUT: docker build FROM the Debian image.
derived() {
    local image=$1 dockerfile=$2 context=$3 key
    key=$( (image_key "$DEBIAN_IMAGE"; cat "$dockerfile"; echo "$4") | key_of)
    [[ $(image_key "$image") == "$key" ]] && return
    echo "base-images: building $image"
    DOCKER_BUILDKIT=1 nice -n 10 "$docker" build --quiet --network host \
        --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" --label "mts.base.key=$key" \
        -f "$dockerfile" -t "$image" "$context" >/dev/null
}

python() { derived "$PYTHON_IMAGE" "$here/../docker/base/python.Dockerfile" "$here/../docker/base" ""; }

golang() {
    # The context is a copy of the host toolchain (the Makefile's Go), refreshed with it.
    local version context=$cache/golang-context
    version=$(/usr/local/go/bin/go version)
    if [[ $(cat "$context/version" 2>/dev/null) != "$version" ]]; then
        rm -rf "$context" && mkdir -p "$context"
        cp -a /usr/local/go "$context/go"
        echo "$version" >"$context/version"
    fi
    derived "$GO_IMAGE" "$here/../docker/base/golang.Dockerfile" "$context" "$version"
}

case ${1:-all} in
all) debian; python; golang; build_args ;;
build-args) build_args ;;
*) echo "usage: $0 [all|build-args]" >&2; exit 2 ;;
esac
