package quota

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/backoff"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// ErrorReport is the JSON document written at
// <root>/status/quota-errors/<project> while the project's quota document
// is rejected.
type ErrorReport struct {
	Key     string `json:"key"`
	Field   string `json:"field,omitempty"`
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
	Error   string `json:"error"`
	Since   string `json:"since"`
	// InForce is what the service keeps using meanwhile (nil: no good
	// document was ever read, so the project has no guarantee).
	InForce *Settings `json:"in_force"`
}

// Watcher follows the quotas folder with blocking queries and keeps every
// project's last good settings.
type Watcher struct {
	kv     *consulapi.KV
	layout kvlayout.Layout
	log    hclog.Logger
	// WaitTime bounds one blocking query; zero means 30 s.
	WaitTime time.Duration

	mu       sync.Mutex
	inForce  map[string]Settings
	rejected map[string]*FieldError
	synced   time.Time
	changed  chan struct{}
}

// NewWatcher returns a watcher of layout's quotas folder.
func NewWatcher(client *consulapi.Client, layout kvlayout.Layout, log hclog.Logger) *Watcher {
	return &Watcher{
		kv: client.KV(), layout: layout, log: log.Named("quota"),
		inForce: map[string]Settings{}, rejected: map[string]*FieldError{},
		changed: make(chan struct{}, 1),
	}
}

// Changed receives a value after every read that changed the settings in
// force or the set of rejected documents.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// Settings returns the settings in force, sorted by project name.
func (w *Watcher) Settings() []Settings {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Settings, 0, len(w.inForce))
	for _, s := range w.inForce {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Project < out[j].Project })
	return out
}

// Rejected returns the rejected documents by project.
func (w *Watcher) Rejected() map[string]*FieldError {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]*FieldError, len(w.rejected))
	for k, v := range w.rejected {
		out[k] = v
	}
	return out
}

// LastSync is when the folder was last read successfully (zero: never).
func (w *Watcher) LastSync() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// Run follows the folder until ctx ends. Consul errors are logged and
// retried with a back-off; the settings in force stay as they are.
func (w *Watcher) Run(ctx context.Context) error {
	wait := w.WaitTime
	if wait == 0 {
		wait = 30 * time.Second
	}
	var index uint64
	retry := backoff.Backoff{Min: 250 * time.Millisecond, Max: 5 * time.Second}
	for {
		pairs, meta, err := w.kv.List(w.layout.Quotas(), (&consulapi.QueryOptions{WaitIndex: index, WaitTime: wait}).WithContext(ctx))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			w.log.Warn("reading quota documents failed; keeping the settings in force", "prefix", w.layout.Quotas(), "error", err)
			if !backoff.Sleep(ctx, retry.Next()) {
				return nil
			}
			continue
		}
		retry.Reset()
		if meta.LastIndex < index {
			index = 0 // the index went backwards (Consul restored): read afresh
		} else {
			index = meta.LastIndex
		}
		w.apply(ctx, pairs)
	}
}

// apply parses every document, updates the settings in force and writes or
// clears error reports.
func (w *Watcher) apply(ctx context.Context, pairs consulapi.KVPairs) {
	seen := map[string]bool{}
	var reports []func()
	w.mu.Lock()
	changed := false
	for _, p := range pairs {
		project := strings.TrimPrefix(p.Key, w.layout.Quotas())
		if project == "" || strings.HasSuffix(project, "/") {
			continue // the folder itself, or a subfolder
		}
		seen[project] = true
		s, err := Parse(project, p.Value)
		if err == nil {
			if old, ok := w.inForce[project]; !ok || old != s {
				w.log.Info("quota in force", "project", project, "guaranteed", s.Guaranteed.String(), "priority", s.Priority)
				w.inForce[project] = s
				changed = true
			}
			if _, was := w.rejected[project]; was {
				delete(w.rejected, project)
				changed = true
				reports = append(reports, w.clearReport(ctx, project))
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			fe = &FieldError{Project: project, Problem: err.Error(), Fix: "correct the document"}
		}
		if old, ok := w.rejected[project]; ok && old.Error() == fe.Error() {
			continue
		}
		w.rejected[project] = fe
		changed = true
		var inForce *Settings
		if s, ok := w.inForce[project]; ok {
			inForce = &s
		}
		w.log.Error("quota document rejected; keeping the last good settings", "key", p.Key, "field", fe.Field, "error", fe.Error(), "in_force", inForce != nil)
		reports = append(reports, w.writeReport(ctx, p.Key, fe, inForce))
	}
	for project := range w.inForce {
		if !seen[project] {
			w.log.Info("quota document deleted; project has no guarantee now", "project", project)
			delete(w.inForce, project)
			changed = true
		}
	}
	for project := range w.rejected {
		if !seen[project] {
			delete(w.rejected, project)
			changed = true
			reports = append(reports, w.clearReport(ctx, project))
		}
	}
	w.synced = time.Now()
	w.mu.Unlock()
	for _, r := range reports {
		r()
	}
	if changed {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

func (w *Watcher) writeReport(ctx context.Context, key string, fe *FieldError, inForce *Settings) func() {
	return func() {
		rep := ErrorReport{Key: key, Field: fe.Field, Problem: fe.Problem, Fix: fe.Fix, Error: fe.Error(),
			Since: time.Now().UTC().Format(time.RFC3339), InForce: inForce}
		data, _ := json.MarshalIndent(rep, "", "  ")
		errKey := w.layout.QuotaError(fe.Project)
		if !projectRE.MatchString(fe.Project) {
			errKey = w.layout.QuotaError(sanitize(fe.Project))
		}
		if _, err := w.kv.Put(&consulapi.KVPair{Key: errKey, Value: data}, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
			w.log.Warn("writing quota error report failed", "key", errKey, "error", err)
		}
	}
}

func (w *Watcher) clearReport(ctx context.Context, project string) func() {
	return func() {
		key := w.layout.QuotaError(project)
		if !projectRE.MatchString(project) {
			key = w.layout.QuotaError(sanitize(project))
		}
		if _, err := w.kv.Delete(key, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
			w.log.Warn("clearing quota error report failed", "key", key, "error", err)
		}
	}
}

// sanitize makes a bad project name usable as one key segment.
func sanitize(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			b[i] = '_'
		}
	}
	if len(b) == 0 {
		return "_"
	}
	if len(b) > 128 {
		b = b[:128]
	}
	return string(b)
}
