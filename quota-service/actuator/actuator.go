// Package actuator carries out a plan on Nomad: it suspends jobs (record in
// Consul KV first, then stop the job without purging it) and resumes
// suspended jobs (register the stopped job again with Stop=false, as
// `nomad job start` does), in the plan's order.
//
// It refuses to act on stale data: a View listed longer ago than
// Options.MaxStaleness is rejected with ErrStale and nothing is done. It
// avoids loops (docs/design.md, Suspension and resumption): a job it
// resumed within ResumeHold is not suspended again unless the workload it
// would make room for stays within its project's guarantee, a job it
// suspended within SuspendHold is not resumed, and a job with an action in
// flight (issued but not yet visible in Nomad) is left alone. It also finishes suspensions recorded in KV whose job still
// runs (a predecessor stopped half-way) and deletes records of jobs that
// run again.
package actuator

import (
	"context"
	"errors"
	"fmt"
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

// ErrUnsettled is returned when the View leaves running GPU allocations
// unaccounted for (nomadwatch.View.Unaccounted): usage would be
// undercounted, so nothing is done until Nomad's state settles.
var ErrUnsettled = errors.New("cluster view does not account for every running GPU allocation yet; taking no action")

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
	// ReclaimHold is how long a suspended job is kept from resuming
	// while the workload it was suspended for has not been placed yet
	// (default 30 s): the capacity it freed is that workload's, even
	// while Nomad has not re-evaluated it and reports nothing queued.
	ReclaimHold time.Duration
	// RecoveryHold is how long resumes wait after the service could not
	// read Nomad or Consul (default 30 s; see HoldResumes). Suspensions
	// for a guarantee are not held.
	RecoveryHold time.Duration
	// InFlightTimeout is how long an issued action is awaited before the
	// job may be acted on again (default 30 s).
	InFlightTimeout time.Duration
	// NudgeEvery bounds how often a job the service made room for, which
	// the plan places but Nomad still holds queued, is re-evaluated
	// (default 3 s).
	NudgeEvery time.Duration

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
		{&o.ReclaimHold, 30 * time.Second},
		{&o.RecoveryHold, 30 * time.Second},
		{&o.InFlightTimeout, 30 * time.Second},
		{&o.NudgeEvery, 3 * time.Second},
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

	// BeforeStop, when set, is called by a suspension after its record
	// and history entry are written and before the job is stopped. It is
	// a test hook (a leader dying between the record and the stop) and is
	// nil in production. When ctx has ended once it returns, the stop is
	// abandoned and the record stays for the next leader to finish.
	BeforeStop func(ctx context.Context, rec state.Suspension)

	mu sync.Mutex
	// resumesHeldUntil: see HoldResumes.
	resumesHeldUntil time.Time
	nudgedAt         map[string]time.Time
	resumedAt        map[string]time.Time
	suspendedAt      map[string]time.Time
	inflight         map[string]inflight
}

type inflight struct {
	wantStop bool
	since    time.Time
}

// New returns an actuator; instance names this service instance in records.
func New(client *nomadapi.Client, store *state.Store, log hclog.Logger, instance string, opts Options) *Actuator {
	return &Actuator{nomad: client, store: store, log: log.Named("actuator"), instance: instance, opts: opts.withDefaults(),
		nudgedAt: map[string]time.Time{}, resumedAt: map[string]time.Time{}, suspendedAt: map[string]time.Time{}, inflight: map[string]inflight{}}
}

// Apply carries out res, planned on v: it finishes recorded suspensions,
// clears the records of jobs that run again, then carries out the plan's
// actions in order.
func (a *Actuator) Apply(ctx context.Context, v *nomadwatch.View, res plan.Result) (Report, error) {
	now := time.Now()
	if age := now.Sub(v.ListedAt); age > a.opts.MaxStaleness {
		return Report{}, fmt.Errorf("%w: listed %s ago", ErrStale, age.Round(time.Millisecond))
	}
	if n := len(v.Unaccounted); n > 0 {
		return Report{}, fmt.Errorf("%w: %d, e.g. %s", ErrUnsettled, n, v.Unaccounted[0])
	}
	a.settleInflight(v, now)
	ap := &applying{Actuator: a, v: v, now: now}
	ap.finishRecorded(ctx)
	ap.clearStale(ctx)
	ap.carryOut(ctx, res)
	return ap.rep, nil
}

// applying is one Apply call: its view, the plan's tallies and the report.
type applying struct {
	*Actuator
	v   *nomadwatch.View
	now time.Time
	rep Report

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
}

// finishRecorded stops the jobs of suspensions a predecessor recorded but
// did not carry out. The plan counted those jobs' allocations as running:
// a call that finishes a suspension issues no new one (the next cycle
// plans on the freed capacity), or it would suspend more than needed.
func (ap *applying) finishRecorded(ctx context.Context) {
	for _, rec := range ap.v.Unfinished {
		if ap.busy(nomadwatch.Key(rec.Namespace, rec.Job)) {
			continue
		}
		if err := ap.stop(ctx, rec); err != nil {
			ap.rep.Errors = append(ap.rep.Errors, err)
			continue
		}
		ap.history(ctx, &ap.rep, state.Entry{Event: state.EventSuspendFinished, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project,
			Reason: "finished a suspension recorded before the stop: " + rec.Reason, ForWorkload: rec.ForWorkload})
		ap.rep.Done = append(ap.rep.Done, Done{Event: state.EventSuspendFinished, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project,
			ForWorkload: rec.ForWorkload, ForProject: rec.ForProject, Reason: rec.Reason})
	}
}

// clearStale deletes the records of jobs that run again or are gone.
func (ap *applying) clearStale(ctx context.Context) {
	for _, rec := range ap.v.Stale {
		if err := ap.guard(ctx, "deleting the record of "+nomadwatch.Key(rec.Namespace, rec.Job)); err != nil {
			ap.rep.Errors = append(ap.rep.Errors, err)
			continue
		}
		if err := ap.store.DeleteSuspension(ctx, rec.Namespace, rec.Job); err != nil {
			ap.rep.Errors = append(ap.rep.Errors, err)
			continue
		}
		ap.history(ctx, &ap.rep, state.Entry{Event: state.EventRunningAgain, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project,
			Reason: "job runs again (or is gone); suspension record deleted"})
		ap.rep.Done = append(ap.rep.Done, Done{Event: state.EventRunningAgain, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project})
	}
}

// carryOut takes the plan's actions in order; once a suspension for a
// workload is held back or fails, the workload's other actions are
// dropped.
func (ap *applying) carryOut(ctx context.Context, res plan.Result) {
	ap.tally(res)
	for _, act := range res.Actions {
		if ap.skipped[act.Workload] {
			continue
		}
		switch act.Kind {
		case plan.Suspend:
			ap.suspendFor(ctx, act)
		case plan.Place:
			ap.place(ctx, act)
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

// suspendFor carries out one suspension unless it is held back.
func (ap *applying) suspendFor(ctx context.Context, act plan.Action) {
	w := ap.v.Snapshot.Pending[act.Workload]
	if len(ap.v.Unfinished) > 0 {
		ap.skip(act, "suspend %s: a recorded suspension is being finished; planning again on the capacity it frees", act.Job)
		return
	}
	info := ap.v.Jobs[act.Job]
	if info == nil {
		ap.skip(act, "suspend %s: job not in the view", act.Job)
		return
	}
	if why := ap.holdSuspend(act.Job, ap.withinGuarantee[w.Project], ap.now); why != "" {
		ap.skip(act, "suspend %s for %s/%s: %s", act.Job, w.Job, w.Group, why)
		return
	}
	rec := state.Suspension{Namespace: info.Namespace, Job: info.ID, Project: act.Project,
		Allocations: act.Allocations, Reason: act.Reason, ForWorkload: w.Job + "/" + w.Group,
		ForProject: w.Project, Time: ap.now, By: ap.instance}
	if err := ap.suspend(ctx, &rec); err != nil {
		ap.skipped[act.Workload] = true
		ap.rep.Errors = append(ap.rep.Errors, err)
		return
	}
	ap.rep.Done = append(ap.rep.Done, Done{Event: state.EventSuspend, Namespace: info.Namespace, Job: info.ID, Project: act.Project,
		ForWorkload: rec.ForWorkload, ForProject: w.Project, Reason: act.Reason})
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
	rec, ok := ap.v.Suspended[act.Job]
	if !ok {
		return
	}
	why := ap.holdForBeneficiary(ap.v, rec, ap.now)
	if why == "" {
		why = ap.holdResume(act.Job, ap.now)
	}
	if why != "" {
		ap.rep.Skipped = append(ap.rep.Skipped, fmt.Sprintf("resume %s: %s", act.Job, why))
		return
	}
	if err := ap.resume(ctx, rec); err != nil {
		ap.rep.Errors = append(ap.rep.Errors, err)
		return
	}
	ap.history(ctx, &ap.rep, state.Entry{Event: state.EventResume, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: act.Reason})
	ap.rep.Done = append(ap.rep.Done, Done{Event: state.EventResume, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: act.Reason})
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
