package nomadwatch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// DefaultResyncInterval is how often the cache kept by the event stream
// is checked against a full listing by default.
const DefaultResyncInterval = 5 * time.Minute

// Options tune a Builder. A zero duration takes its default.
type Options struct {
	// ResyncInterval is how often Build lists Nomad in full while it
	// follows the event stream, as a safety net (default
	// DefaultResyncInterval).
	ResyncInterval time.Duration
	// CatchUp bounds how long Build waits for the stream to deliver the
	// events Nomad's indexes show before it lists Nomad instead (default
	// 2 s).
	CatchUp time.Duration
	// OnRelist, when set, is told of every listing the cache adopted: why
	// (start, gap, poll, index, resync) and, for a resync, what it
	// corrected in the cache (each count should be zero).
	OnRelist func(reason string, corrected []Change)
	// MoveCooldown is how long a movable job's allocation runs before the
	// plan may move it (docs/design.md, Consolidation); 0 moves it at
	// once.
	MoveCooldown time.Duration
	// EventHook, when set, sees every batch of events before it is
	// applied; false drops the batch. A test hook (events lost without a
	// break in the stream); nil in production.
	EventHook func(*nomadapi.Events) bool
}

// Builder keeps the service's view of Nomad and assembles Views from it.
// While Follow holds the event stream, the view is the cache the events
// keep (listed in full once per connection, checked against Nomad's
// indexes every Build, and listed in full again every ResyncInterval);
// without the stream, every Build lists Nomad in full. Job specs are
// cached by the job's modify index (which moves with every change,
// version tags included), full nodes by node modify index.
type Builder struct {
	nomad *nomadapi.Client
	log   hclog.Logger
	opts  Options

	mu    sync.Mutex
	specs map[string]*nomadapi.Job
	// specsChanged are the jobs whose cached spec was set or dropped
	// since readSpecs last looked (setSpec, dropSpec).
	specsChanged map[string]bool
	// untagged are the stopped jobs read and found without the
	// service's tag, at their modify index (readTagged); named are the
	// jobs a verified record named at the last readTagged.
	untagged map[string]uint64
	named    map[string]bool
	cache    *cache
	// streaming: Follow holds a connected stream (gen counts its
	// connections); synced: the cache was listed in full since it
	// connected. applied is the index of the last batch applied.
	streaming, synced, everSynced bool
	gen, applied                  uint64
	lastFull                      time.Time
	// streamNS are the namespaces the stream's subscription covers;
	// reconnect asks Follow to subscribe again.
	streamNS  string
	reconnect chan struct{}
	// buildMu serializes Builds: each carries memo, the node segments
	// of the last View, forward (segments.go). times are the last
	// Build's; views counts the Views built (View.Seq).
	buildMu sync.Mutex
	memo    *segmentMemo
	times   BuildTimes
	views   uint64
}

// BuildTimes say where a Build's time went: reading (Nomad's indexes,
// the wait for the stream to deliver them, what events leave out, the job
// specs) and assembling the View; Segments counts the nodes the cache
// touched since the last View (all of them after a listing).
type BuildTimes struct {
	Reading, Assembling time.Duration
	Segments            int
}

// LastTimes are the last successful Build's times.
func (b *Builder) LastTimes() BuildTimes {
	b.buildMu.Lock()
	defer b.buildMu.Unlock()
	return b.times
}

// NewBuilder returns a builder over the Nomad client.
func NewBuilder(client *nomadapi.Client, log hclog.Logger, opts Options) *Builder {
	if opts.ResyncInterval <= 0 {
		opts.ResyncInterval = DefaultResyncInterval
	}
	if opts.CatchUp <= 0 {
		opts.CatchUp = 2 * time.Second
	}
	return &Builder{nomad: client, log: log.Named("nomadwatch"), opts: opts, specs: map[string]*nomadapi.Job{}, specsChanged: map[string]bool{}, untagged: map[string]uint64{}, cache: newCache(),
		reconnect: make(chan struct{}, 1)}
}

// Build assembles a View of nodes, allocations and jobs in all namespaces
// with the given quota settings (projects and departments) and suspension
// records. Any read error fails the whole build: the service never plans
// on partial data.
func (b *Builder) Build(ctx context.Context, settings quota.Set, recs state.Records) (v *View, err error) {
	b.buildMu.Lock()
	defer b.buildMu.Unlock()
	now := time.Now()
	if err := b.refresh(ctx, now); err != nil {
		return nil, err
	}
	in, err := b.inputs(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.untouch()
		}
	}()
	recorded := recordedKeys(recs)
	jobs := in.listed()
	specs, err := b.readSpecs(ctx, &in, recorded, taggedRecords(recs))
	if err != nil {
		return nil, err
	}
	unlisted, err := b.readUnlisted(ctx, jobs, recorded, specs)
	if err != nil {
		return nil, err
	}
	tagged, err := b.readTagged(ctx, jobs, recs.Verified)
	if err != nil {
		return nil, err
	}
	scaledAt, err := b.readScaledAt(ctx, jobs, specs, recs.Verified)
	if err != nil {
		return nil, err
	}
	b.prune(jobs, in.changedJobs)
	in.Specs, in.Unlisted, in.Tagged, in.Settings, in.Departments, in.Now, in.ScaledAt = specs, unlisted, tagged, settings.Projects, settings.Departments, now, scaledAt
	in.MoveCooldown = b.opts.MoveCooldown
	in.Suspensions, in.Unverified, in.RecordErrors, in.Keys = recs.Verified, recs.Unverified, recs.Errors, recs.Keys
	in.Shrinks, in.ShrinkErrors = recs.Shrinks, recs.ShrinkErrors
	t := time.Now()
	v = Assemble(in)
	b.views++
	v.Seq, v.SpecsChanged = b.views, in.specsChanged
	b.times = BuildTimes{Reading: t.Sub(now), Assembling: time.Since(t), Segments: len(in.changed)}
	return v, nil
}

// recordedKeys are the job Keys some record names (verified or not), in
// record order.
func recordedKeys(recs state.Records) []string {
	var keys []string
	for _, r := range recs.Verified {
		keys = append(keys, r.Key())
	}
	for _, r := range recs.Unverified {
		keys = append(keys, r.Key())
	}
	return keys
}

// taggedRecords are the tags the verified records say the service put on
// their jobs' stopped versions, by job Key.
func taggedRecords(recs state.Records) map[string]string {
	tags := map[string]string{}
	for _, r := range recs.Verified {
		if r.Tagged && r.Tag != "" {
			tags[r.Key()] = r.Tag
		}
	}
	return tags
}

// lacksTag says spec's current version does not carry tag ("" never
// lacks).
func lacksTag(spec *nomadapi.Job, tag string) bool {
	return tag != "" && (spec.VersionTag == nil || spec.VersionTag.Name != tag)
}

// readSpecs reads the full spec of every job that may have pending work
// (registered, not stopped, not finished) and of every recorded job; a
// spec cached at the job's modify index is not read again. Tagging a
// version does not move the job's modify index, so a job whose record
// says it is tagged (tags, by Key) but whose cached or stale spec lacks
// the tag is read again from the leader: a missing tag closes a record.
//
// With the memo of the last View, only the jobs whose spec may have
// changed are looked at (specKeys); the others keep the last View's.
// The View gets a copy, which readUnlisted adds to.
func (b *Builder) readSpecs(ctx context.Context, in *Inputs, recordedKeys []string, tags map[string]string) (map[string]*nomadapi.Job, error) {
	jobs := in.listed()
	recorded := make(map[string]bool, len(recordedKeys))
	for _, k := range recordedKeys {
		recorded[k] = true
	}
	var moved []*nomadapi.JobListStub
	b.mu.Lock()
	specs, keys, all := b.specKeys(in, recorded, tags)
	for _, key := range keys {
		delete(specs, key)
		j := jobs.byKey[key]
		if j == nil || ((j.Stop || j.Status == "dead" || j.ParameterizedJob || j.Periodic) && !recorded[key]) {
			continue
		}
		if spec := b.cachedSpec(key, j); spec != nil && !lacksTag(spec, tags[key]) {
			specs[key] = spec
		} else {
			moved = append(moved, j)
		}
	}
	b.mu.Unlock()
	err := readEach(moved, specs, func(j *nomadapi.JobListStub) (string, *nomadapi.Job, error) {
		key := Key(j.Namespace, j.ID)
		spec, err := b.spec(ctx, j, tags[key])
		return key, spec, err
	})
	if err != nil {
		return nil, err
	}
	m := in.memo
	if m == nil {
		return specs, nil
	}
	if !all {
		in.specsChanged = make(map[string]bool, len(keys))
		for _, key := range keys {
			in.specsChanged[key] = true
		}
	}
	m.specs, m.recorded, m.tags = specs, recorded, tags
	return maps.Clone(specs), nil
}

// specKeys are the specs to start from and the jobs whose spec to look at
// again: with the memo's last specs, the jobs whose listing changed, that
// a record names or tags now or at the last View, and whose cached spec
// changed; else an empty map and every job (all). b.mu is held.
func (b *Builder) specKeys(in *Inputs, recorded map[string]bool, tags map[string]string) (specs map[string]*nomadapi.Job, keys []string, all bool) {
	jobs, m := in.listed(), in.memo
	if m == nil || m.specs == nil || in.changedJobs == nil {
		clear(b.specsChanged)
		return make(map[string]*nomadapi.Job, len(jobs.stubs)), jobs.keys, true
	}
	look := make(map[string]bool, len(in.changedJobs)+len(recorded)+len(m.recorded)+len(tags)+len(m.tags)+len(b.specsChanged))
	for _, set := range []map[string]bool{in.changedJobs, recorded, m.recorded, b.specsChanged} {
		for k := range set {
			look[k] = true
		}
	}
	for _, set := range []map[string]string{tags, m.tags} {
		for k := range set {
			look[k] = true
		}
	}
	clear(b.specsChanged)
	return m.specs, slices.Collect(maps.Keys(look)), false
}

// readUnlisted reads the job of every record the listing left out, one by
// one: a listing under ACLs leaves out what the token may not see, so only
// Nomad's 404 says the job is gone.
func (b *Builder) readUnlisted(ctx context.Context, jobs jobList, recorded []string, specs map[string]*nomadapi.Job) (map[string]error, error) {
	unlisted := map[string]error{}
	for _, key := range recorded {
		if jobs.byKey[key] != nil {
			continue
		}
		ns, id, _ := strings.Cut(key, "/")
		job, _, err := b.nomad.Jobs().Info(id, (&nomadapi.QueryOptions{Namespace: ns}).WithContext(ctx))
		switch code := StatusCode(err); {
		case err == nil:
			specs[key] = job
		case code == http.StatusNotFound:
			unlisted[key] = nil
		case code != 0:
			unlisted[key] = fmt.Errorf("reading Nomad job %s: %w", key, err)
		default:
			return nil, fmt.Errorf("reading Nomad job %s: %w", key, err)
		}
	}
	return unlisted, nil
}

// readTagged returns the stopped jobs that carry a tag named like the
// service's on their current version and that no verified record names.
// Tags do not show in listings, so each stopped job is read once per
// modify index, and once more when the record that named it closes (its
// tag was removed); only the tagged ones' specs are kept.
func (b *Builder) readTagged(ctx context.Context, jobs jobList, verified []state.Suspension) (map[string]*nomadapi.Job, error) {
	named := map[string]bool{}
	for _, r := range verified {
		named[r.Key()] = true
	}
	tagged := map[string]*nomadapi.Job{}
	var moved []*nomadapi.JobListStub
	closed := map[string]bool{}
	b.mu.Lock()
	for _, key := range slices.Sorted(maps.Keys(jobs.stopped)) {
		j := jobs.byKey[key]
		if named[key] {
			continue
		}
		if b.named[key] {
			// Its record closed since the last read, and closing
			// removes the service's tag, which moves no modify index:
			// what is cached of it is read again, from the leader.
			b.dropSpec(key)
			delete(b.untagged, key)
			closed[key] = true
		}
		if at, seen := b.untagged[key]; seen && at == j.ModifyIndex {
			continue
		}
		if spec := b.specs[key]; spec != nil && spec.ModifyIndex != nil && *spec.ModifyIndex == j.ModifyIndex && ownTagName(spec) && stopped(spec) {
			// A spec cached for another reason (a record's job, or read
			// newer than its listing) counts only if it carries the tag.
			tagged[key] = spec
			continue
		}
		moved = append(moved, j)
	}
	b.named = named
	b.mu.Unlock()
	read := map[string]*nomadapi.Job{}
	err := readEach(moved, read, func(j *nomadapi.JobListStub) (string, *nomadapi.Job, error) {
		spec, err := b.readSpecFrom(ctx, j, !closed[Key(j.Namespace, j.ID)])
		if StatusCode(err) == http.StatusNotFound {
			return Key(j.Namespace, j.ID), nil, nil // purged since the listing
		}
		return Key(j.Namespace, j.ID), spec, err
	})
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, spec := range read {
		if spec == nil {
			continue
		}
		if ownTagName(spec) && stopped(spec) {
			b.setSpec(key, spec)
			tagged[key] = spec
			delete(b.untagged, key)
		} else if spec.ModifyIndex != nil {
			b.untagged[key] = *spec.ModifyIndex
		}
	}
	return tagged, nil
}

// readScaledAt reads the times of the scaling events of every suspended
// job that Nomad shows stopped at another job modify index than the
// service's stop: an owner's scale keeps a stopped job stopped, and only
// its scaling event tells it from a stop (see Record.scaledByOwner). It
// decides from the spec the records are classified with (specs), which
// may be newer than the listing (a change between the two reads), and
// from the listing where no spec was read.
func (b *Builder) readScaledAt(ctx context.Context, jobs jobList, specs map[string]*nomadapi.Job, verified []state.Suspension) (map[string][]int64, error) {
	stubs := jobs.byKey
	var moved []state.Suspension
	for _, r := range verified {
		if (r.Phase == state.PhaseSuspended || r.Phase == state.PhaseResuming) && stoppedElsewhere(stubs[r.Key()], specs[r.Key()], r.StopJobModifyIndex) {
			moved = append(moved, r)
		}
	}
	out := map[string][]int64{}
	err := readEach(moved, out, func(r state.Suspension) (string, []int64, error) {
		times, err := b.scalingEvents(ctx, r, nil)
		if spec := specs[r.Key()]; err == nil && spec != nil && spec.SubmitTime != nil && !slices.Contains(times, *spec.SubmitTime) &&
			time.Since(time.Unix(0, *spec.SubmitTime)) < scalingEventWait+time.Second {
			// A scale writes the job, then its event: wait briefly
			// for an event written after this new version (the soak's
			// seed 1 saw the gap); later cycles read the events again
			// until ScaleEventWindow has passed (Record.suspended).
			times, err = b.scalingEvents(ctx, r, spec.ModifyIndex)
		}
		return r.Key(), times, err
	})
	if err != nil {
		return nil, err
	}
	maps.DeleteFunc(out, func(_ string, times []int64) bool { return times == nil })
	return out, nil
}

// scalingEventWait bounds how long readScaledAt waits for the scaling
// event of a version a scale registered.
const scalingEventWait = time.Second

// scalingEvents reads the times of record r's job's scaling events; with
// after, it waits up to scalingEventWait for a change past that index.
// A job Nomad no longer knows has none.
func (b *Builder) scalingEvents(ctx context.Context, r state.Suspension, after *uint64) ([]int64, error) {
	q := &nomadapi.QueryOptions{Namespace: r.Namespace}
	if after != nil {
		q.WaitIndex, q.WaitTime = *after, scalingEventWait
	}
	st, _, err := b.nomad.Jobs().ScaleStatus(r.Job, q.WithContext(ctx))
	if StatusCode(err) == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the scaling events of Nomad job %s: %w", r.Key(), err)
	}
	var times []int64
	for _, tg := range st.TaskGroups {
		for _, e := range tg.Events {
			times = append(times, int64(e.Time))
		}
	}
	return times, nil
}

// stoppedElsewhere says Nomad shows the job stopped at another job modify
// index than stopIndex: by its spec when one was read, else by its
// listing.
func stoppedElsewhere(stub *nomadapi.JobListStub, spec *nomadapi.Job, stopIndex uint64) bool {
	switch {
	case spec != nil:
		return stopped(spec) && jobModifyIndex(spec) != stopIndex
	case stub != nil:
		return stub.Stop && stub.JobModifyIndex != stopIndex
	}
	return false
}

// StatusCode is the HTTP status of a Nomad API error (0 when err is not
// an HTTP answer).
func StatusCode(err error) int {
	var e nomadapi.UnexpectedResponseError
	if errors.As(err, &e) {
		return e.StatusCode()
	}
	return 0
}

// cachedSpec is the spec of job j (Key key) cached at its modify index,
// or nil. b.mu is held.
func (b *Builder) cachedSpec(key string, j *nomadapi.JobListStub) *nomadapi.Job {
	cached := b.specs[key]
	if cached != nil && cached.ModifyIndex != nil && *cached.ModifyIndex == j.ModifyIndex {
		return cached
	}
	return nil
}

// spec reads the spec of job j and caches it; a stale answer that lacks
// tag (see readSpecs) is read again from the leader.
func (b *Builder) spec(ctx context.Context, j *nomadapi.JobListStub, tag string) (*nomadapi.Job, error) {
	spec, err := b.readSpec(ctx, j)
	if err == nil && lacksTag(spec, tag) {
		spec, _, err = b.nomad.Jobs().Info(j.ID, (&nomadapi.QueryOptions{Namespace: j.Namespace}).WithContext(ctx))
		if err != nil {
			err = fmt.Errorf("reading Nomad job %s from the leader: %w", Key(j.Namespace, j.ID), err)
		}
	}
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.setSpec(Key(j.Namespace, j.ID), spec)
	b.mu.Unlock()
	return spec, nil
}

// readSpec reads a job at least as new as its stub: stale first, from the
// leader when the stale answer is older.
func (b *Builder) readSpec(ctx context.Context, j *nomadapi.JobListStub) (*nomadapi.Job, error) {
	return b.readSpecFrom(ctx, j, true)
}

// readSpecFrom is readSpec; without mayBeStale, only the leader answers.
func (b *Builder) readSpecFrom(ctx context.Context, j *nomadapi.JobListStub, mayBeStale bool) (*nomadapi.Job, error) {
	key := Key(j.Namespace, j.ID)
	tries := []bool{true, false}
	if !mayBeStale {
		tries = tries[1:]
	}
	for _, stale := range tries {
		spec, _, err := b.nomad.Jobs().Info(j.ID, (&nomadapi.QueryOptions{Namespace: j.Namespace, AllowStale: stale}).WithContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("reading Nomad job %s: %w", key, err)
		}
		if spec.ModifyIndex != nil && *spec.ModifyIndex >= j.ModifyIndex {
			return spec, nil
		}
	}
	return nil, fmt.Errorf("reading Nomad job %s: the leader answered a version older than index %d", key, j.ModifyIndex)
}

// prune forgets the specs and readings of jobs no longer listed: of the
// jobs whose listing changed (changed, from the cache), or of all when
// changed is nil (a new memo: a listing, or a Build that failed). Specs
// are cached only for listed jobs, and a job leaves the listing only
// through a change the cache notes.
func (b *Builder) prune(jobs jobList, changed map[string]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if changed == nil {
		for k := range b.specs {
			if jobs.byKey[k] == nil {
				b.dropSpec(k)
			}
		}
		for k := range b.untagged {
			if jobs.byKey[k] == nil {
				delete(b.untagged, k)
			}
		}
		return
	}
	for k := range changed {
		if jobs.byKey[k] == nil {
			if _, ok := b.specs[k]; ok {
				b.dropSpec(k)
			}
			delete(b.untagged, k)
		}
	}
}

// setSpec caches job key's spec; b.mu is held.
func (b *Builder) setSpec(key string, spec *nomadapi.Job) {
	b.specs[key], b.specsChanged[key] = spec, true
}

// dropSpec forgets job key's cached spec; b.mu is held.
func (b *Builder) dropSpec(key string) {
	delete(b.specs, key)
	b.specsChanged[key] = true
}

// Queue returns a function to pass to Follow that wakes the receiver of
// the returned channel at most once per pending signal.
func Queue() (func(), <-chan struct{}) {
	ch := make(chan struct{}, 1)
	return func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}, ch
}
