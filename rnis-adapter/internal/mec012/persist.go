package mec012

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"mts.invalid/suite/services/common/go/svc"
)

// savedSubscription is one subscription in the state file: its id and the body as stored
// (what GET returns, without _links).
type savedSubscription struct {
	ID    string         `json:"id"`
	Body  map[string]any `json:"body"`
	Owner string         `json:"owner,omitempty"`
}

// load reads the subscriptions saved at st.path (none if the file does not exist). Each is
// validated again as a new request would be; an expired or no longer valid one is dropped
// and logged. A file that is not a list of subscriptions is an error: the adapter must not
// start and later overwrite it.
func (st *store) load(log *slog.Logger) error {
	raw, err := os.ReadFile(st.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var saved []savedSubscription
	if err := json.Unmarshal(raw, &saved); err != nil {
		return fmt.Errorf("%s: %w", st.path, err)
	}
	for _, e := range saved {
		body, err := json.Marshal(e.Body)
		if err != nil {
			return fmt.Errorf("%s: subscription %s: %w", st.path, e.ID, err)
		}
		s, err := parseSubscription(body)
		if err != nil || e.ID == "" {
			log.Warn("saved subscription dropped", "id", e.ID, "err", err)
			continue
		}
		s.ID, s.Owner = e.ID, e.Owner
		st.subs[s.ID] = s
	}
	log.Info("subscriptions restored", "count", len(st.subs), "file", st.path)
	return nil
}

// save writes every subscription to st.path atomically: a temporary file in the same
// directory, synced, then renamed over the old one, so a crash leaves the old or the new
// list, never a torn one. No-op without a path. The caller holds st.mu.
func (st *store) save() error {
	if st.path == "" {
		return nil
	}
	saved := make([]savedSubscription, 0, len(st.subs))
	for _, s := range sortedByID(st.subs) {
		saved = append(saved, savedSubscription{ID: s.ID, Body: s.Body, Owner: s.Owner})
	}
	raw, err := json.MarshalIndent(saved, "", " ")
	if err != nil {
		return err
	}
	return svc.WriteFileAtomic(st.path, append(raw, '\n'))
}
