package e2

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/identity"
	"mts.invalid/suite/rnis-adapter/internal/ipmap"
	"mts.invalid/suite/rnis-adapter/internal/meas"
)

// TestAddressesThroughTheIdentityBook: an E2 node's UE has no address in the stream (OAI's
// MAC SM has none); the one identity book gives it the IP map's <nb_id>/* address, keeps it
// across a re-attach under a new RNTI, and the measurement carries it.
func TestAddressesThroughTheIdentityBook(t *testing.T) {
	dir := t.TempDir()
	mapFile := filepath.Join(dir, "ip-map.json")
	if err := os.WriteFile(mapFile, []byte(`{"rnti": {"3584/*": "10.30.0.9"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	static, err := ipmap.Load(mapFile)
	if err != nil {
		t.Fatal(err)
	}
	book, err := identity.New(static, filepath.Join(dir, "ids.json"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var asm Assembler
	now := time.Now()
	want := netip.MustParseAddr("10.30.0.9")
	for i, rnti := range []string{"4660", "4660", "4700"} { // the UE re-attaches as 4700
		now = now.Add(time.Second)
		snap, _ := decodeAll(t, &asm, `{"type":"mac",`+node+`,"ues":[{"rnti":`+rnti+`,"wb_cqi":9}]}`, now)
		book.Poll(meas.Sightings(snap), now)
		ms := meas.Normalize(snap, now, book, nil)
		if len(ms) != 1 || ms[0].IPv4 != want || ms[0].BSID != 3584 {
			t.Fatalf("report %d (rnti %s): %+v", i, rnti, ms)
		}
	}
}
