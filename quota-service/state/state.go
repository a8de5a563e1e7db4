// Package state keeps the quota service's durable records in Consul KV:
// suspension records (written before a job is stopped, kept through its
// resume while the anti-loop holds last), a bounded history of what the
// service did, per-project status documents for people and dashboards, and
// reports of suspension records the service refuses to act on.
//
// Records are JSON so that they read well in the Consul UI. The suspension
// record is the service's promise that a stopped job comes back: it holds
// the suspended version's spec, and a new leader reads the records to
// finish, drop or resume what its predecessor started (docs/design.md,
// Suspension and resumption).
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
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/surplususe"
	consulapi "github.com/hashicorp/consul/api"
)

// Event names what the service did to a job, in the history, in the
// actuator's report, in metrics and in the status's recent actions.
type Event string

const (
	// EventSuspend: the job's record was written and the job stopped.
	EventSuspend Event = "suspend"
	// EventSuspendFinished: a recorded suspension whose job still ran (a
	// leader stopped between the record and the stop) was carried out,
	// the current plan still wanting it.
	EventSuspendFinished Event = "suspend-finished"
	// EventSuspendAbandoned: a recorded suspension whose job still ran was
	// dropped without stopping the job: the current plan no longer wants
	// it, or the job changed or vanished meanwhile.
	EventSuspendAbandoned Event = "suspend-abandoned"
	// EventResume: a suspended job was registered again (from its
	// suspended version in Nomad, or from the record's spec when Nomad's
	// garbage collector had removed it).
	EventResume Event = "resume"
	// EventRunningAgain: a resumed job's hold ended (or its owner changed
	// it after the resume) and its record was deleted.
	EventRunningAgain Event = "running-again"
	// EventSuperseded: the owner registered the suspended job again (a
	// new version or `nomad job start`); the record closed and the
	// owner's version runs under the normal rules.
	EventSuperseded Event = "superseded"
	// EventOwnerStopped: the owner stopped the suspended job (a stop that
	// is not the service's); it stays stopped and is not resumed.
	EventOwnerStopped Event = "owner-stopped"
	// EventOwnerPurged: the owner purged the suspended job (a tagged job
	// vanished: Nomad's garbage collector keeps tagged jobs); the
	// suspension is cancelled.
	EventOwnerPurged Event = "owner-purged"
	// EventRecordRebuilt: a stopped job carried the service's proven tag
	// but no record the service could verify (deleted, forged, replayed,
	// or signed with a lost key where Nomad corroborated it); the record
	// was written again from Nomad's state, and the job resumes in its
	// turn.
	EventRecordRebuilt Event = "record-rebuilt"
	// EventOwnerRescaled: the owner scaled the suspended job; it stays
	// suspended and resumes at the owner's new version.
	EventOwnerRescaled Event = "owner-rescaled"
	// EventShrink: an elastic group was scaled down by the service (its
	// job keeps running with the rest).
	EventShrink Event = "shrink"
	// EventGrow: an elastic group the service shrank was scaled back up.
	EventGrow Event = "grow"
	// EventShrinkEnded: the service's claim on a shrunk group ended
	// without growth: its owner changed, scaled, stopped or purged the
	// job, or the service's scale never landed.
	EventShrinkEnded Event = "shrink-ended"
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
	txn    *consulapi.Txn
	layout kvlayout.Layout
	// HistoryMax bounds the history; older entries are deleted. Zero
	// means 500. The folder is listed to trim it on the first append and
	// then every HistoryMax/10 appends, so it may hold up to that many
	// entries above HistoryMax between trims.
	HistoryMax int
	// MaxRecordBytes bounds a suspension record's size (default
	// DefaultMaxRecordBytes, Consul's default kv_max_value_size); a job
	// whose record would be larger is not suspended.
	MaxRecordBytes int
	// Keys sign and verify suspension records and seal their specs.
	Keys recordkey.Source

	mu      sync.Mutex
	appends int
}

// New returns a store over client's KV with layout's keys.
func New(client *consulapi.Client, layout kvlayout.Layout) *Store {
	return &Store{kv: client.KV(), txn: client.Txn(), layout: layout}
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
	return s.trimHistory(ctx)
}

// trimHistory deletes the oldest entries beyond HistoryMax, every
// HistoryMax/10 appends.
func (s *Store) trimHistory(ctx context.Context) error {
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

// signedSurplusUse is the stored use of the surplus with the service's
// MAC over the record, so that nobody steers fair share by editing it.
type signedSurplusUse struct {
	surplususe.Record
	MAC string `json:"mac"`
}

// PutSurplusUse stores the projects' recent use of the surplus
// (time-aware fair share), signed with the record key.
func (s *Store) PutSurplusUse(ctx context.Context, rec surplususe.Record) error {
	ring, err := s.keys(ctx)
	if err != nil {
		return err
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding the surplus use record: %w", err)
	}
	return s.put(ctx, s.layout.SurplusUse(), signedSurplusUse{Record: rec, MAC: ring.Sign(data)})
}

// SurplusUse reads the stored use of the surplus; found is false when
// none is stored. A record the service cannot prove it wrote is an error.
func (s *Store) SurplusUse(ctx context.Context) (rec surplususe.Record, found bool, err error) {
	ring, err := s.keys(ctx)
	if err != nil {
		return rec, false, err
	}
	key := s.layout.SurplusUse()
	pair, _, err := s.kv.Get(key, Consistent(ctx))
	if err != nil {
		return rec, false, fmt.Errorf("reading Consul key %s: %w", key, err)
	}
	if pair == nil {
		return rec, false, nil
	}
	var signed signedSurplusUse
	if err := json.Unmarshal(pair.Value, &signed); err != nil {
		return rec, false, fmt.Errorf("reading Consul key %s: not a surplus use record (%w); delete it, the service writes it again", key, err)
	}
	data, err := json.Marshal(signed.Record)
	if err != nil {
		return rec, false, fmt.Errorf("encoding the surplus use record: %w", err)
	}
	if _, _, err := ring.Verify(data, signed.MAC); err != nil {
		return rec, false, fmt.Errorf("reading Consul key %s: the service cannot prove it wrote it (%w); it goes on from its own history and writes the key again", key, err)
	}
	return signed.Record, true, nil
}

// Consistent are the options of a read the service decides on: Consul
// answers it only once its leader has applied its whole log (a leader
// elected a moment ago may otherwise answer a default read from a state
// not yet restored, such as an empty folder right after a restart), and
// a record the read misses is a decision (a job taken for its owner's).
func Consistent(ctx context.Context) *consulapi.QueryOptions {
	return (&consulapi.QueryOptions{RequireConsistent: true}).WithContext(ctx)
}
