# The E2 source's live side: our FlexRIC xApp (testbed/e2-xapp), which serves the mts-e2
# stream the RNIS adapter reads with RNIS_SOURCE=e2 (docs/e2.md). It links FlexRIC's xApp
# library from a FlexRIC build tree (v2.0.0, E2AP v2.03, KPM v2.03: docs/e2.md), which
# this repository does not build; without one the target says so and fails.
FLEXRIC_SRC ?= /var/cache/mts/e2/flexric-src
FLEXRIC_BUILD ?= /var/cache/mts/e2/flexric-build
# FlexRIC's compile definitions of libe42_xapp (its E2AP_ENCODING, E2AP_VERSION, KPM_VERSION, XAPP_DB)
E2_XAPP_DEFS ?= -DASN -DE2AP_V2 -DKPM_V2_03 -DSQLITE3_XAPP
APT_PACKAGES += gcc libsctp-dev libsqlite3-dev

.PHONY: e2-xapp
e2-xapp: build/bin/mts-e2-xapp ## our FlexRIC xApp (needs FLEXRIC_SRC and FLEXRIC_BUILD: a FlexRIC v2.0.0 tree and its build)

build/bin/mts-e2-xapp: testbed/e2-xapp/mts_e2_xapp.c
	@test -f $(FLEXRIC_BUILD)/src/xApp/libe42_xapp.a || \
		(echo "no FlexRIC build at FLEXRIC_BUILD=$(FLEXRIC_BUILD) (src/xApp/libe42_xapp.a): see docs/e2.md" && false)
	@mkdir -p build/bin
	nice -n 10 gcc -O2 -Wall -Wextra -Werror -I$(FLEXRIC_SRC) $(E2_XAPP_DEFS) -o $@ $< \
		$(FLEXRIC_BUILD)/src/xApp/libe42_xapp.a -lsctp -lsqlite3 -lpthread -ldl -lm

# Test harness for a kernel without SCTP (this machine's): FlexRIC's SCTP sockets as UDP on
# loopback, by LD_PRELOAD (testbed/e2-xapp/sctp_over_udp.c, docs/e2.md). Never for a real RAN.
build/lib/sctp_over_udp.so: testbed/e2-xapp/sctp_over_udp.c
	@mkdir -p build/lib
	gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o $@ $< -ldl

.PHONY: e2-fixtures
e2-fixtures: build/bin/mts-e2-xapp build/lib/sctp_over_udp.so build/bin/rnis-adapter ## record rnis-adapter/testdata/e2/flexric-* from FlexRIC's nearRT-RIC + emu_agent_gnb through our xApp (SHIM=1 on a kernel without SCTP)
	testbed/e2-xapp/live-check.sh rnis-adapter/testdata/e2/flexric-v2.0.0-emu-agent-gnb/stream-10ms.jsonl 300 10
	testbed/e2-xapp/live-check.sh rnis-adapter/testdata/e2/flexric-v2.0.0-emu-agent-gnb/stream-1ms.jsonl 400 1
