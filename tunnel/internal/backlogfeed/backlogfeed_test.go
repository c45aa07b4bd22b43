package backlogfeed

import (
	"encoding/json"
	"net/netip"
	"testing"
	"time"
)

func TestBodyIsThePepSchema(t *testing.T) {
	ue := netip.MustParseAddr("10.30.1.1")
	if k := RoutingKey(ue); k != "pep.v1.backlog.10_30_1_1" {
		t.Fatalf("key %q", k)
	}
	var m map[string]any
	if err := json.Unmarshal(Body(ue, Sample{Backlog: 3000, Unsent: 1400, Received: 9000, Flows: 1}, time.Unix(2, 5)), &m); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"schema": 2.0, "ue": "10.30.1.1", "ts_ns": 2e9 + 5, "backlog_bytes": 3000.0,
		"unsent_bytes": 1400.0, "received_bytes": 9000.0, "flows": 1.0}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if len(m) != len(want) {
		t.Errorf("fields %v", m)
	}
}
