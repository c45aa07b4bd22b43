// Package threegpp implements the 3GPP lookups the RAN emulator and the RNIS adapter need:
// CQI → MCS (OpenAirInterface's map), MCS → I_TBS and the LTE TBS table (TS 36.213), and the
// NR TBS procedure (TS 38.214 §5.1.3.2). TBS values are in bits.
//
// The tables are generated from the CSV files in services/common/src/mec_common/data/3gpp,
// the same files the Python library reads.
package threegpp

//go:generate go run ./internal/gen -data ../../src/mec_common/data/3gpp -out tables_gen.go

import (
	"fmt"
	"math"
)

const (
	MaxCQI    = 15
	MaxLTEMCS = 28
	MaxLTEPRB = 110
	MaxNRPRB  = 275
	HARQProcs = 8 // LTE FDD
)

type nrMCS struct {
	qm        int32
	rateX1024 float64
}

// CQIToMCS returns the DL MCS OpenAirInterface's eNB picks for a wideband CQI (0..15).
func CQIToMCS(cqi int) int {
	return int(oaiCQIToMCS[clamp(cqi, 0, MaxCQI)])
}

// NRCQIToMCS picks the NR PDSCH MCS for a CQI: the highest MCS of MCS table 1 (64QAM) or 2
// (256QAM) whose spectral efficiency does not exceed the CQI's (CQI table 1 or 2 of TS 38.214
// Table 5.2.2.1-2/-3). The choice is the gNB's; this is the usual efficiency match.
func NRCQIToMCS(cqi, table int) (int, error) {
	effs, mcss := nrCQIEfficiency1, nrMCS1
	if table == 2 {
		effs, mcss = nrCQIEfficiency2, nrMCS2
	} else if table != 1 {
		return 0, fmt.Errorf("threegpp: NR table %d, want 1 or 2", table)
	}
	if cqi < 0 || cqi > MaxCQI {
		return 0, fmt.Errorf("threegpp: CQI %d outside 0..%d", cqi, MaxCQI)
	}
	best := 0
	for mcs, m := range mcss {
		if float64(m.qm)*m.rateX1024/1024 <= effs[cqi]+1e-4 {
			best = mcs
		}
	}
	return best, nil
}

// MCSToITBS maps an LTE PDSCH MCS (0..28) to its TBS index.
func MCSToITBS(mcs int) (int, error) {
	if mcs < 0 || mcs > MaxLTEMCS {
		return 0, fmt.Errorf("threegpp: LTE MCS %d outside 0..%d", mcs, MaxLTEMCS)
	}
	return int(lteMCSToITBS[mcs]), nil
}

// LTETBSBits is the transport block size in bits for I_TBS 0..26 on nPRB 0..110 PRBs.
func LTETBSBits(itbs, nprb int) (int, error) {
	if itbs < 0 || itbs > 26 {
		return 0, fmt.Errorf("threegpp: I_TBS %d outside 0..26", itbs)
	}
	if nprb < 0 || nprb > MaxLTEPRB {
		return 0, fmt.Errorf("threegpp: N_PRB %d outside 0..%d", nprb, MaxLTEPRB)
	}
	if nprb == 0 {
		return 0, nil
	}
	return int(lteTBS[itbs][nprb-1]), nil
}

// LTETBSBytesForMCS is the TBS in bytes for an MCS on nprb PRBs.
func LTETBSBytesForMCS(mcs, nprb int) (int, error) {
	itbs, err := MCSToITBS(mcs)
	if err != nil {
		return 0, err
	}
	bits, err := LTETBSBits(itbs, nprb)
	return bits / 8, err
}

// LTETBSBytesForCQI is the TBS in bytes per TTI a UE reporting cqi gets on nprb PRBs.
func LTETBSBytesForCQI(cqi, nprb int) (int, error) {
	return LTETBSBytesForMCS(CQIToMCS(cqi), nprb)
}

// NRParams describes an NR PDSCH allocation for NRTBSBits.
type NRParams struct {
	MCSTable    int // 1 (64QAM) or 2 (256QAM)
	Symbols     int // OFDM symbols allocated, 1..14
	DMRSPerPRB  int // DMRS resource elements per PRB
	OverheadPRB int // xOverhead per PRB
	Layers      int
}

// DefaultNR is a 12-symbol single-layer allocation with one DMRS symbol, MCS table 1.
var DefaultNR = NRParams{MCSTable: 1, Symbols: 12, DMRSPerPRB: 12, Layers: 1}

// NRTBSBits computes the NR transport block size in bits (TS 38.214 §5.1.3.2).
func NRTBSBits(nprb, mcs int, p NRParams) (int, error) {
	table := nrMCS1
	if p.MCSTable == 2 {
		table = nrMCS2
	} else if p.MCSTable != 1 {
		return 0, fmt.Errorf("threegpp: NR MCS table %d, want 1 or 2", p.MCSTable)
	}
	switch {
	case mcs < 0 || mcs >= len(table):
		return 0, fmt.Errorf("threegpp: NR MCS %d outside 0..%d", mcs, len(table)-1)
	case nprb < 0 || nprb > MaxNRPRB:
		return 0, fmt.Errorf("threegpp: NR N_PRB %d outside 0..%d", nprb, MaxNRPRB)
	case p.Symbols < 1 || p.Symbols > 14 || p.Layers < 1 || p.Layers > 4:
		return 0, fmt.Errorf("threegpp: bad NR allocation %+v", p)
	case nprb == 0:
		return 0, nil
	}
	m := table[mcs]
	rate := m.rateX1024 / 1024
	nre := min(156, 12*p.Symbols-p.DMRSPerPRB-p.OverheadPRB) * nprb
	ninfo := float64(nre) * rate * float64(m.qm) * float64(p.Layers)
	if ninfo <= 3824 {
		n := max(3, int(math.Floor(math.Log2(ninfo)))-6)
		q := max(24, pow2(n)*math.Floor(ninfo/pow2(n)))
		for _, t := range nrTBSSmall {
			if float64(t) >= q {
				return int(t), nil
			}
		}
		return int(nrTBSSmall[len(nrTBSSmall)-1]), nil
	}
	n := int(math.Floor(math.Log2(ninfo-24))) - 5
	q := max(3840, pow2(n)*math.Floor((ninfo-24)/pow2(n)+0.5)) // 38.214 rounds halves up
	c := 1.0
	if rate <= 0.25 {
		c = math.Ceil((q + 24) / 3816)
	} else if q > 8424 {
		c = math.Ceil((q + 24) / 8424)
	}
	return int(8*c*math.Ceil((q+24)/(8*c)) - 24), nil
}

// TTI is the slot duration in seconds for numerology mu (0 = LTE and NR 15 kHz).
func TTI(mu int) float64 { return 1e-3 / pow2(clamp(mu, 0, 3)) }

func pow2(n int) float64 { return math.Ldexp(1, n) }

func clamp(v, lo, hi int) int { return max(lo, min(v, hi)) }
