package svc

// The suite's HTTP rules, as mec_common.rest_policy states them for the Python services:
// strong ETags and If-Match / If-None-Match with RFC 9110 semantics (412 when false; the
// ETSI MEC APIs never require a condition, so no 428), and query parameters an operation
// does not define, or cannot parse, answered with 400 naming the parameter.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// ETagOf is the strong entity tag of v's JSON representation. encoding/json writes map
// keys sorted, so equal representations have equal tags (the Python side sorts too).
func ETagOf(v any) string {
	raw, _ := json.Marshal(v)
	sum := sha256.Sum256(raw)
	return `"` + hex.EncodeToString(sum[:16]) + `"`
}

var entityTag = regexp.MustCompile(`^\s*(W/)?("[\x21\x23-\x7e\x80-\xff]*")\s*(?:,|$)`)

type tag struct {
	weak  bool
	value string
}

func parseTags(header string) ([]tag, bool) {
	var out []tag
	for rest := header; rest != ""; {
		m := entityTag.FindStringSubmatchIndex(rest)
		if m == nil {
			return nil, false
		}
		out = append(out, tag{m[2] >= 0, rest[m[4]:m[5]]})
		rest = rest[m[1]:]
	}
	return out, true
}

// PreconditionError is a false or malformed condition: Status is 412 or 400.
type PreconditionError struct {
	Status int
	Detail string
}

func (e *PreconditionError) Error() string { return e.Detail }

// CheckPreconditions evaluates If-Match, then If-None-Match (RFC 9110 §13.2.2) against the
// current representation's ETag ("" = the resource has none) for a state-changing request.
func CheckPreconditions(r *http.Request, current string) *PreconditionError {
	if h, ok := r.Header["If-Match"]; ok {
		header := strings.Join(h, ",")
		if strings.TrimSpace(header) == "*" {
			if current == "" {
				return &PreconditionError{412, "If-Match: * but the resource has no representation"}
			}
		} else {
			tags, valid := parseTags(header)
			if !valid {
				return &PreconditionError{400, fmt.Sprintf("If-Match is not a list of entity tags: %q", header)}
			}
			if !slices.ContainsFunc(tags, func(t tag) bool { return !t.weak && t.value == current }) {
				return &PreconditionError{412, "If-Match does not match the current ETag (" + current +
					"); GET the resource again and retry"}
			}
		}
	}
	if h, ok := r.Header["If-None-Match"]; ok {
		header := strings.Join(h, ",")
		tags, valid := parseTags(header)
		switch {
		case strings.TrimSpace(header) == "*":
			if current != "" {
				return &PreconditionError{412, "If-None-Match: * but the resource exists"}
			}
		case !valid:
			return &PreconditionError{400, fmt.Sprintf("If-None-Match is not a list of entity tags: %q", header)}
		case slices.ContainsFunc(tags, func(t tag) bool { return t.value == current }):
			return &PreconditionError{412, "If-None-Match matches the current ETag"}
		}
	}
	return nil
}

// WriteTagged answers v as JSON with its ETag; a GET whose If-None-Match matches gets 304.
func WriteTagged(w http.ResponseWriter, r *http.Request, status int, v any) {
	etag := ETagOf(v)
	w.Header().Set("ETag", etag)
	if r.Method == http.MethodGet && status == http.StatusOK {
		if tags, ok := parseTags(strings.Join(r.Header["If-None-Match"], ",")); ok &&
			slices.ContainsFunc(tags, func(t tag) bool { return t.value == etag }) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	}
	WriteJSON(w, status, v)
}

// UnknownQueryParameter names the first parameter of q that is not in allowed ("" if none).
func UnknownQueryParameter(q url.Values, allowed ...string) error {
	for key := range q {
		if !slices.Contains(allowed, key) {
			return fmt.Errorf("unknown query parameter %q (this operation takes: %s)", key, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// EnumQueryParameter checks that parameter name, if present, is one of values.
func EnumQueryParameter(q url.Values, name string, values ...string) error {
	if v := q.Get(name); q.Has(name) && !slices.Contains(values, v) {
		return fmt.Errorf("query parameter %q must be one of %s (got %q)", name, strings.Join(values, ", "), v)
	}
	return nil
}
