package svc

import (
	"net/http/httptest"
	"net/url"
	"testing"
)

func TestPreconditions(t *testing.T) {
	current := ETagOf(map[string]any{"b": 1, "a": "x"})
	if current != ETagOf(map[string]any{"a": "x", "b": 1}) {
		t.Fatal("equal representations must have equal ETags")
	}
	cases := []struct {
		header, value string
		exists        bool
		want          int // 0: the condition holds
	}{
		{"If-Match", current, true, 0},
		{"If-Match", `"other", ` + current, true, 0},
		{"If-Match", `"INVALID_ETAG"`, true, 412},
		{"If-Match", "W/" + current, true, 412}, // strong comparison
		{"If-Match", "*", true, 0},
		{"If-Match", "*", false, 412},
		{"If-Match", "no-quotes", true, 400},
		{"If-None-Match", current, true, 412},
		{"If-None-Match", "W/" + current, true, 412}, // weak comparison
		{"If-None-Match", `"other"`, true, 0},
		{"If-None-Match", "*", false, 0},
		{"If-None-Match", "*", true, 412},
	}
	for _, c := range cases {
		r := httptest.NewRequest("PUT", "/x", nil)
		r.Header.Set(c.header, c.value)
		have := current
		if !c.exists {
			have = ""
		}
		got := 0
		if err := CheckPreconditions(r, have); err != nil {
			got = err.Status
		}
		if got != c.want {
			t.Errorf("%s: %s (exists %v): got %d, want %d", c.header, c.value, c.exists, got, c.want)
		}
	}
}

func TestQueryParameters(t *testing.T) {
	q := url.Values{"instance_id": {"1"}}
	if err := UnknownQueryParameter(q, "ser_instance_id"); err == nil {
		t.Fatal("an unknown parameter must be refused")
	}
	q = url.Values{"subscription_type": {"wrongType"}}
	if err := EnumQueryParameter(q, "subscription_type", "cell_change"); err == nil {
		t.Fatal("a value outside the enumeration must be refused")
	}
	if err := EnumQueryParameter(url.Values{}, "subscription_type", "cell_change"); err != nil {
		t.Fatal(err)
	}
}
