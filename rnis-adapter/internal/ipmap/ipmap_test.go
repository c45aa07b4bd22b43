package ipmap

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestLookupAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ips.json")
	write := func(s string, mtime time.Time) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		_ = os.Chtimes(path, mtime, mtime)
	}
	write(`{"imsi": {"42": "10.30.1.1"}, "rnti": {"10000/7": "10.30.1.2", "10001/*": "10.0.1.2"}}`, time.Unix(100, 0))
	m, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if m.Lookup("42", 1, 1) != netip.MustParseAddr("10.30.1.1") || m.Lookup("", 10000, 7) != netip.MustParseAddr("10.30.1.2") {
		t.Fatal("lookup")
	}
	if m.Lookup("", 10000, 8).IsValid() || m.Lookup("", 10001, 8).IsValid() {
		t.Fatal("unknown UE has an address")
	}
	if m.SoleUE(10001) != netip.MustParseAddr("10.0.1.2") || m.SoleUE(10000).IsValid() {
		t.Fatal("<bs_id>/*")
	}
	write(`{"imsi": {"42": "bad"}}`, time.Unix(200, 0))
	if m.Reload() == nil || m.Lookup("42", 0, 0) != netip.MustParseAddr("10.30.1.1") {
		t.Fatal("a bad file must be refused and the old mapping kept")
	}
	write(`{"imsi": {"42": "10.30.9.9"}}`, time.Unix(300, 0))
	if err := m.Reload(); err != nil || m.Lookup("42", 0, 0) != netip.MustParseAddr("10.30.9.9") {
		t.Fatalf("reload: %v", err)
	}
}

func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	for _, body := range []string{`{`, `{"imsi": {"1": "::1"}}`, `{"rnti": {"7": "10.0.0.1"}}`, `{"ip": {}}`} {
		path := filepath.Join(dir, "m.json")
		_ = os.WriteFile(path, []byte(body), 0o600)
		if _, err := Load(path); err == nil {
			t.Errorf("%s: accepted", body)
		}
	}
}
