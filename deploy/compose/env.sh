#!/bin/sh
# Print the .env of docker-compose.yml, the one file you edit (docs/deployment.md):
#
#   deploy/compose/env.sh emulated > .env && chmod 600 .env   # the suite + the emulated RAN
#   deploy/compose/env.sh ran > .env && chmod 600 .env        # beside a RAN you run (OAI)
#   docker compose up -d --wait
#
# Fresh random credentials each time: MTS_AMQP_PASSWORD (RabbitMQ), MTS_API_TOKEN (the
# static bearer token every API accepts), PLATFORM_ADMIN_CLIENT_SECRET (the platform
# admin's OAuth2 secret: mecctl and the Mp1 provisioning only) and, for the emulated RAN,
# the token of its API (RNIS_FLEXRAN_TOKEN, given to the emulator and the RNIS adapter).
# Compose reads .env by itself; what you set in it wins over the compose file's defaults,
# and the shell's environment wins over .env.
set -eu
rand() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

credentials() {
    cat <<EOT
# Credentials (deploy/compose/env.sh)
MTS_AMQP_PASSWORD=$(rand)
MTS_API_TOKEN=$(rand)
PLATFORM_ADMIN_CLIENT_SECRET=$(rand)
EOT
}

emulated() {
    credentials
    cat <<EOT

# The emulated RAN (profile emulated) around a private MEC-host namespace; the APIs are
# published on MTS_BIND (127.0.0.1:8100-8103, RabbitMQ 5672/15672/15692).
COMPOSE_PROFILES=emulated,flowrtt
MTS_BIND=127.0.0.1
TESTBED_SCENARIO=lte-25prb-meld
# The emulator's FlexRAN API on its backhaul address, and its token.
RNIS_FLEXRAN_URL=http://10.20.0.2:9999
RNIS_FLEXRAN_TOKEN=$(rand)
# The PEP splits the UEs' TCP (10.30/16 behind ran0) to the server network.
PEP_TRANSPARENT_PORT=8443
PEP_TPROXY_INTERFACES=ran0
PEP_ALLOWED_CLIENTS=10.30.0.0/16
PEP_ALLOWED_DESTINATIONS=10.10.0.0/24
# The flow-RTT observer (profile flowrtt) on the MEC host's RAN side.
FLOWRTT_INTERFACES=ran0
EOT
}

ran() {
    credentials
    cat <<'EOT'

# ---- This machine's network namespace (deploy/compose/host.yml): nothing is published,
# every service listens on MTS_BIND: one address of this host (127.0.0.1: this host only;
# 0.0.0.0: every address). Ports: PLATFORM_HTTP_PORT=8100, RNIS_HTTP_PORT=8101,
# PEP_HTTP_PORT=8102, PM_HTTP_PORT=8103, FLOWRTT_HTTP_PORT=8106, MTS_AMQP_PORT=5672, MTS_AMQP_MANAGEMENT_PORT=15672,
# MTS_AMQP_METRICS_PORT=15692, MTS_AMQP_DIST_PORT=25672, MTS_AMQP_EPMD_PORT=4369; set any
# of them here when something else on the machine uses it (`up` says so).
COMPOSE_FILE=docker-compose.yml:deploy/compose/host.yml
MTS_BIND=127.0.0.1
MTS_LISTEN=${MTS_BIND}
MTS_CONNECT=${MTS_BIND}
# The address clients (and other MEC apps) reach the APIs at: links and Mp1 registrations
# carry it. MTS_BIND when that is one address; this host's address when MTS_BIND=0.0.0.0.
MTS_PUBLIC_HOST=${MTS_BIND}

# ---- The RAN: the FlexRAN controller's northbound API (flexran-rtc -n 9999). No token:
# a controller needs none, and RNIS_FLEXRAN_TOKEN would be sent to it.
RNIS_FLEXRAN_URL=http://192.168.61.10:9999
# Fresh radio data for MELD: the controller reports every RNIS_REPORT_SF ms (its default
# is 100; the adapter keeps it at this value on every eNB, also after a restart), the
# adapter polls every RNIS_POLL_PERIOD, and the PEP treats radio state older than
# PEP_MELD_STALE_MS as unknown: report and poll period together must stay well below that
# bound (the adapter logs a warning when the RAN reports less often than RNIS_STALE_BOUND).
RNIS_REPORT_SF=10
RNIS_POLL_PERIOD=10ms
PEP_MELD_STALE_MS=50
RNIS_STALE_BOUND=${PEP_MELD_STALE_MS}ms
# OAI's FlexRAN agent writes sfnSn as frame*10+subframe (decimal); packed: frame<<4|subframe.
RNIS_SFN_FORMAT=decimal
# UE addresses (FlexRAN has none): IMSI or <bs_id>/<rnti> -> IPv4, a file in
# deploy/compose/rnis/ (docs/oai-testbed.md#ue-addresses).
RNIS_IP_MAP=/etc/mts/rnis/ip-map.json

# ---- The PEP on the UEs' path: TCP from PEP_ALLOWED_CLIENTS (the core network's UE pool)
# entering on PEP_TPROXY_INTERFACES (empty: any) toward PEP_ALLOWED_DESTINATIONS is split
# here. Nothing is relayed until both networks are set.
PEP_TRANSPARENT_PORT=8443
PEP_TPROXY_INTERFACES=
PEP_ALLOWED_CLIENTS=12.1.1.0/24
PEP_ALLOWED_DESTINATIONS=
PEP_MELD_MODE=meld-me

# ---- The flow-RTT observer (docs/l4s.md): off unless its profile is on. It reads the
# spin/delay bits of the TCP packets arriving on FLOWRTT_INTERFACES (this host's side
# toward the UEs), e.g.:
# COMPOSE_PROFILES=flowrtt
# FLOWRTT_INTERFACES=eth1
EOT
}

case ${1:-} in
emulated | ran) "$1" ;;
*) echo "usage: $0 emulated|ran > .env" >&2; exit 2 ;;
esac
