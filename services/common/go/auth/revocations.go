package auth

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// Revocations is the platform's list of revoked subjects (client ids) from
// <platform>/oauth2/revocations, fetched again on use when older than Refresh. While the
// platform cannot be reached the last list is used; once it is older than MaxStale every
// subject counts as revoked (fail closed), as mec_common.auth.RevocationList does.
type Revocations struct {
	url      string
	client   *http.Client
	Refresh  time.Duration
	MaxStale time.Duration

	mu        sync.Mutex
	revoked   map[string]bool
	fetched   time.Time // last successful fetch (zero: never)
	attempted time.Time
}

// NewRevocations returns the list at url (fetched on first use).
func NewRevocations(url string) *Revocations {
	return &Revocations{url: url, client: &http.Client{Timeout: 2 * time.Second},
		Refresh: 5 * time.Second, MaxStale: 60 * time.Second, revoked: map[string]bool{}}
}

// Revoked tells whether tokens of subject must be refused.
func (r *Revocations) Revoked(subject string) bool {
	r.mu.Lock()
	due := time.Since(r.attempted) >= r.Refresh
	if due {
		r.attempted = time.Now() // one request fetches; the others use the last list
	}
	r.mu.Unlock()
	if due {
		list, err := fetchRevocations(r.client, r.url)
		r.mu.Lock()
		if err == nil {
			r.revoked, r.fetched = list, time.Now()
		}
		r.mu.Unlock()
		if err != nil {
			slog.Warn("cannot fetch the revocation list", "url", r.url, "error", err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fetched.IsZero() || time.Since(r.fetched) > r.MaxStale {
		return true
	}
	return r.revoked[subject]
}

func fetchRevocations(client *http.Client, url string) (map[string]bool, error) {
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("revocations: HTTP %d", resp.StatusCode)
	}
	var body struct {
		Revoked []struct {
			Sub string `json:"sub"`
		} `json:"revoked"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(nil, resp.Body, 8<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("revocations: %w", err)
	}
	list := make(map[string]bool, len(body.Revoked))
	for _, e := range body.Revoked {
		list[e.Sub] = true
	}
	return list, nil
}
