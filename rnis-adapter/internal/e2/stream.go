// Package e2 is the adapter's O-RAN E2 source: it reads the mts-e2 stream (JSON lines, v1,
// docs/e2.md) that our FlexRIC xApp (testbed/e2-xapp) or the RAN emulator serves, and turns
// each MAC indication, joined with the node's latest RLC indication, into the snapshot the
// FlexRAN source produces, so that both feed one pipeline.
//
// Why a stream and not E2AP in Go: FlexRIC's xApp SDK already speaks E2AP/E42 (ASN.1 APER
// over SCTP) and decodes OAI's MAC/RLC service models (plain C structs, not ASN.1); an
// xApp of ours forwards the decoded values. The adapter stays one Go binary without cgo,
// and the stream can be produced by the emulator for tests without FlexRIC.
package e2

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
)

// Stream name and version of the protocol (docs/e2.md).
const (
	StreamName = "mts-e2"
	Version    = 1
)

// Kinds of line the source sends after its hello.
const (
	KindMAC = "mac" // OAI MAC service model indication (RAN function 142)
	KindRLC = "rlc" // OAI RLC service model indication (RAN function 143)
)

// Node is the E2 node's global id (E2AP GlobalE2node-ID).
type Node struct {
	RAN       string  `json:"ran"` // gNB, eNB, gNB-CU, gNB-DU, ...
	MCC       uint16  `json:"mcc"`
	MNC       uint16  `json:"mnc"`
	MNCDigits uint8   `json:"mnc_digits"`
	NBID      uint32  `json:"nb_id"`
	CUDUID    *uint64 `json:"cu_du_id"`
}

// Cell is what the source knows of the node's cell beyond the service models (MAC/RLC carry
// no cell id nor bandwidth): the xApp takes them from the gNB's configuration.
type Cell struct {
	PCI           *int64 `json:"pci"`
	DLPRBs        *int64 `json:"dl_prbs"`
	SlotsPerFrame *int64 `json:"slots_per_frame"` // 10 × 2^µ; 10 (one slot per ms) when absent
	HARQProcesses *int64 `json:"harq_processes"`
}

// MACUE is one mac_ue_stats_impl_t of FlexRIC's MAC SM (field names kept), plus two
// optional extensions a source may know: the UE's IMSI and IPv4 address.
type MACUE struct {
	RNTI      *int64   `json:"rnti"`
	Frame     *int64   `json:"frame"`
	Slot      *int64   `json:"slot"`
	WBCQI     *int64   `json:"wb_cqi"`
	DLMCS1    *int64   `json:"dl_mcs1"`
	ULMCS1    *int64   `json:"ul_mcs1"`
	DLCurrTBS *int64   `json:"dl_curr_tbs"` // bytes in the last scheduled slot
	ULCurrTBS *int64   `json:"ul_curr_tbs"`
	DLSchedRB *int64   `json:"dl_sched_rb"`
	ULSchedRB *int64   `json:"ul_sched_rb"`
	DLBLER    *float64 `json:"dl_bler"`
	ULBLER    *float64 `json:"ul_bler"`
	BSR       *int64   `json:"bsr"`
	PHR       *int64   `json:"phr"`
	IMSI      string   `json:"imsi"`
	UEIPv4    string   `json:"ue_ipv4"`
}

// RLCBearer is one rlc_radio_bearer_stats_t of FlexRIC's RLC SM (field names kept).
type RLCBearer struct {
	RNTI          *int64 `json:"rnti"`
	RBID          *int64 `json:"rbid"`
	Mode          *int64 `json:"mode"`            // 0 AM, 1 UM, 2 TM
	TxBufOccBytes *int64 `json:"txbuf_occ_bytes"` // bytes waiting in the RLC transmit buffer
	TxBufOccPkts  *int64 `json:"txbuf_occ_pkts"`
	TxSDUWaitUs   *int64 `json:"txsdu_wt_us"` // head-of-line delay of the bearer, µs
	TxPDURetxPkts *int64 `json:"txpdu_retx_pkts"`
	TxPDUDropPkts *int64 `json:"txpdu_dd_pkts"`
}

// Indication is one decoded line of kind mac or rlc.
type Indication struct {
	Type     string      `json:"type"`
	Node     *Node       `json:"node"`
	Cell     *Cell       `json:"cell"`
	TstampUs *int64      `json:"tstamp_us"` // when the agent filled it (its clock), µs
	UEs      []MACUE     `json:"ues"`
	Bearers  []RLCBearer `json:"rbs"`
}

// Hello is the source's first line.
type Hello struct {
	Type       string   `json:"type"` // hello, or error (then Detail says why)
	Stream     string   `json:"stream"`
	V          int      `json:"v"`
	Source     string   `json:"source"`
	SM         []string `json:"sm"`
	IntervalMs int      `json:"interval_ms"`
	Detail     string   `json:"detail"`
}

// ErrMalformed marks a line that is not an mts-e2 v1 indication.
var ErrMalformed = errors.New("malformed mts-e2 line")

// Decode reads one line. Unknown kinds and fields are ignored by the caller's choice: an
// unknown kind returns Type as sent and no error (a newer source may add kinds in v1).
func Decode(line []byte) (Indication, error) {
	var ind Indication
	if err := json.Unmarshal(line, &ind); err != nil {
		return ind, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch ind.Type {
	case KindMAC, KindRLC:
		if ind.Node == nil {
			return ind, fmt.Errorf("%w: %s indication without node", ErrMalformed, ind.Type)
		}
	case "":
		return ind, fmt.Errorf("%w: no type", ErrMalformed)
	}
	return ind, nil
}

// checkUE tells why a MAC UE entry cannot be used ("" when it can).
func checkUE(u *MACUE) string {
	switch {
	case u.RNTI == nil:
		return "no rnti"
	case *u.RNTI < 0 || *u.RNTI > 65535:
		return fmt.Sprintf("rnti %d outside 0..65535", *u.RNTI)
	case u.WBCQI != nil && (*u.WBCQI < 0 || *u.WBCQI > 15):
		return fmt.Sprintf("wb_cqi %d outside 0..15", *u.WBCQI)
	case u.DLMCS1 != nil && (*u.DLMCS1 < 0 || *u.DLMCS1 > 31):
		return fmt.Sprintf("dl_mcs1 %d outside 0..31", *u.DLMCS1)
	case negative(u.DLCurrTBS, u.DLSchedRB, u.Frame, u.Slot):
		return "negative tbs, rb, frame or slot"
	case u.Frame != nil && *u.Frame > 1023:
		return fmt.Sprintf("frame %d outside 0..1023", *u.Frame)
	case u.UEIPv4 != "" && !validIPv4(u.UEIPv4):
		return fmt.Sprintf("ue_ipv4 %q is not an IPv4 address", u.UEIPv4)
	}
	return ""
}

// checkBearer tells why an RLC bearer entry cannot be used ("" when it can).
func checkBearer(b *RLCBearer) string {
	switch {
	case b.RNTI == nil || b.RBID == nil:
		return "no rnti or rbid"
	case *b.RNTI < 0 || *b.RNTI > 65535 || *b.RBID < 0 || *b.RBID > 32:
		return fmt.Sprintf("rnti %d or rbid %d out of range", *b.RNTI, *b.RBID)
	case negative(b.TxBufOccBytes, b.TxSDUWaitUs, b.TxBufOccPkts):
		return "negative buffer or wait"
	}
	return ""
}

func negative(vs ...*int64) bool {
	for _, v := range vs {
		if v != nil && *v < 0 {
			return true
		}
	}
	return false
}

func validIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}

// Key is the node's identity as a map key (PLMN, id, and the CU/DU id of a split node).
func (n *Node) Key() string {
	k := fmt.Sprintf("%s/%03d-%0*d/%d", n.RAN, n.MCC, max(int(n.MNCDigits), 2), n.MNC, n.NBID)
	if n.CUDUID != nil {
		k += fmt.Sprintf("/%d", *n.CUDUID)
	}
	return k
}
