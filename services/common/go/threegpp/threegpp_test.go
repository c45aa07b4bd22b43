package threegpp

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestMELDConstant(t *testing.T) {
	// LTE 5 MHz, 25 PRB, CQI 15 → MCS 28 → I_TBS 26 → 18336 bits = 2292 bytes per TTI.
	got, err := LTETBSBytesForCQI(15, 25)
	if err != nil || got != 2292 {
		t.Fatalf("LTETBSBytesForCQI(15, 25) = %d, %v; want 2292", got, err)
	}
}

func TestLTEChainAt25PRB(t *testing.T) {
	for _, c := range []struct{ cqi, mcs, itbs, bits int }{
		{9, 16, 15, 7736}, {4, 4, 4, 1800}, {1, 0, 0, 680}, {7, 11, 10, 4392},
	} {
		mcs := CQIToMCS(c.cqi)
		itbs, _ := MCSToITBS(mcs)
		bits, _ := LTETBSBits(itbs, 25)
		if mcs != c.mcs || itbs != c.itbs || bits != c.bits {
			t.Errorf("CQI %d: MCS %d I_TBS %d TBS %d; want %d %d %d", c.cqi, mcs, itbs, bits, c.mcs, c.itbs, c.bits)
		}
	}
}

func TestNRCQIToMCS(t *testing.T) {
	// CQI 15 of CQI table 1 (64QAM, R=948/1024) → MCS 28 of MCS table 1 (64QAM, R=948).
	// CQI 15 of table 2 (256QAM, R=948) → MCS 27 of table 2 (256QAM, R=948). CQI 1 → MCS 0.
	for _, c := range []struct{ cqi, table, want int }{{15, 1, 28}, {15, 2, 27}, {1, 1, 0}, {0, 1, 0}} {
		if got, err := NRCQIToMCS(c.cqi, c.table); err != nil || got != c.want {
			t.Errorf("NRCQIToMCS(%d, %d) = %d, %v; want %d", c.cqi, c.table, got, err, c.want)
		}
	}
	if _, err := NRCQIToMCS(16, 1); err == nil {
		t.Error("CQI 16 accepted")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := MCSToITBS(29); err == nil {
		t.Error("MCS 29 accepted")
	}
	if _, err := LTETBSBits(0, 111); err == nil {
		t.Error("111 PRBs accepted")
	}
	if _, err := NRTBSBits(10, 0, NRParams{MCSTable: 3, Symbols: 12, Layers: 1}); err == nil {
		t.Error("NR MCS table 3 accepted")
	}
}

func TestNRTBS(t *testing.T) {
	if got, _ := NRTBSBits(1, 0, DefaultNR); got != 24 {
		t.Errorf("NR 1 PRB MCS 0 = %d, want 24", got)
	}
	big, _ := NRTBSBits(273, 27, NRParams{MCSTable: 2, Symbols: 12, DMRSPerPRB: 12, Layers: 4})
	if (big+24)%8 != 0 || big < 1_000_000 {
		t.Errorf("NR 273 PRB 256QAM 4 layers = %d", big)
	}
}

// The generated tables must match the CSV files (run `go generate` after editing them).
func TestGeneratedTablesMatchCSV(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tables_gen.go")
	cmd := exec.Command("go", "run", "./internal/gen", "-data", "../../src/mec_common/data/3gpp", "-out", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gen: %v\n%s", err, msg)
	}
	want, _ := os.ReadFile(out)
	got, _ := os.ReadFile("tables_gen.go")
	if !bytes.Equal(want, got) {
		t.Fatal("tables_gen.go is stale: run go generate ./services/common/go/threegpp")
	}
}
