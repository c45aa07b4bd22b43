# deploy: container images, docker compose, the Helm chart (docs/deployment.md,
# docs/kubernetes.md). Tools that Debian 12 lacks (compose v2, helm, Kubernetes) are built
# once from pinned versions and cached in $(MTS_CACHE); so are the local base images.
APT_PACKAGES += docker.io debootstrap etcd-server openssl
TEST_TARGETS += test-deploy

MTS_CACHE ?= /var/cache/mts
export MTS_CACHE

.PHONY: deploy-tools compose-plugin kube-tools docker-engine base-images images test-deploy \
	test-deploy-chart test-deploy-compose

deploy-tools: compose-plugin ## build docker compose v2 and helm (once; cached in $(MTS_CACHE)/bin)
	@deploy/scripts/tools.sh helm

# Built here, not inside the chart test: a cold build takes 15-30 min, longer than the
# test's hang guard, so a fresh machine would otherwise fail its first `make test`.
kube-tools: system ## build the Kubernetes control-plane binaries (once; cached in $(MTS_CACHE)/bin)
	@deploy/scripts/tools.sh kube

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
	uv run pytest -q deploy/tests/test_compose.py
