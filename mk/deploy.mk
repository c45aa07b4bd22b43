# deploy: container images, docker compose, the Helm chart (docs/deployment.md,
# docs/kubernetes.md). Tools that Debian 12 lacks (compose v2, helm, Kubernetes) are built
# once from pinned versions and cached in $(MTS_CACHE); so are the local base images.
APT_PACKAGES += docker.io debootstrap etcd-server openssl
# The Kubernetes node of test-k8s (deploy/k8s/node.sh): its container runtime and CNI.
APT_PACKAGES += containerd runc containernetworking-plugins conntrack socat
TEST_TARGETS += test-deploy test-k8s

MTS_CACHE ?= /var/cache/mts
export MTS_CACHE

.PHONY: deploy-tools compose-plugin kube-tools docker-engine base-images images test-deploy \
	test-deploy-chart test-deploy-compose test-k8s

deploy-tools: compose-plugin ## build docker compose v2 and helm (once; cached in $(MTS_CACHE)/bin)
	@deploy/scripts/tools.sh helm

# Built here, not inside the chart test: a cold build takes 15-30 min, longer than the
# test's hang guard, so a fresh machine would otherwise fail its first `make test`.
kube-tools: system ## build the Kubernetes binaries and CoreDNS (once; cached in $(MTS_CACHE)/bin)
	@deploy/scripts/tools.sh kube
	@deploy/scripts/tools.sh coredns

compose-plugin: system ## docker compose v2 only (the MEC host of docs/oai-testbed.md; cached)
	@deploy/scripts/tools.sh compose

docker-engine: system ## start Debian's Docker engine if it is not running
	@deploy/scripts/docker-engine.sh ensure

base-images: docker-engine ## local Debian/Python/Go base images (debootstrap, cached)
	@deploy/scripts/base-images.sh >/dev/null

images: base-images ## build every service image with the local base images
	@deploy/scripts/build-images.sh

test-deploy: test-deploy-chart test-deploy-compose ## every deployment test

test-deploy-chart: python deploy-tools kube-tools images ## helm lint, API-server validation, install; chart containers in Docker
	uv run pytest -q deploy/tests/test_chart.py deploy/tests/test_config.py

# The host-mode test runs the RAN emulator on the machine (build/bin/ran-emulator).
test-deploy-compose: python deploy-tools images build/bin/ran-emulator ## compose up (emulated; host mode beside a RAN outside compose; a taken port), checks, down
	uv run pytest -q deploy/tests/test_compose.py deploy/tests/test_host_check.py

# A real single-node cluster on this machine (deploy/k8s/cluster.sh + node.sh): the chart's
# Pods run, the suite works end to end through them, upgrade/rollback/uninstall
# (docs/kubernetes.md). One node per machine at a time (a lock); the node's changes to the
# machine are undone at the end.
test-k8s: python deploy-tools kube-tools images build/bin/ran-emulator ## the chart on a real node: Pods Ready, end to end, upgrade, rollback, uninstall
	uv run pytest -q deploy/tests/test_k8s.py
