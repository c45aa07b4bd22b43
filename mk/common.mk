# services/common: the shared library (Python mec_common, Go services/common/go, and the
# BPF header services/common/bpf/cca.h that every congestion control of the suite includes).
TEST_TARGETS += test-common

# For the BPF congestion controls' rules (mk/pep-meld.mk, mk/ue.mk, mk/l4s.mk).
CCA_H := services/common/bpf/cca.h
CCA_INCLUDE := -I$(dir $(CCA_H))

.PHONY: test-common
test-common: python rabbitmq ## tests of mec_common and the Go common packages
	go test ./services/common/go/...
	uv run pytest -q services/common/tests
