// Package actuator carries out a plan on Nomad and keeps the suspension
// records true to Nomad's state (docs/design.md, Suspension and
// resumption).
//
// A suspension writes its record in Consul KV first (the suspended
// version's spec included), then stops the job without purging it and tags
// the stopped version, so that Nomad's garbage collector keeps the job and
// its owner sees why in `nomad job history`. A resume registers the
// suspended version again with Stop=false (as `nomad job start` does) and
// removes the tag. Every step is written to the record only once Nomad
// shows the step before it, and the actuator acts on a record only through
// the verdict package nomadwatch gives it against Nomad's state: records
// Nomad does not corroborate are reported and never acted on, and the
// owner's own stop, purge or new version wins over the record.
//
// It refuses to act on stale data: a View listed longer ago than
// Options.MaxStaleness is rejected with ErrStale and nothing is done. The
// holds that keep it from loops live in the records, so that a new leader
// keeps them: a job resumed within ResumeHold is not suspended again
// unless the workload it would make room for stays within its project's
// guarantee, a job suspended within SuspendHold is not resumed, and the
// capacity a suspension freed is kept for the workload it was made for
// while that workload waits (at most ReclaimHold).
package actuator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// ErrStale is returned when the View is too old to act on.
var ErrStale = errors.New("cluster view is stale; taking no action")

// Done is one action carried out.
type Done struct {
	Event     state.Event
	Namespace string
	Job       string
	Project   string
	// ForWorkload and ForProject, for a suspension, name the pending
	// work it made room for.
	ForWorkload string
	ForProject  string
	Reason      string
}

// Report is what one Apply did and skipped.
type Report struct {
	Done    []Done
	Skipped []string
	Errors  []error
}

// DefaultMaxStaleness is the default bound on the age of a View acted on.
const DefaultMaxStaleness = 15 * time.Second

// Options tune an Actuator. A zero duration takes its default.
type Options struct {
	// MaxStaleness bounds the age of a View acted on (default
	// DefaultMaxStaleness).
	MaxStaleness time.Duration
	// ResumeHold and SuspendHold prevent flapping (defaults 60 s, 5 s).
	ResumeHold  time.Duration
	SuspendHold time.Duration
	// ReclaimHold bounds how long a suspended job is kept from resuming
	// while the workload it was suspended for waits to be placed
	// (default 5 min): the capacity it freed is that workload's until it
	// is placed or gone, but a workload that Nomad never places does not
	// keep the job away for ever.
	ReclaimHold time.Duration
	// NudgeEvery bounds how often a job the service made room for, which
	// the plan places but Nomad still holds queued, is re-evaluated
	// (default 3 s).
	NudgeEvery time.Duration
	// PermissionsEvery is how often the service's Nomad token's
	// permissions are read again for the may-it-come-back check
	// (default 1 min).
	PermissionsEvery time.Duration

	// Guard, when set, is called before every write to Nomad or to the
	// suspension records; an error cancels that action. The service
	// checks there that it still holds the leader lock, so that a leader
	// that hung (and lost its lock meanwhile) cannot act on waking up.
	Guard func(ctx context.Context) error
}

// withDefaults returns o with every zero duration set to its default.
func (o Options) withDefaults() Options {
	for _, d := range []struct {
		field *time.Duration
		def   time.Duration
	}{
		{&o.MaxStaleness, DefaultMaxStaleness},
		{&o.ResumeHold, 60 * time.Second},
		{&o.SuspendHold, 5 * time.Second},
		{&o.ReclaimHold, 5 * time.Minute},
		{&o.NudgeEvery, 3 * time.Second},
		{&o.PermissionsEvery, time.Minute},
	} {
		if *d.field <= 0 {
			*d.field = d.def
		}
	}
	return o
}

// Actuator executes plans. Apply must not be called concurrently.
type Actuator struct {
	nomad    *nomadapi.Client
	store    *state.Store
	log      hclog.Logger
	instance string
	opts     Options
	perms    *permissions

	// BeforeStop, when set, is called by a suspension after its record
	// and history entry are written and before the job is stopped;
	// BeforeMark after Nomad accepted the stop and before the stopped
	// version is tagged and the record marked; AfterStop after the stop
	// is recorded. They are test hooks (a leader dying around the stop)
	// and are nil in production. When ctx has ended once BeforeStop or
	// BeforeMark returns, the suspension goes no further and the record
	// stays for the next leader.
	BeforeStop func(ctx context.Context, rec state.Suspension)
	BeforeMark func(ctx context.Context, rec state.Suspension)
	AfterStop  func(ctx context.Context, rec state.Suspension)
	// SkipTag, when set and true for a record, leaves its stopped
	// version untagged, as when tagging fails. A test hook.
	SkipTag func(rec state.Suspension) bool

	mu       sync.Mutex
	nudgedAt map[string]time.Time
	vetted   map[string]vetted
	lastVet  *vetPass
}

// New returns an actuator; instance names this service instance in records.
func New(client *nomadapi.Client, store *state.Store, log hclog.Logger, instance string, opts Options) *Actuator {
	opts = opts.withDefaults()
	return &Actuator{nomad: client, store: store, log: log.Named("actuator"), instance: instance, opts: opts,
		perms: newPermissions(client, opts.PermissionsEvery), nudgedAt: map[string]time.Time{}}
}

// Apply carries out res, planned on v: it brings the records up to date
// with Nomad (marks landed steps, closes what the owner decided, ends
// holds), carries out the plan's actions in order, then drops the
// unfinished suspensions the plan no longer wants.
func (a *Actuator) Apply(ctx context.Context, v *nomadwatch.View, res plan.Result) (Report, error) {
	now := time.Now()
	if age := now.Sub(v.ListedAt); age > a.opts.MaxStaleness {
		return Report{}, fmt.Errorf("%w: listed %s ago", ErrStale, age.Round(time.Millisecond))
	}
	ap := &applying{Actuator: a, v: v, now: now, records: map[string]*state.Suspension{}, suspending: map[string]bool{},
		shrinks: map[string]*state.Shrink{}, jobs: map[string]scaled{}, shrunkAllocs: map[string]bool{}}
	for key, r := range v.Records {
		rec := r.Suspension
		ap.records[key] = &rec
	}
	for key, index := range v.Unverified {
		// Not the service's record: only its key's index is kept, so
		// that a suspension of the job may replace it.
		ns, job, _ := strings.Cut(key, "/")
		ap.records[key] = &state.Suspension{Namespace: ns, Job: job, ModifyIndex: index}
	}
	ap.settleRecords(ctx)
	ap.settleShrinks(ctx)
	ap.carryOut(ctx, res)
	ap.grow(ctx, res.Grow)
	ap.abandonUnfinished(ctx)
	return ap.rep, nil
}

// applying is one Apply call: its view, the plan's tallies and the report.
type applying struct {
	*Actuator
	v   *nomadwatch.View
	now time.Time
	rep Report

	// records are the records as this call last wrote them (nil once
	// deleted), so that later writes compare-and-set against them.
	records map[string]*state.Suspension
	// suspending are the jobs the plan suspends on this call.
	suspending map[string]bool
	// withinGuarantee says, by project, that the plan keeps it within
	// its guarantee.
	withinGuarantee map[string]bool
	// pendingOf and placedOf count, per suspended job, the instances
	// pending and the instances the plan places: a job is resumed only
	// when all of it fits.
	pendingOf, placedOf map[string]int
	// skipped are the workloads whose remaining actions are dropped (a
	// suspension for them was held back or failed).
	skipped map[int]bool
	// resumed are the jobs whose resume was decided on this call.
	resumed map[string]bool
	// shrinks are the shrink records as this call last wrote them (by
	// job Key; Groups nil once deleted), jobs the jobs as this call's
	// scales left them, shrunkAllocs the instances shrunk on this call.
	shrinks      map[string]*state.Shrink
	jobs         map[string]scaled
	shrunkAllocs map[string]bool
}

// carryOut takes the plan's actions in order; once a suspension for a
// workload is held back or fails, the workload's other actions are
// dropped. A suspension that holds a project to its limit (Workload -1)
// stands alone.
func (ap *applying) carryOut(ctx context.Context, res plan.Result) {
	ap.tally(res)
	for _, act := range res.Actions {
		if act.Workload >= 0 && ap.skipped[act.Workload] {
			continue
		}
		switch act.Kind {
		case plan.Suspend:
			ap.suspending[act.Job] = true
			ap.suspendFor(ctx, act)
		case plan.Place:
			ap.place(ctx, act)
		case plan.Shrink:
			ap.shrinkFor(ctx, act)
		}
	}
}

// tally fills the per-call tables from the plan.
func (ap *applying) tally(res plan.Result) {
	ap.withinGuarantee = map[string]bool{}
	for _, s := range res.Shares {
		ap.withinGuarantee[s.Name] = s.Planned <= s.Guaranteed
	}
	ap.pendingOf, ap.placedOf = map[string]int{}, map[string]int{}
	snap := ap.v.Snapshot
	for _, p := range snap.Pending {
		if p.Suspended {
			ap.pendingOf[p.Job] += p.Count
		}
	}
	for _, act := range res.Actions {
		if act.Kind == plan.Place && snap.Pending[act.Workload].Suspended {
			ap.placedOf[act.Job]++
		}
	}
	ap.skipped, ap.resumed = map[int]bool{}, map[string]bool{}
}

// skip holds back a suspension for act's workload and drops the
// workload's other actions.
func (ap *applying) skip(act plan.Action, format string, args ...any) {
	ap.skipped[act.Workload] = true
	ap.rep.Skipped = append(ap.rep.Skipped, fmt.Sprintf(format, args...))
}

// fail records an error of this call.
func (ap *applying) fail(err error) { ap.rep.Errors = append(ap.rep.Errors, err) }

// done reports an action carried out and appends its history entry.
func (ap *applying) done(ctx context.Context, rec state.Suspension, e state.Event, reason string) {
	ap.history(ctx, &ap.rep, ap.entry(rec, e, reason))
	ap.reportDone(rec, e, reason)
}

// entry is the history entry of event e on rec's job.
func (ap *applying) entry(rec state.Suspension, e state.Event, reason string) state.Entry {
	return state.Entry{Event: e, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project,
		Reason: reason, ForWorkload: rec.ForWorkload, By: ap.instance}
}

// reportDone adds event e on rec's job to the cycle's report.
func (ap *applying) reportDone(rec state.Suspension, e state.Event, reason string) {
	ap.rep.Done = append(ap.rep.Done, Done{Event: e, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project,
		ForWorkload: rec.ForWorkload, ForProject: rec.ForProject, Reason: reason})
}

// place follows a placement: queued work is Nomad's to place (nudged when
// the service made room for it), a suspended job is resumed once, when all
// of it fits and nothing holds it back.
func (ap *applying) place(ctx context.Context, act plan.Action) {
	if !ap.v.Snapshot.Pending[act.Workload].Suspended {
		// An evaluation blocked while the device family had no healthy
		// instance may stay blocked after capacity returns; work the
		// service made room for is re-evaluated.
		ap.nudge(ctx, ap.v, &ap.rep, act.Job, ap.now)
		return
	}
	if ap.resumed[act.Job] {
		return
	}
	ap.resumed[act.Job] = true
	if ap.placedOf[act.Job] < ap.pendingOf[act.Job] {
		ap.rep.Skipped = append(ap.rep.Skipped, fmt.Sprintf("resume %s: only %d of %d instances fit", act.Job, ap.placedOf[act.Job], ap.pendingOf[act.Job]))
		return
	}
	r := ap.v.Records[act.Job]
	rec := ap.records[act.Job]
	if r == nil || rec == nil || !r.Resumable() {
		return
	}
	if why := ap.holdResume(r, *rec); why != "" {
		ap.rep.Skipped = append(ap.rep.Skipped, fmt.Sprintf("resume %s: %s", act.Job, why))
		return
	}
	if err := ap.resume(ctx, r, rec); err != nil {
		ap.fail(err)
		return
	}
	ap.done(ctx, *rec, state.EventResume, act.Reason)
}

// guard says whether the action what may go ahead: ctx is live and the
// Guard (the leader lock) allows it.
func (a *Actuator) guard(ctx context.Context, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if a.opts.Guard == nil {
		return nil
	}
	if err := a.opts.Guard(ctx); err != nil {
		return fmt.Errorf("%s: not acting: %w", what, err)
	}
	return nil
}

// history appends e to the KV history; a failure is reported in rep.
func (a *Actuator) history(ctx context.Context, rep *Report, e state.Entry) {
	e.By = a.instance
	if err := a.store.AddHistory(ctx, e); err != nil {
		a.log.Warn("writing history failed", "error", err)
		rep.Errors = append(rep.Errors, err)
	}
}
