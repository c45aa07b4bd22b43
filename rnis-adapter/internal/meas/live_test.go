package meas

import (
	"bufio"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"mts.invalid/suite/rnis-adapter/internal/flexran"
	"mts.invalid/suite/rnis-adapter/internal/ranclock"
)

// liveTimeline replays a live OAI + flexran-rtc timeline (GET /stats/mac_stats every 10 ms,
// testdata/flexran/live-oai-rfsim-timeline/, with eNB_config from the live snapshot of the
// same testbed) through the parser, the clock and Normalize, as the adapter's pipeline does.
// Each line is {"t": poll time (Unix s), "doc": the controller's answer}.
func liveTimeline(t *testing.T, name string) (polls [][]Measurement, dateTimes []time.Time) {
	t.Helper()
	for _, s := range replay(t, filepath.Join("live-oai-rfsim-timeline", name)) {
		polls, dateTimes = append(polls, s.ues), append(dateTimes, s.dateTime)
	}
	return polls, dateTimes
}

// sample is one poll of a replayed timeline, with the emulator's truth since the previous
// one (emulator captures only).
type sample struct {
	ues                        []Measurement
	dateTime                   time.Time
	radioLosses, congestLosses int
}

// replay runs a timeline (testdata/flexran/<name>) through the parser, the clock and
// Normalize. A line whose document has eNB_config sets the configuration of the lines
// after it (as the poller's split mode); without one, the live capture's is used.
func replay(t *testing.T, name string) []sample {
	t.Helper()
	conf := liveConfig(t)
	f, err := os.Open(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	clock := ranclock.New(ranclock.SFNDecimal)
	var p flexran.Parser
	var out []sample
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line struct {
			T          float64         `json:"t"`
			Radio      int             `json:"radio_losses"`
			Congestion int             `json:"congestion_losses"`
			Doc        json.RawMessage `json:"doc"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		snaps, err := p.Parse(line.Doc)
		if err != nil {
			t.Fatal(err)
		}
		s := &snaps[0]
		if len(s.Stations) > 0 && len(s.Stations[0].Cells) > 0 {
			conf = s.Stations[0]
		}
		for i := range s.Stations { // what the poller's split mode joins in
			s.Stations[i].Cells, s.Stations[i].UEConfig, s.Stations[i].LCConfig = conf.Cells, conf.UEConfig, conf.LCConfig
		}
		sec, frac := math.Modf(line.T)
		ms := Normalize(s, time.Unix(int64(sec), int64(frac*1e9)), nil, clock)
		out = append(out, sample{ues: ms, dateTime: s.Time, radioLosses: line.Radio, congestLosses: line.Congestion})
	}
	return out
}

// liveConfig is the eNB_config of the live capture (same eNB: bs_id 10000, 25 PRB).
func liveConfig(t *testing.T) flexran.Station {
	return parseFile(t, "live-oai-rfsim/saturated.json").Stations[0]
}

// reports keeps the first poll of each new report (a new sfnSn).
func reports(polls [][]Measurement) []Measurement {
	var out []Measurement
	for _, ms := range polls {
		if len(ms) == 1 && (len(out) == 0 || out[len(out)-1].SFNSF != ms[0].SFNSF) {
			out = append(out, ms[0])
		}
	}
	return out
}

// Defect 1: OAI writes sfnSn as frame*10 + subframe. 3705 is frame 370 subframe 5 (it was
// published as frame 231, subframe 9), and successive reports are ~100 subframes apart
// (the controller's default period).
func TestLiveSFNIsFrameTimesTenPlusSubframe(t *testing.T) {
	polls, _ := liveTimeline(t, "saturated-poll-10ms.jsonl")
	rs := reports(polls)
	found := false
	for i, m := range rs {
		if m.Frame.V*10+m.Subframe.V != m.SFNSF.V || m.Subframe.V > 9 {
			t.Fatalf("sfnSn %d -> frame %d subframe %d", m.SFNSF.V, m.Frame.V, m.Subframe.V)
		}
		if m.SFNSF.V == 3705 {
			found = m.Frame.V == 370 && m.Subframe.V == 5
		}
		if i > 0 {
			if step := m.SFNSF.V - rs[i-1].SFNSF.V; step < 95 || step > 120 {
				t.Errorf("report %d: %d subframes after the previous one, want ~100", i, step)
			}
		}
	}
	if !found {
		t.Error("sfnSn 3705 not decoded as frame 370, subframe 5")
	}
}

// Defect 6: date_time changes on every poll while the report (sfnSn) stays; the
// measurement time is the first poll that saw the report, its uncertainty the measured
// report period.
func TestLiveMeasurementTimeIsFirstSightOfTheReport(t *testing.T) {
	for _, name := range []string{"idle-poll-10ms.jsonl", "saturated-poll-10ms.jsonl"} {
		polls, dateTimes := liveTimeline(t, name)
		dateChanges, repeats := 0, 0
		for i := 1; i < len(polls); i++ {
			cur, prev := polls[i][0], polls[i-1][0]
			if cur.SFNSF != prev.SFNSF {
				if cur.SourceTimeNs.V != cur.ObservedNs {
					t.Fatalf("%s poll %d: a new report is measured when first seen", name, i)
				}
				continue
			}
			repeats++
			if !dateTimes[i].Equal(dateTimes[i-1]) {
				dateChanges++
			}
			if cur.SourceTimeNs != prev.SourceTimeNs {
				t.Fatalf("%s poll %d: same report, measurement time moved", name, i)
			}
			if age := time.Duration(cur.ObservedNs - cur.SourceTimeNs.V); age > 200*time.Millisecond {
				t.Fatalf("%s poll %d: report %v old", name, i, age)
			}
		}
		if dateChanges < repeats/2 {
			t.Errorf("%s: date_time changed in %d of %d polls of an unchanged report; the capture no longer shows defect 6", name, dateChanges, repeats)
		}
		last := polls[len(polls)-1][0]
		unc := time.Duration(last.SourceTimeUncNs.V)
		if !last.SourceTimeUncNs.Set || unc < 40*time.Millisecond || unc > 200*time.Millisecond {
			t.Errorf("%s: uncertainty %v, want the report period (50..150 ms here)", name, unc)
		}
	}
}

// Defect 8: the RF simulator does not run at 1 ms per TTI: 1600+ subframes/s idle, under
// 950 saturated. The measured TTI is what every rate conversion uses.
func TestLiveTTIRateFromSFNProgression(t *testing.T) {
	cases := []struct {
		name     string
		min, max time.Duration
	}{
		{"idle-poll-10ms.jsonl", 560 * time.Microsecond, 680 * time.Microsecond},
		{"saturated-poll-10ms.jsonl", 1050 * time.Microsecond, 1300 * time.Microsecond},
	}
	for _, c := range cases {
		polls, _ := liveTimeline(t, c.name)
		m := polls[len(polls)-1][0]
		if tti := time.Duration(m.TTINs); tti < c.min || tti > c.max {
			t.Errorf("%s: TTI %v, want %v..%v", c.name, tti, c.min, c.max)
		}
		if c.name == "saturated-poll-10ms.jsonl" {
			// C_i = TBS 2292 B per TTI: 18.3 Mbit/s at 1 ms, what the slower TTI gives
			want := 2292 * 8 * int64(time.Second) / m.TTINs
			if m.RapidCapacity.V != want || m.RapidCapacity.V > 17_000_000 {
				t.Errorf("rapid capacity %d, want %d (< 17 Mbit/s)", m.RapidCapacity.V, want)
			}
		}
	}
}

// Defect 7: OAI writes txQueueHolDelay 0 always (null, not a measured 0), and an idle UE
// reads prbDl 2 with tbsDl 0: it held no PRBs, the cell is idle, and MELD's Q_th is taken
// on the PRBs the UE would get (the whole cell), not on 2.
func TestLiveUnknownIsNullAndIdleHoldsNoPRBs(t *testing.T) {
	polls, _ := liveTimeline(t, "idle-poll-10ms.jsonl")
	for i, ms := range polls {
		m := ms[0]
		if m.RLCHOL.Set {
			t.Fatalf("poll %d: rlc_hol %d published, OAI does not measure it", i, m.RLCHOL.V)
		}
		if m.DLTBS.V != 0 || m.DLPRBs != some(0) || m.CellAllocPRBs != some(0) || m.CellPRBUsage != 0 {
			t.Fatalf("poll %d: idle UE tbs %+v prbs %+v cell %+v", i, m.DLTBS, m.DLPRBs, m.CellAllocPRBs)
		}
		if m.BestCQITBS != some(2292) || m.RapidPRBs != some(25) {
			t.Fatalf("poll %d: best-CQI TBS %+v on %+v PRBs, want 2292 on the idle cell's 25", i, m.BestCQITBS, m.RapidPRBs)
		}
	}
	sat, _ := liveTimeline(t, "saturated-poll-10ms.jsonl")
	for _, ms := range sat {
		if ms[0].RLCHOL.Set {
			t.Fatal("saturated: rlc_hol published while the queue holds 250 kB and OAI writes 0")
		}
	}
}
