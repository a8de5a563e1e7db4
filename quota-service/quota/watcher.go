package quota

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
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
// is not taken, and at <root>/status/quota-errors/departments/<department>
// while a department's document is not taken, its projects' guarantees do
// not fit in its own, or it stays in force after its document was deleted.
type ErrorReport struct {
	Key     string `json:"key"`
	Field   string `json:"field,omitempty"`
	Problem string `json:"problem"`
	Fix     string `json:"fix"`
	Error   string `json:"error"`
	Since   string `json:"since"`
	// InForce is what the service keeps using meanwhile for a project
	// (nil: no good document was ever read, so the project has no
	// guarantee).
	InForce *Settings `json:"in_force"`
	// DepartmentInForce is the same for a department (nil: not in
	// force, so its projects are not either).
	DepartmentInForce *Department `json:"department_in_force,omitempty"`
}

// Watcher follows the quotas and departments folders with blocking
// queries and keeps the last good, consistent settings of every project
// and department.
type Watcher struct {
	kv     *consulapi.KV
	layout kvlayout.Layout
	log    hclog.Logger
	// WaitTime bounds one blocking query; zero means 30 s.
	WaitTime time.Duration

	// applyMu orders applies, so that reports are written in the order
	// the settings were decided.
	applyMu sync.Mutex
	mu      sync.Mutex
	// projectDocs and departmentDocs are the latest documents read
	// (nil: that folder not read yet).
	projectDocs, departmentDocs map[string][]byte
	res                         resolution
	synced                      time.Time
	changed                     chan struct{}
}

// NewWatcher returns a watcher of layout's quotas and departments folders.
func NewWatcher(client *consulapi.Client, layout kvlayout.Layout, log hclog.Logger) *Watcher {
	return &Watcher{
		kv: client.KV(), layout: layout, log: log.Named("quota"),
		res: resolution{inForce: inForce{projects: map[string]Settings{}, departments: map[string]Department{}},
			projectErrs: map[string]*FieldError{}, departmentErrs: map[string]*FieldError{}},
		changed: make(chan struct{}, 1),
	}
}

// Changed receives a value after every read that changed the settings in
// force or the set of rejected documents.
func (w *Watcher) Changed() <-chan struct{} { return w.changed }

// Settings returns the projects' settings in force, sorted by project
// name. Every department they name is in Departments.
func (w *Watcher) Settings() []Settings {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Settings, 0, len(w.res.projects))
	for _, name := range sortedKeys(w.res.projects) {
		out = append(out, w.res.projects[name])
	}
	return out
}

// Set is the settings in force at one moment: the projects' and the
// departments they name, each sorted by name.
type Set struct {
	Projects    []Settings
	Departments []Department
}

// InForce returns the projects and departments in force together (two
// calls to Settings and Departments could straddle a change).
func (w *Watcher) InForce() Set {
	w.mu.Lock()
	defer w.mu.Unlock()
	var set Set
	for _, name := range sortedKeys(w.res.projects) {
		set.Projects = append(set.Projects, w.res.projects[name])
	}
	for _, name := range sortedKeys(w.res.departments) {
		set.Departments = append(set.Departments, w.res.departments[name])
	}
	return set
}

// Departments returns the departments in force, sorted by name.
func (w *Watcher) Departments() []Department {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Department, 0, len(w.res.departments))
	for _, name := range sortedKeys(w.res.departments) {
		out = append(out, w.res.departments[name])
	}
	return out
}

// Rejected returns, by project, why its document is not taken.
func (w *Watcher) Rejected() map[string]*FieldError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return copyErrs(w.res.projectErrs)
}

// DepartmentErrors returns, by department, why its document is not taken
// or what is wrong with it and its projects.
func (w *Watcher) DepartmentErrors() map[string]*FieldError {
	w.mu.Lock()
	defer w.mu.Unlock()
	return copyErrs(w.res.departmentErrs)
}

func copyErrs(m map[string]*FieldError) map[string]*FieldError {
	out := make(map[string]*FieldError, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// LastSync is when both folders were last read successfully (zero: not
// both yet).
func (w *Watcher) LastSync() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.synced
}

// Run follows both folders until ctx ends. Consul errors are logged and
// retried with a back-off; the settings in force stay as they are.
func (w *Watcher) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.follow(ctx, w.layout.Departments(), true, &w.departmentDocs)
	}()
	w.follow(ctx, w.layout.Quotas(), false, &w.projectDocs)
	<-done
	return nil
}

// follow reads the documents under prefix with blocking queries until ctx
// ends into *current (under w.mu) and applies them; a read that finds
// them as they were (a blocking query that timed out, every WaitTime)
// applies nothing: hundreds of quota documents are not parsed again.
// Documents the service's Consul token may not read are left out by
// Consul; a warning says so. With optional, a read refused outright (403,
// Consul's acl.enable_key_list_policy) counts as an empty folder, so that
// a token from before the folder existed does not stop the service.
func (w *Watcher) follow(ctx context.Context, prefix string, optional bool, current *map[string][]byte) {
	wait := w.WaitTime
	if wait == 0 {
		wait = 30 * time.Second
	}
	var index uint64
	retry := backoff.Backoff{Min: 250 * time.Millisecond, Max: 5 * time.Second}
	hidden := false // the last read left documents out
	for {
		// Consistent: after a Consul restart a new leader may answer a
		// default read before it has applied its log, and an empty
		// folder would read as every document deleted.
		pairs, meta, err := w.kv.List(prefix, (&consulapi.QueryOptions{WaitIndex: index, WaitTime: wait, RequireConsistent: true}).WithContext(ctx))
		if ctx.Err() != nil {
			return
		}
		var status consulapi.StatusError
		if err != nil && optional && errors.As(err, &status) && status.Code == http.StatusForbidden {
			if !hidden {
				w.log.Warn("the service's Consul token may not list this folder; planning as if it were empty: give it read there (jobspecs/acl/consul-gpushare-quota.policy.hcl)", "prefix", prefix, "error", err)
				hidden = true
			}
			w.mu.Lock()
			*current = map[string][]byte{}
			w.mu.Unlock()
			w.apply(ctx)
			if !backoff.Sleep(ctx, retry.Next()) {
				return
			}
			continue
		}
		if err != nil {
			w.log.Warn("reading quota documents failed; keeping the settings in force", "prefix", prefix, "error", err)
			if !backoff.Sleep(ctx, retry.Next()) {
				return
			}
			continue
		}
		retry.Reset()
		if meta.ResultsFilteredByACLs && !hidden {
			w.log.Warn("the service's Consul token may not read some documents of this folder; planning as if they did not exist: give it read there (jobspecs/acl/consul-gpushare-quota.policy.hcl)", "prefix", prefix)
		}
		hidden = meta.ResultsFilteredByACLs
		if meta.LastIndex < index {
			index = 0 // the index went backwards (Consul restored): read afresh
		} else {
			index = meta.LastIndex
		}
		docs := map[string][]byte{}
		for _, p := range pairs {
			name := strings.TrimPrefix(p.Key, prefix)
			if name == "" || strings.HasSuffix(name, "/") {
				continue // the folder itself, or a subfolder
			}
			docs[name] = p.Value
		}
		w.mu.Lock()
		unchanged := *current != nil && maps.EqualFunc(*current, docs, bytes.Equal)
		*current = docs
		if unchanged && w.projectDocs != nil && w.departmentDocs != nil {
			w.synced = time.Now()
		}
		w.mu.Unlock()
		if !unchanged {
			w.apply(ctx)
		}
	}
}

// apply decides the settings in force from the latest documents of both
// folders, once both were read, and writes or clears error reports.
func (w *Watcher) apply(ctx context.Context) {
	w.applyMu.Lock()
	defer w.applyMu.Unlock()
	w.mu.Lock()
	if w.projectDocs == nil || w.departmentDocs == nil {
		w.mu.Unlock()
		return // a project may name a department not read yet
	}
	old := w.res
	res := resolve(w.layout, w.projectDocs, w.departmentDocs, old.inForce)
	w.res = res
	w.synced = time.Now()
	w.mu.Unlock()

	changed := w.logInForce(old, res)
	if w.report(ctx, old, res) {
		changed = true
	}
	if changed {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
}

// logInForce logs every department's and project's settings that came
// into force or left it, and reports whether any did.
func (w *Watcher) logInForce(old, res resolution) bool {
	changed := false
	for _, name := range sortedKeys(res.departments) {
		if d, ok := old.departments[name]; !ok || d != res.departments[name] {
			w.log.Info("department in force", "department", name, "guaranteed", res.departments[name].Guaranteed.String(), "priority", res.departments[name].Priority)
			changed = true
		}
	}
	for name := range old.departments {
		if _, ok := res.departments[name]; !ok {
			w.log.Info("department no longer in force", "department", name)
			changed = true
		}
	}
	for _, name := range sortedKeys(res.projects) {
		s := res.projects[name]
		if o, ok := old.projects[name]; !ok || o != s {
			w.log.Info("quota in force", "project", name, "guaranteed", s.Guaranteed.String(), "priority", s.Priority, "department", s.Department)
			changed = true
		}
	}
	for name := range old.projects {
		if _, ok := res.projects[name]; !ok {
			w.log.Info("quota document deleted; project has no guarantee now", "project", name)
			changed = true
		}
	}
	return changed
}

// report writes the report of every document newly rejected (or
// rejected for a new reason) and clears those no longer rejected; it
// reports whether any changed.
func (w *Watcher) report(ctx context.Context, old, res resolution) bool {
	changed := false
	for _, name := range sortedKeys(res.projectErrs) {
		fe := res.projectErrs[name]
		if o, ok := old.projectErrs[name]; ok && o.Error() == fe.Error() {
			continue
		}
		changed = true
		var kept *Settings
		if s, ok := res.projects[name]; ok {
			kept = &s
		}
		w.log.Error("quota document rejected; keeping the last good settings", "key", w.layout.Quota(name), "field", fe.Field, "error", fe.Error(), "in_force", kept != nil)
		w.writeReport(ctx, w.reportKey(name, false), w.layout.Quota(name), fe, kept, nil)
	}
	for _, name := range sortedKeys(res.departmentErrs) {
		fe := res.departmentErrs[name]
		if o, ok := old.departmentErrs[name]; ok && o.Error() == fe.Error() {
			continue
		}
		changed = true
		var kept *Department
		if d, ok := res.departments[name]; ok {
			kept = &d
		}
		w.log.Error("department not taken as written; keeping the last good settings", "key", w.layout.Department(name), "field", fe.Field, "error", fe.Error(), "in_force", kept != nil)
		w.writeReport(ctx, w.reportKey(name, true), w.layout.Department(name), fe, nil, kept)
	}
	for name := range old.projectErrs {
		if _, ok := res.projectErrs[name]; !ok {
			changed = true
			w.clearReport(ctx, w.reportKey(name, false))
		}
	}
	for name := range old.departmentErrs {
		if _, ok := res.departmentErrs[name]; !ok {
			changed = true
			w.clearReport(ctx, w.reportKey(name, true))
		}
	}
	return changed
}

// reportKey is where the report on a project's or department's document
// goes.
func (w *Watcher) reportKey(name string, department bool) string {
	if !projectRE.MatchString(name) {
		name = sanitize(name)
	}
	if department {
		return w.layout.DepartmentError(name)
	}
	return w.layout.QuotaError(name)
}

func (w *Watcher) writeReport(ctx context.Context, errKey, docKey string, fe *FieldError, kept *Settings, keptDepartment *Department) {
	rep := ErrorReport{Key: docKey, Field: fe.Field, Problem: fe.Problem, Fix: fe.Fix, Error: fe.Error(),
		Since: time.Now().UTC().Format(time.RFC3339), InForce: kept, DepartmentInForce: keptDepartment}
	data, _ := json.MarshalIndent(rep, "", "  ")
	if _, err := w.kv.Put(&consulapi.KVPair{Key: errKey, Value: data}, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
		w.log.Warn("writing quota error report failed", "key", errKey, "error", err)
	}
}

func (w *Watcher) clearReport(ctx context.Context, key string) {
	if _, err := w.kv.Delete(key, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
		w.log.Warn("clearing quota error report failed", "key", key, "error", err)
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
