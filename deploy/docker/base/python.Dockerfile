# Local stand-in for python:3.11-slim, built on the debootstrapped Debian 12 image (no image
# registry is reachable on the build machine). Debian 12's python3 is 3.11.
ARG DEBIAN_IMAGE=mts-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv python3-pip \
    && rm -rf /var/lib/apt/lists/*
ENV LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
