// Package state keeps the quota service's durable records in Consul KV:
// suspension records (written before a job is stopped, deleted once it runs
// again), a bounded history of what the service did, and per-project status
// documents for people and dashboards.
//
// Records are JSON so that they read well in the Consul UI. The suspension
// record is the service's promise that a stopped job comes back: a new
// leader reads them to finish a suspension its predecessor started and to
// resume the jobs later.
package state

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	consulapi "github.com/hashicorp/consul/api"
)

// Suspension is the record of one job the service stops to make room.
type Suspension struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Project   string `json:"project"`
	// Version and JobModifyIndex are the job's when it was stopped; the
	// job is resumed from this version.
	Version        uint64 `json:"version"`
	JobModifyIndex uint64 `json:"job_modify_index"`
	// Groups are the task groups' counts.
	Groups      map[string]int `json:"groups"`
	Allocations []string       `json:"allocations,omitempty"`
	Reason      string         `json:"reason"`
	// ForWorkload and ForProject name the pending work it made room for.
	ForWorkload string    `json:"for_workload"`
	ForProject  string    `json:"for_project"`
	Time        time.Time `json:"time"`
	// Stopped is set once Nomad accepted the stop; a record without it
	// is a suspension still to finish.
	Stopped bool   `json:"stopped"`
	By      string `json:"by,omitempty"`
}

// Event names what the service did to a job, in the history, in the
// actuator's report, in metrics and in the status's recent actions.
type Event string

const (
	// EventSuspend: the job's record was written and the job stopped.
	EventSuspend Event = "suspend"
	// EventSuspendFinished: a recorded suspension whose job still ran (a
	// leader stopped between the record and the stop) was carried out.
	EventSuspendFinished Event = "suspend-finished"
	// EventResume: a suspended job was registered again.
	EventResume Event = "resume"
	// EventRunningAgain: a suspended job runs again (or is gone) and its
	// record was deleted.
	EventRunningAgain Event = "running-again"
)

// Entry is one history entry.
type Entry struct {
	Time      time.Time `json:"time"`
	Event     Event     `json:"event"`
	Namespace string    `json:"namespace"`
	Job       string    `json:"job"`
	Project   string    `json:"project,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	// ForWorkload, for a suspension, is the workload it made room for.
	ForWorkload string `json:"for_workload,omitempty"`
	By          string `json:"by,omitempty"`
}

// ProjectStatus is the status document of one project.
type ProjectStatus struct {
	Project string `json:"project"`
	// GPU amounts, as decimal strings of GPUs ("1.50").
	Guaranteed string `json:"guaranteed"`
	Limit      string `json:"limit,omitempty"`
	Deserved   string `json:"deserved"`
	Allocated  string `json:"allocated"`
	Pending    string `json:"pending"`
	OverQuota  string `json:"over_quota"`
	// PendingWorkloads and SuspendedJobs count workloads and jobs.
	PendingWorkloads int       `json:"pending_workloads"`
	SuspendedJobs    int       `json:"suspended_jobs"`
	QuotaError       string    `json:"quota_error,omitempty"`
	Updated          time.Time `json:"updated"`
}

// Store reads and writes the records.
type Store struct {
	kv     *consulapi.KV
	layout kvlayout.Layout
	// HistoryMax bounds the history; older entries are deleted. Zero
	// means 500. The folder is listed to trim it on the first append and
	// then every HistoryMax/10 appends, so it may hold up to that many
	// entries above HistoryMax between trims.
	HistoryMax int

	mu      sync.Mutex
	appends int
}

// New returns a store over client's KV with layout's keys.
func New(client *consulapi.Client, layout kvlayout.Layout) *Store {
	return &Store{kv: client.KV(), layout: layout}
}

// Layout returns the key layout.
func (s *Store) Layout() kvlayout.Layout { return s.layout }

func (s *Store) put(ctx context.Context, key string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	if _, err := s.kv.Put(&consulapi.KVPair{Key: key, Value: data}, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("writing Consul key %s: %w (is Consul reachable and the token allowed to write it?)", key, err)
	}
	return nil
}

// PutSuspension writes the record of a suspension.
func (s *Store) PutSuspension(ctx context.Context, rec Suspension) error {
	return s.put(ctx, s.layout.Suspension(rec.Namespace, rec.Job), rec)
}

// DeleteSuspension deletes the record of job in namespace.
func (s *Store) DeleteSuspension(ctx context.Context, namespace, job string) error {
	key := s.layout.Suspension(namespace, job)
	if _, err := s.kv.Delete(key, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("deleting Consul key %s: %w", key, err)
	}
	return nil
}

// Suspensions lists all suspension records, sorted by time. A record that
// does not decode is returned in bad (key to error) and otherwise skipped.
func (s *Store) Suspensions(ctx context.Context) (recs []Suspension, bad map[string]error, err error) {
	pairs, _, err := s.kv.List(s.layout.Suspended(), (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, nil, fmt.Errorf("listing Consul prefix %s: %w", s.layout.Suspended(), err)
	}
	bad = map[string]error{}
	for _, p := range pairs {
		if strings.HasSuffix(p.Key, "/") {
			continue
		}
		var rec Suspension
		if err := json.Unmarshal(p.Value, &rec); err != nil || rec.Job == "" || rec.Namespace == "" {
			if err == nil {
				err = fmt.Errorf("record names no job or namespace")
			}
			bad[p.Key] = fmt.Errorf("suspension record %s: %w; fix: delete the key and resume the job by hand (nomad job start)", p.Key, err)
			continue
		}
		recs = append(recs, rec)
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Time.Before(recs[j].Time) })
	return recs, bad, nil
}

// historyKey sorts by time in the Consul UI.
func (s *Store) historyKey(e Entry) string {
	return fmt.Sprintf("%s%s-%s-%s-%s", s.layout.History(), e.Time.UTC().Format("20060102T150405.000000000Z"), e.Event, e.Namespace, e.Job)
}

// AddHistory appends an entry and deletes the oldest beyond HistoryMax.
func (s *Store) AddHistory(ctx context.Context, e Entry) error {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	if err := s.put(ctx, s.historyKey(e), e); err != nil {
		return err
	}
	max := s.HistoryMax
	if max <= 0 {
		max = 500
	}
	s.mu.Lock()
	n := s.appends
	s.appends++
	s.mu.Unlock()
	if every := max / 10; every > 1 && n%every != 0 {
		return nil
	}
	keys, _, err := s.kv.Keys(s.layout.History(), "", (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("listing Consul prefix %s: %w", s.layout.History(), err)
	}
	if len(keys) <= max {
		return nil
	}
	sort.Strings(keys)
	for _, k := range keys[:len(keys)-max] {
		if _, err := s.kv.Delete(k, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
			return fmt.Errorf("trimming history key %s: %w", k, err)
		}
	}
	return nil
}

// History returns the entries, oldest first.
func (s *Store) History(ctx context.Context) ([]Entry, error) {
	out, _, err := s.WatchHistory(ctx, 0, 0)
	return out, err
}

// PutProjectStatus writes one project's status document.
func (s *Store) PutProjectStatus(ctx context.Context, st ProjectStatus) error {
	return s.put(ctx, s.layout.ProjectStatus(st.Project), st)
}

// PruneProjectStatus deletes status documents of projects not in keep.
func (s *Store) PruneProjectStatus(ctx context.Context, keep map[string]bool) error {
	keys, _, err := s.kv.Keys(s.layout.ProjectStatuses(), "", (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("listing Consul prefix %s: %w", s.layout.ProjectStatuses(), err)
	}
	for _, k := range keys {
		if !keep[strings.TrimPrefix(k, s.layout.ProjectStatuses())] {
			if _, err := s.kv.Delete(k, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
				return fmt.Errorf("deleting Consul key %s: %w", k, err)
			}
		}
	}
	return nil
}
