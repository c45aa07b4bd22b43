package identity

import (
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// staticMap is a configured <bs_id>/<rnti> -> address (as RNIS_IP_MAP "rnti").
type staticMap map[Key]netip.Addr

func (m staticMap) Lookup(_ string, bs, rnti int64) netip.Addr { return m[Key{bs, rnti}] }
func (m staticMap) SoleUE(bs int64) netip.Addr                 { return m[Key{bs, -1}] }

var ue = netip.MustParseAddr("10.0.1.2")

// livePolls reads the live re-attach capture (testdata/flexran/live-oai-rfsim-timeline/
// reattach-drb-timing.txt): per poll, the RNTIs the eNB lists in ueConfig (noS1: IMSI "0",
// i.e. none).
func livePolls(t *testing.T) (times []time.Time, polls [][]Sighting) {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/flexran/live-oai-rfsim-timeline/reattach-drb-timing.txt")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^(\d+)\.(\d+) rnti (\d+): in ueConfig=(\w+)`)
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := re.FindStringSubmatch(l)
		sec, _ := strconv.ParseInt(f[1], 10, 64)
		ms, _ := strconv.ParseInt(f[2], 10, 64)
		rnti, _ := strconv.ParseInt(f[3], 10, 64)
		at := time.Unix(sec, ms*1e6)
		if n := len(times); n == 0 || !times[n-1].Equal(at) {
			times, polls = append(times, at), append(polls, nil)
		}
		if f[4] == "True" {
			polls[len(polls)-1] = append(polls[len(polls)-1], Sighting{Key: Key{10000, rnti}})
		}
	}
	return times, polls
}

// Defect 5: the UE configured as 10000/20537 re-attaches as RNTI 57529 (noS1, no IMSI):
// the new RNTI inherits the address; then the adapter restarts and keeps it; then the eNB
// restarts with another bs_id and the UE comes back under a third RNTI.
func TestLiveReattachKeepsTheAddress(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rnis-ue-identity.json")
	b, err := New(staticMap{{10000, 20537}: ue}, file, quiet())
	if err != nil {
		t.Fatal(err)
	}
	times, polls := livePolls(t)
	for i := range times {
		b.Poll(polls[i], times[i])
	}
	if got := b.Lookup("", 10000, 57529); got != ue {
		t.Fatalf("re-attached UE 57529 has address %v, want %v", got, ue)
	}
	// adapter restart: the learned binding is read back (the static map only knows 20537)
	b, err = New(staticMap{{10000, 20537}: ue}, file, quiet())
	if err != nil {
		t.Fatal(err)
	}
	last := times[len(times)-1]
	b.Poll([]Sighting{{Key: Key{10000, 57529}}}, last.Add(time.Second))
	if got := b.Lookup("", 10000, 57529); got != ue {
		t.Fatalf("after an adapter restart: %v", got)
	}
	// eNB restart: gone for a few polls, back as bs_id 10001 with RNTI 1234
	b.Poll(nil, last.Add(2*time.Second))
	b.Poll([]Sighting{{Key: Key{10001, 1234}}}, last.Add(20*time.Second))
	if got := b.Lookup("", 10001, 1234); got != ue {
		t.Fatalf("after an eNB restart: %v", got)
	}
	if b.Lookup("", 10000, 57529).IsValid() {
		t.Fatal("the old RNTI kept the address")
	}
}

func TestAmbiguousAndExpiredSuccessionsInheritNothing(t *testing.T) {
	other := netip.MustParseAddr("10.0.1.3")
	t0 := time.Unix(100, 0)
	b, _ := New(nil, "", quiet())
	b.Poll([]Sighting{{Key: Key{1, 10}, Addr: ue}, {Key: Key{1, 11}, Addr: other}}, t0)
	b.Poll(nil, t0.Add(time.Second))
	b.Poll([]Sighting{{Key: Key{1, 20}}, {Key: Key{1, 21}}}, t0.Add(2*time.Second))
	if b.Lookup("", 1, 20).IsValid() || b.Lookup("", 1, 21).IsValid() || b.Ambiguous() != 1 {
		t.Fatal("two UEs re-attaching at once: one guessed")
	}
	// different IMSIs are different devices; the same IMSI inherits even among several
	b, _ = New(nil, "", quiet())
	b.Poll([]Sighting{{Key: Key{1, 10}, Addr: ue, IMSI: "1"}, {Key: Key{1, 11}, Addr: other, IMSI: "2"}}, t0)
	b.Poll([]Sighting{{Key: Key{1, 20}, IMSI: "2"}, {Key: Key{1, 21}, IMSI: "3"}}, t0.Add(time.Second))
	if b.Lookup("", 1, 20) != other || b.Lookup("", 1, 21).IsValid() {
		t.Fatal("IMSI succession")
	}
	// a successor after Window inherits nothing
	b, _ = New(nil, "", quiet())
	b.Poll([]Sighting{{Key: Key{1, 10}, Addr: ue}}, t0)
	b.Poll(nil, t0.Add(time.Second))
	b.Poll([]Sighting{{Key: Key{1, 20}}}, t0.Add(time.Second+Window+time.Second))
	if b.Lookup("", 1, 20).IsValid() {
		t.Fatal("inherited after the window")
	}
}

func TestBadFileIsAnError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "x.json")
	_ = os.WriteFile(file, []byte(`{"not":"a list"}`), 0o600)
	if _, err := New(nil, file, quiet()); err == nil {
		t.Fatal("accepted")
	}
}

// A one-UE testbed without a core configures <bs_id>/*: the first attach, whatever its RNTI,
// gets the address; a second UE without evidence on that eNB does not.
func TestSoleUEOfAStation(t *testing.T) {
	b, _ := New(staticMap{{10000, -1}: ue}, "", quiet())
	t0 := time.Unix(100, 0)
	b.Poll([]Sighting{{Key: Key{10000, 4242}}}, t0)
	if b.Lookup("", 10000, 4242) != ue {
		t.Fatal("sole UE not bound")
	}
	b.Poll([]Sighting{{Key: Key{10000, 4242}}, {Key: Key{10000, 77}}}, t0.Add(time.Second))
	if b.Lookup("", 10000, 77).IsValid() {
		t.Fatal("a second UE took the sole UE's address")
	}
}
