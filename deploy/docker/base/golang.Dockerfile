# Local stand-in for golang:1.2x-bookworm: the Debian 12 image plus the host's Go toolchain
# (copied from /usr/local/go, the same path the official image uses).
ARG DEBIAN_IMAGE=mts-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
COPY go /usr/local/go
ENV PATH=/usr/local/go/bin:/root/go/bin:$PATH GOTOOLCHAIN=local
