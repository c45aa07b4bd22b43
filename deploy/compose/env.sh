#!/bin/sh
# Print a .env for docker-compose.yml with fresh random credentials:
#   deploy/compose/env.sh > .env && chmod 600 .env
# MTS_AMQP_PASSWORD is required; MTS_API_TOKEN is the static bearer token every API accepts
# (unset: each service generates its own into its state volume); the platform admin's
# OAuth2 secret is what mecctl needs (unset: generated into the platform's volume); the
# emulated RAN's API token is shared by the testbed and the RNIS adapter.
set -eu
rand() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }
cat <<EOT
MTS_AMQP_PASSWORD=$(rand)
MTS_API_TOKEN=$(rand)
PLATFORM_ADMIN_CLIENT_SECRET=$(rand)
TESTBED_EMULATOR_TOKEN=$(rand)
EOT
