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
	"errors"
	"fmt"
	"net/netip"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
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

// Int is an optional integer (unset: the source did not send it).
type Int = flexran.Int

// Node is the E2 node's global id (E2AP GlobalE2node-ID).
type Node struct {
	RAN                       string // gNB, eNB, gNB-DU, ...
	MCC, MNC, MNCDigits, NBID int64
	CUDUID                    Int
}

// Cell is what the source knows of the node's cell beyond the service models (MAC/RLC carry
// no cell id nor bandwidth): the xApp takes them from the gNB's configuration.
type Cell struct {
	PCI, DLPRBs   Int
	SlotsPerFrame Int // 10 × 2^µ; 10 (one slot per ms) when absent
	HARQProcesses Int
	PDSCHSymbols  Int // NR: OFDM symbols of a PDSCH allocation; OAIPDSCHSymbols when absent
}

// OAIPDSCHSymbols is the PDSCH length of OAI's gNB (symbols 1–13 of the slot, the PDCCH in
// symbol 0): the live recording's dl_curr_tbs match TS 38.214 on 13 symbols, not on 12.
const OAIPDSCHSymbols = 13

// MACUE is what the adapter reads of one mac_ue_stats_impl_t of FlexRIC's MAC SM (the
// stream's field names are FlexRIC's), plus two optional extensions a source may know: the
// UE's IMSI and IPv4 address. Other fields (uplink, BLER, SNR, ...) are skipped.
type MACUE struct {
	RNTI, Frame, Slot  Int
	WBCQI, DLMCS1, PHR Int
	DLCurrTBS          Int // dl_curr_tbs: bytes in the last scheduled slot
	DLAggrTBS          Int // dl_aggr_tbs: bytes sent to the UE since it attached
	DLSchedRB          Int // dl_sched_rb
	IMSI, UEIPv4       string
	Bad                string // a value of the wrong type: why the entry is unusable
}

// RLCBearer is what the adapter reads of one rlc_radio_bearer_stats_t of FlexRIC's RLC SM.
type RLCBearer struct {
	RNTI, RBID    Int
	TxBufOccBytes Int // txbuf_occ_bytes: bytes waiting in the RLC transmit buffer
	TxSDUWaitUs   Int // txsdu_wt_us: head-of-line delay of the bearer, µs
	Bad           string
}

// Indication is one decoded line of kind mac or rlc.
type Indication struct {
	Type     string
	Node     *Node // nil when the line has none
	Cell     *Cell // nil when the source knows nothing of the cell
	TstampUs Int   // when the agent filled it (its clock), µs
	UEs      []MACUE
	Bearers  []RLCBearer
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

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// Decode reads one line in one pass (flexran.Scanner: the hand-written reader the FlexRAN
// parser uses), visiting the fields the adapter uses and skipping the rest. A UE or bearer
// entry with a value of the wrong type is kept with Bad set (the line goes on); a line that
// is not JSON, lacks a type, or is an indication without a node is ErrMalformed. Unknown
// kinds come back with their Type and no error (v1 may add kinds).
func Decode(line []byte) (Indication, error) {
	var ind Indication
	s := flexran.NewScanner(line)
	if s.Kind() != 'o' {
		return ind, malformed("not a JSON object")
	}
	err := s.Object(func(key []byte) error {
		switch string(key) {
		case "type":
			t, ok, err := s.Text()
			if err == nil && !ok {
				err = errors.New("type is not a string")
			}
			ind.Type = kindOf(t)
			return err
		case "node":
			ind.Node = &Node{}
			return decodeNode(s, ind.Node)
		case "cell":
			ind.Cell = &Cell{}
			return decodeCell(s, ind.Cell)
		case "tstamp_us":
			var err error
			ind.TstampUs, err = s.Int(key)
			return err
		case "ues":
			return list(s, func() error {
				ind.UEs = append(ind.UEs, MACUE{})
				return decodeUE(s, &ind.UEs[len(ind.UEs)-1])
			})
		case "rbs":
			return list(s, func() error {
				ind.Bearers = append(ind.Bearers, RLCBearer{})
				return decodeBearer(s, &ind.Bearers[len(ind.Bearers)-1])
			})
		}
		return s.Skip()
	})
	if err == nil {
		err = s.End()
	}
	switch {
	case err != nil:
		return ind, malformed("%v", err)
	case ind.Type == "":
		return ind, malformed("no type")
	case (ind.Type == KindMAC || ind.Type == KindRLC) && ind.Node == nil:
		return ind, malformed("%s indication without node", ind.Type)
	}
	return ind, nil
}

// kindOf returns the kind as a constant for the known ones (no allocation per line).
func kindOf(t []byte) string {
	switch string(t) {
	case KindMAC:
		return KindMAC
	case KindRLC:
		return KindRLC
	}
	return string(t)
}

// list calls each for every element of an array; null is an empty list.
func list(s *flexran.Scanner, each func() error) error {
	if s.Kind() == 'l' {
		return s.Skip()
	}
	return s.Array(func(int) error { return each() })
}

func decodeNode(s *flexran.Scanner, n *Node) error {
	var mcc, mnc, digits, nb Int
	err := s.Object(func(key []byte) error {
		if string(key) == "ran" {
			t, ok, err := s.Text()
			if err == nil && !ok {
				err = errors.New("node.ran is not a string")
			}
			n.RAN = string(t)
			return err
		}
		var err error
		switch string(key) {
		case "mcc":
			mcc, err = s.Int(key)
		case "mnc":
			mnc, err = s.Int(key)
		case "mnc_digits":
			digits, err = s.Int(key)
		case "nb_id":
			nb, err = s.Int(key)
		case "cu_du_id":
			n.CUDUID, err = s.Int(key)
		default:
			err = s.Skip()
		}
		return err
	})
	switch {
	case err != nil:
		return err
	case !nb.Set || nb.V < 0 || nb.V > 1<<32-1:
		return fmt.Errorf("node.nb_id missing or outside 0..2^32-1")
	case mcc.V < 0 || mcc.V > 999 || mnc.V < 0 || mnc.V > 999 || digits.V < 0 || digits.V > 3:
		return fmt.Errorf("node PLMN %d-%d (%d digits) out of range", mcc.V, mnc.V, digits.V)
	}
	n.MCC, n.MNC, n.MNCDigits, n.NBID = mcc.V, mnc.V, digits.V, nb.V
	return nil
}

// entry reads one object's fields through field, which names where an integer or a string
// goes (neither: the key is skipped). A value of the wrong type sets bad and the line goes on.
func entry(s *flexran.Scanner, bad *string, field func(key []byte) (*Int, *string)) error {
	if s.Kind() != 'o' {
		*bad = "not an object"
		return s.Skip()
	}
	return s.Object(func(key []byte) error {
		num, str := field(key)
		switch {
		case num != nil:
			v, err := s.Int(key)
			if flexran.IsTypeError(err) {
				*bad = err.Error()
				return nil
			}
			*num = v
			return err
		case str != nil:
			t, ok, err := s.Text()
			if err == nil && !ok {
				*bad = string(key) + " is not a string"
			}
			*str = string(t)
			return err
		}
		return s.Skip()
	})
}

func decodeCell(s *flexran.Scanner, c *Cell) error {
	var bad string
	err := entry(s, &bad, func(key []byte) (*Int, *string) {
		switch string(key) {
		case "pci":
			return &c.PCI, nil
		case "dl_prbs":
			return &c.DLPRBs, nil
		case "slots_per_frame":
			return &c.SlotsPerFrame, nil
		case "harq_processes":
			return &c.HARQProcesses, nil
		case "pdsch_symbols":
			return &c.PDSCHSymbols, nil
		}
		return nil, nil
	})
	if err == nil && bad != "" {
		err = errors.New("cell: " + bad)
	}
	if err == nil && outside(c.PDSCHSymbols, 1, 14) {
		err = fmt.Errorf("cell: pdsch_symbols %d outside 1..14", c.PDSCHSymbols.V)
	}
	return err
}

func decodeUE(s *flexran.Scanner, u *MACUE) error {
	return entry(s, &u.Bad, func(key []byte) (*Int, *string) {
		switch string(key) {
		case "rnti":
			return &u.RNTI, nil
		case "frame":
			return &u.Frame, nil
		case "slot":
			return &u.Slot, nil
		case "wb_cqi":
			return &u.WBCQI, nil
		case "dl_mcs1":
			return &u.DLMCS1, nil
		case "phr":
			return &u.PHR, nil
		case "dl_curr_tbs":
			return &u.DLCurrTBS, nil
		case "dl_aggr_tbs":
			return &u.DLAggrTBS, nil
		case "dl_sched_rb":
			return &u.DLSchedRB, nil
		case "imsi":
			return nil, &u.IMSI
		case "ue_ipv4":
			return nil, &u.UEIPv4
		}
		return nil, nil
	})
}

func decodeBearer(s *flexran.Scanner, b *RLCBearer) error {
	return entry(s, &b.Bad, func(key []byte) (*Int, *string) {
		switch string(key) {
		case "rnti":
			return &b.RNTI, nil
		case "rbid":
			return &b.RBID, nil
		case "txbuf_occ_bytes":
			return &b.TxBufOccBytes, nil
		case "txsdu_wt_us":
			return &b.TxSDUWaitUs, nil
		}
		return nil, nil
	})
}

// checkUE tells why a MAC UE entry cannot be used ("" when it can).
func checkUE(u *MACUE) string {
	switch {
	case u.Bad != "":
		return u.Bad
	case !u.RNTI.Set:
		return "no rnti"
	case outside(u.RNTI, 0, 65535):
		return fmt.Sprintf("rnti %d outside 0..65535", u.RNTI.V)
	case outside(u.WBCQI, 0, 15):
		return fmt.Sprintf("wb_cqi %d outside 0..15", u.WBCQI.V)
	case outside(u.DLMCS1, 0, 31):
		return fmt.Sprintf("dl_mcs1 %d outside 0..31", u.DLMCS1.V)
	case outside(u.Frame, 0, 1023):
		return fmt.Sprintf("frame %d outside 0..1023", u.Frame.V)
	case outside(u.DLCurrTBS, 0, 1<<31) || outside(u.DLSchedRB, 0, 275) || outside(u.Slot, 0, 159) ||
		outside(u.DLAggrTBS, 0, 1<<62):
		return "dl_curr_tbs, dl_aggr_tbs, dl_sched_rb or slot out of range"
	case u.UEIPv4 != "" && !validIPv4(u.UEIPv4):
		return fmt.Sprintf("ue_ipv4 %q is not an IPv4 address", u.UEIPv4)
	}
	return ""
}

// checkBearer tells why an RLC bearer entry cannot be used ("" when it can).
func checkBearer(b *RLCBearer) string {
	switch {
	case b.Bad != "":
		return b.Bad
	case !b.RNTI.Set || !b.RBID.Set:
		return "no rnti or rbid"
	case outside(b.RNTI, 0, 65535) || outside(b.RBID, 0, 32):
		return fmt.Sprintf("rnti %d or rbid %d out of range", b.RNTI.V, b.RBID.V)
	case outside(b.TxBufOccBytes, 0, 1<<40) || outside(b.TxSDUWaitUs, 0, 1<<40):
		return "negative buffer or wait"
	}
	return ""
}

// outside tells whether a set value lies outside lo..hi (an unset one is not checked).
func outside(v Int, lo, hi int64) bool { return v.Set && (v.V < lo || v.V > hi) }

func validIPv4(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is4()
}

// Key is the node's identity as a map key (PLMN, id, and the CU/DU id of a split node).
func (n *Node) Key() string {
	k := fmt.Sprintf("%s/%03d-%0*d/%d", n.RAN, n.MCC, max(int(n.MNCDigits), 2), n.MNC, n.NBID)
	if n.CUDUID.Set {
		k += fmt.Sprintf("/%d", n.CUDUID.V)
	}
	return k
}
