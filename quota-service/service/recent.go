package service

import (
	"context"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// historyWait bounds one blocking read of the history; historyRetryMax
// bounds the back-off after a failed one.
const (
	historyWait     = 5 * time.Minute
	historyRetryMax = 10 * time.Second
)

// followHistory keeps the status's recent actions equal to the last
// recentMax entries of the KV history, newest first, until ctx ends. Both
// the leader and the standby read them there (the leader writes every
// action before it reports it), so their dashboards tell the same story
// and a new leader shows what its predecessor did.
func (s *Service) followHistory(ctx context.Context) {
	var index uint64
	retry := time.Second
	for ctx.Err() == nil {
		entries, next, err := s.store.WatchHistory(ctx, index, historyWait)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Debug("reading the history failed", "error", err, "retry_in", retry)
			}
			select {
			case <-ctx.Done():
			case <-time.After(retry):
			}
			retry = min(2*retry, historyRetryMax)
			continue
		}
		retry = time.Second
		// Consul's index may go backwards (a snapshot restore): start
		// over rather than wait for an index that never comes.
		if next < index {
			next = 0
		}
		index = next
		s.setRecent(newestFirst(entries, recentMax))
	}
}

// newestFirst returns the last n of entries (oldest first), newest first.
func newestFirst(entries []state.Entry, n int) []state.Entry {
	if len(entries) > n {
		entries = entries[len(entries)-n:]
	}
	out := make([]state.Entry, len(entries))
	for i, e := range entries {
		out[len(entries)-1-i] = e
	}
	return out
}

func (s *Service) setRecent(recent []state.Entry) {
	s.mu.Lock()
	s.status.Recent = recent
	s.mu.Unlock()
}
