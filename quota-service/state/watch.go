package state

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	consulapi "github.com/hashicorp/consul/api"
)

// WatchHistory returns the history entries, oldest first, once the history
// folder's Consul index passes waitIndex (a blocking query that returns
// after at most wait; waitIndex 0 returns at once), with the index to wait
// on next. Every instance reads what the leader did from here, so the
// leader's and the standby's recent actions are the same.
func (s *Store) WatchHistory(ctx context.Context, waitIndex uint64, wait time.Duration) ([]Entry, uint64, error) {
	q := (&consulapi.QueryOptions{WaitIndex: waitIndex, WaitTime: wait}).WithContext(ctx)
	pairs, meta, err := s.kv.List(s.layout.History(), q)
	if err != nil {
		return nil, 0, fmt.Errorf("listing Consul prefix %s: %w", s.layout.History(), err)
	}
	var out []Entry
	for _, p := range pairs {
		var e Entry
		if json.Unmarshal(p.Value, &e) == nil {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, meta.LastIndex, nil
}
