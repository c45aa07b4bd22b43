// Package ipmap maps UEs to IPv4 addresses from a JSON file, for RAN sources that do not
// report them (FlexRAN does not):
//
//	{"imsi": {"208950000000001": "10.30.1.1"},
//	 "rnti": {"10000/23581": "10.30.1.1"}}
//
// "rnti" keys are <bs_id>/<rnti>, or <bs_id>/* for the eNB's only UE without other evidence
// (a one-UE testbed without a core: its RNTI changes on every attach). IMSI entries win.
// The file is re-read when it changes.
package ipmap

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

type fileFormat struct {
	IMSI map[string]string `json:"imsi"`
	RNTI map[string]string `json:"rnti"`
}

type rntiKey struct{ bs, rnti int64 }

// Map is safe for concurrent use.
type Map struct {
	path    string
	mu      sync.RWMutex
	modTime time.Time
	byIMSI  map[string]netip.Addr
	byRNTI  map[rntiKey]netip.Addr
	soleUE  map[int64]netip.Addr // <bs_id>/*
}

// Load reads the file; an invalid file is an error (the service refuses to start with it).
func Load(path string) (*Map, error) {
	m := &Map{path: path}
	if err := m.read(); err != nil {
		return nil, err
	}
	return m, nil
}

// Reload re-reads the file if it changed; on a bad file it keeps the old mapping.
func (m *Map) Reload() error {
	info, err := os.Stat(m.path)
	if err != nil {
		return err
	}
	m.mu.RLock()
	same := info.ModTime().Equal(m.modTime)
	m.mu.RUnlock()
	if same {
		return nil
	}
	return m.read()
}

func (m *Map) read() error {
	info, err := os.Stat(m.path)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(m.path)
	if err != nil {
		return err
	}
	var f fileFormat
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("%s: %w", m.path, err)
	}
	byIMSI := make(map[string]netip.Addr, len(f.IMSI))
	for imsi, ip := range f.IMSI {
		a, err := parseIPv4(ip)
		if err != nil {
			return fmt.Errorf("%s: imsi %s: %w", m.path, imsi, err)
		}
		byIMSI[imsi] = a
	}
	byRNTI := make(map[rntiKey]netip.Addr, len(f.RNTI))
	soleUE := map[int64]netip.Addr{}
	for key, ip := range f.RNTI {
		if bs, ok := strings.CutSuffix(key, "/*"); ok {
			b, err := strconv.ParseInt(bs, 10, 64)
			a, err2 := parseIPv4(ip)
			if err != nil || err2 != nil {
				return fmt.Errorf("%s: rnti %q: want <bs_id>/* and an IPv4 address", m.path, key)
			}
			soleUE[b] = a
			continue
		}
		k, err := parseRNTIKey(key)
		if err != nil {
			return fmt.Errorf("%s: rnti key %q: %w", m.path, key, err)
		}
		a, err := parseIPv4(ip)
		if err != nil {
			return fmt.Errorf("%s: rnti %s: %w", m.path, key, err)
		}
		byRNTI[k] = a
	}
	m.mu.Lock()
	m.byIMSI, m.byRNTI, m.soleUE, m.modTime = byIMSI, byRNTI, soleUE, info.ModTime()
	m.mu.Unlock()
	return nil
}

func parseIPv4(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("%q is not an IPv4 address", s)
	}
	return a, nil
}

func parseRNTIKey(s string) (rntiKey, error) {
	bs, rnti, ok := strings.Cut(s, "/")
	if !ok {
		return rntiKey{}, fmt.Errorf("want <bs_id>/<rnti>")
	}
	b, err1 := strconv.ParseInt(bs, 10, 64)
	r, err2 := strconv.ParseInt(rnti, 10, 64)
	if err1 != nil || err2 != nil || r < 0 || r > 65535 {
		return rntiKey{}, fmt.Errorf("want <bs_id>/<rnti> as numbers")
	}
	return rntiKey{b, r}, nil
}

// Lookup returns the address of a UE, or the zero Addr.
func (m *Map) Lookup(imsi string, bsID, rnti int64) netip.Addr {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if a, ok := m.byIMSI[imsi]; ok && imsi != "" {
		return a
	}
	return m.byRNTI[rntiKey{bsID, rnti}]
}

// SoleUE returns the address configured for the only UE of station bsID (<bs_id>/*), or the
// zero Addr.
func (m *Map) SoleUE(bsID int64) netip.Addr {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.soleUE[bsID]
}
