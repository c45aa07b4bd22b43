#!/usr/bin/env bash
# Install what the suite needs on a Debian 12 machine (root). Idempotent and quick
# when everything is already there: only missing packages go to apt-get.
set -euo pipefail

# Packages every component needs; components add theirs in mk/<component>.mk (APT_PACKAGES).
packages=("$@")
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # rabbitmq-server and postgresql try to start through invoke-rc.d; we start them ourselves.
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    apt-get update -qq || true
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# uv: from PyPI (its installer script lives on a host we may not reach).
if ! command -v uv >/dev/null 2>&1; then
    echo "setup: installing uv"
    python3 -m pip install -q uv 2>/dev/null || python3 -m pip install -q --break-system-packages uv
fi
