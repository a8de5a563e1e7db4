// Package actuator carries out a plan on Nomad: it suspends jobs (record in
// Consul KV first, then stop the job without purging it) and resumes
// suspended jobs (register the stopped job again with Stop=false, as
// `nomad job start` does), in the plan's order.
//
// It refuses to act on stale data: a View listed longer ago than
// Options.MaxStaleness is rejected with ErrStale and nothing is done. It avoids
// loops: a job it resumed within ResumeHold is not suspended again unless
// the workload it would make room for stays within its project's
// guarantee, a job it suspended within SuspendHold is not resumed, and a
// job with an action in flight (issued but not yet visible in Nomad) is
// left alone. It also finishes suspensions recorded in KV whose job still
// runs (a predecessor stopped half-way) and deletes records of jobs that
// run again.
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

// Apply carries out res, planned on v.
func (a *Actuator) Apply(ctx context.Context, v *nomadwatch.View, res plan.Result) (Report, error) {
	var rep Report
	now := time.Now()
	if age := now.Sub(v.ListedAt); age > a.opts.MaxStaleness {
		return rep, fmt.Errorf("%w: listed %s ago", ErrStale, age.Round(time.Millisecond))
	}
	if n := len(v.Unaccounted); n > 0 {
		return rep, fmt.Errorf("%w: %d, e.g. %s", ErrUnsettled, n, v.Unaccounted[0])
	}
	a.settleInflight(v, now)

	// Finish what a predecessor started, and clear records of running jobs.
	// The plan counted those jobs' allocations as running: a cycle that
	// finishes a suspension issues no new one (the next cycle plans on
	// the freed capacity), or it would suspend more than needed.
	for _, rec := range v.Unfinished {
		key := nomadwatch.Key(rec.Namespace, rec.Job)
		if a.busy(key) {
			continue
		}
		if err := a.stop(ctx, rec); err != nil {
			rep.Errors = append(rep.Errors, err)
			continue
		}
		a.history(ctx, &rep, state.Entry{Event: state.EventSuspendFinished, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: "finished a suspension recorded before the stop: " + rec.Reason, ForWorkload: rec.ForWorkload})
		rep.Done = append(rep.Done, Done{Event: state.EventSuspendFinished, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, ForWorkload: rec.ForWorkload, ForProject: rec.ForProject, Reason: rec.Reason})
	}
	for _, rec := range v.Stale {
		if err := a.guard(ctx, "deleting the record of "+nomadwatch.Key(rec.Namespace, rec.Job)); err != nil {
			rep.Errors = append(rep.Errors, err)
			continue
		}
		if err := a.store.DeleteSuspension(ctx, rec.Namespace, rec.Job); err != nil {
			rep.Errors = append(rep.Errors, err)
			continue
		}
		a.history(ctx, &rep, state.Entry{Event: state.EventRunningAgain, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: "job runs again (or is gone); suspension record deleted"})
		rep.Done = append(rep.Done, Done{Event: state.EventRunningAgain, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project})
	}

	withinGuarantee := map[string]bool{}
	for _, s := range res.Shares {
		withinGuarantee[s.Name] = s.Planned <= s.Guaranteed
	}
	snap := v.Snapshot
	// Count, per suspended job, the instances pending and the instances
	// the plan places: a job is resumed only when all of it fits.
	pendingOf, placedOf := map[string]int{}, map[string]int{}
	for _, p := range snap.Pending {
		if p.Suspended {
			pendingOf[p.Job] += p.Count
		}
	}
	for _, act := range res.Actions {
		if act.Kind == plan.Place && snap.Pending[act.Workload].Suspended {
			placedOf[act.Job]++
		}
	}

	skipWorkload := map[int]bool{}
	resumed := map[string]bool{}
	for _, act := range res.Actions {
		if skipWorkload[act.Workload] {
			continue
		}
		w := snap.Pending[act.Workload]
		switch act.Kind {
		case plan.Suspend:
			if len(v.Unfinished) > 0 {
				skipWorkload[act.Workload] = true
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("suspend %s: a recorded suspension is being finished; planning again on the capacity it frees", act.Job))
				continue
			}
			info := v.Jobs[act.Job]
			if info == nil {
				skipWorkload[act.Workload] = true
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("suspend %s: job not in the view", act.Job))
				continue
			}
			if why := a.holdSuspend(act.Job, withinGuarantee[w.Project], now); why != "" {
				skipWorkload[act.Workload] = true
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("suspend %s for %s/%s: %s", act.Job, w.Job, w.Group, why))
				continue
			}
			rec := state.Suspension{Namespace: info.Namespace, Job: info.ID, Project: act.Project,
				Allocations: act.Allocations, Reason: act.Reason, ForWorkload: w.Job + "/" + w.Group,
				ForProject: w.Project, Time: now, By: a.instance}
			if err := a.suspend(ctx, &rec); err != nil {
				skipWorkload[act.Workload] = true
				rep.Errors = append(rep.Errors, err)
				continue
			}
			rep.Done = append(rep.Done, Done{Event: state.EventSuspend, Namespace: info.Namespace, Job: info.ID, Project: act.Project,
				ForWorkload: rec.ForWorkload, ForProject: w.Project, Reason: act.Reason})
		case plan.Place:
			if !w.Suspended {
				// Nomad places queued work itself, but an evaluation
				// blocked while the device family had no healthy
				// instance may stay blocked after capacity returns;
				// work the service made room for is re-evaluated.
				a.nudge(ctx, v, &rep, act.Job, now)
				continue
			}
			if resumed[act.Job] {
				continue
			}
			resumed[act.Job] = true
			if placedOf[act.Job] < pendingOf[act.Job] {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("resume %s: only %d of %d instances fit", act.Job, placedOf[act.Job], pendingOf[act.Job]))
				continue
			}
			rec, ok := v.Suspended[act.Job]
			if !ok {
				continue
			}
			if why := a.holdForBeneficiary(v, rec, now); why != "" {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("resume %s: %s", act.Job, why))
				continue
			}
			if why := a.holdResume(act.Job, now); why != "" {
				rep.Skipped = append(rep.Skipped, fmt.Sprintf("resume %s: %s", act.Job, why))
				continue
			}
			if err := a.resume(ctx, rec); err != nil {
				rep.Errors = append(rep.Errors, err)
				continue
			}
			a.history(ctx, &rep, state.Entry{Event: state.EventResume, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: act.Reason})
			rep.Done = append(rep.Done, Done{Event: state.EventResume, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: act.Reason})
		}
	}
	return rep, nil
}

// nudge asks Nomad to evaluate job again when the service suspended work
// for it (a suspension record names it) and the job is still queued.
func (a *Actuator) nudge(ctx context.Context, v *nomadwatch.View, rep *Report, job string, now time.Time) {
	info := v.Jobs[job]
	if info == nil || info.Stop || info.Queued == 0 {
		return
	}
	beneficiary := false
	for _, rec := range v.Suspended {
		if strings.HasPrefix(rec.ForWorkload, job+"/") {
			beneficiary = true
			break
		}
	}
	if !beneficiary {
		return
	}
	a.mu.Lock()
	last, ok := a.nudgedAt[job]
	if ok && now.Sub(last) < a.opts.NudgeEvery {
		a.mu.Unlock()
		return
	}
	a.nudgedAt[job] = now
	for k, t := range a.nudgedAt {
		if now.Sub(t) > time.Hour {
			delete(a.nudgedAt, k)
		}
	}
	a.mu.Unlock()
	if _, _, err := a.nomad.Jobs().EvaluateWithOpts(info.ID, nomadapi.EvalOptions{}, (&nomadapi.WriteOptions{Namespace: info.Namespace}).WithContext(ctx)); err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("re-evaluating %s, which capacity was freed for: %w", job, err))
		return
	}
	a.log.Debug("re-evaluated a job the plan places but Nomad holds queued", "job", job)
}

func (a *Actuator) settleInflight(v *nomadwatch.View, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, f := range a.inflight {
		info := v.Jobs[key]
		if info == nil || info.Stop == f.wantStop || now.Sub(f.since) > a.opts.InFlightTimeout {
			delete(a.inflight, key)
		}
	}
}

func (a *Actuator) busy(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.inflight[key]
	return ok
}

func (a *Actuator) holdSuspend(key string, forGuarantee bool, now time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.inflight[key]; ok {
		return "an action on it is in flight"
	}
	if t, ok := a.resumedAt[key]; ok && now.Sub(t) < a.opts.ResumeHold && !forGuarantee {
		return fmt.Sprintf("resumed %s ago and the workload is above its project's guarantee", now.Sub(t).Round(time.Second))
	}
	return ""
}

// holdForBeneficiary says why rec's job must not resume yet: the work it
// was suspended for is still registered, unfinished and not placed, and
// the suspension is younger than Options.ReclaimHold.
func (a *Actuator) holdForBeneficiary(v *nomadwatch.View, rec state.Suspension, now time.Time) string {
	if rec.ForWorkload == "" || now.Sub(rec.Time) >= a.opts.ReclaimHold {
		return ""
	}
	job := rec.ForWorkload
	if i := strings.LastIndex(job, "/"); i > 0 {
		job = job[:i] // "namespace/job/group" -> "namespace/job"
	}
	if job == nomadwatch.Key(rec.Namespace, rec.Job) {
		return ""
	}
	info := v.Jobs[job]
	if info == nil || info.Stop || info.Live > 0 || info.Status == "dead" {
		return ""
	}
	return fmt.Sprintf("the capacity it freed %s ago is kept for %s, not placed yet", now.Sub(rec.Time).Round(time.Millisecond), rec.ForWorkload)
}

// HoldResumes keeps every resume back for Options.RecoveryHold from now. The
// service calls it when it reads the cluster again after an outage: for a
// while after an agent restart, Nomad's view (clients reconnecting, stopped
// allocations not yet terminal, device families re-settling) can show
// capacity that is not there, and resuming on it would only lead to
// suspending the same job again. Resumes are never urgent; reclaims for a
// guarantee go on.
func (a *Actuator) HoldResumes(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.resumesHeldUntil = now.Add(a.opts.RecoveryHold)
}

func (a *Actuator) holdResume(key string, now time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Before(a.resumesHeldUntil) {
		return fmt.Sprintf("recovering from an outage: resumes wait %s more", a.resumesHeldUntil.Sub(now).Round(time.Second))
	}
	if _, ok := a.inflight[key]; ok {
		return "an action on it is in flight"
	}
	if t, ok := a.suspendedAt[key]; ok && now.Sub(t) < a.opts.SuspendHold {
		return fmt.Sprintf("suspended only %s ago", now.Sub(t).Round(time.Millisecond))
	}
	return ""
}

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

// suspend records, then stops the job.
func (a *Actuator) suspend(ctx context.Context, rec *state.Suspension) error {
	job, _, err := a.nomad.Jobs().Info(rec.Job, (&nomadapi.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("suspending %s/%s: reading the job: %w", rec.Namespace, rec.Job, err)
	}
	if job.Version != nil {
		rec.Version = *job.Version
	}
	if job.JobModifyIndex != nil {
		rec.JobModifyIndex = *job.JobModifyIndex
	}
	rec.Groups = map[string]int{}
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			rec.Groups[*tg.Name] = *tg.Count
		}
	}
	if err := a.guard(ctx, "suspending "+nomadwatch.Key(rec.Namespace, rec.Job)); err != nil {
		return err
	}
	if err := a.store.PutSuspension(ctx, *rec); err != nil {
		return fmt.Errorf("suspending %s/%s: not stopping it because the record could not be written: %w", rec.Namespace, rec.Job, err)
	}
	var rep Report
	a.history(ctx, &rep, state.Entry{Event: state.EventSuspend, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: rec.Reason, ForWorkload: rec.ForWorkload})
	if a.BeforeStop != nil {
		a.BeforeStop(ctx, *rec)
	}
	return a.stop(ctx, *rec)
}

// stop deregisters the job without purging it and marks the record.
func (a *Actuator) stop(ctx context.Context, rec state.Suspension) error {
	key := nomadwatch.Key(rec.Namespace, rec.Job)
	if err := a.guard(ctx, "stopping "+key+" (recorded; the next leader finishes it)"); err != nil {
		return err
	}
	if _, _, err := a.nomad.Jobs().Deregister(rec.Job, false, (&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("stopping %s (record kept at %s; the next cycle retries): %w", key, a.store.Layout().Suspension(rec.Namespace, rec.Job), err)
	}
	now := time.Now()
	a.mu.Lock()
	a.inflight[key] = inflight{wantStop: true, since: now}
	a.suspendedAt[key] = now
	a.mu.Unlock()
	rec.Stopped = true
	if err := a.store.PutSuspension(ctx, rec); err != nil {
		a.log.Warn("job stopped but its record could not be marked; it still counts as suspended", "job", key, "error", err)
	}
	a.log.Info("suspended job", "job", key, "project", rec.Project, "for", rec.ForWorkload, "reason", rec.Reason)
	return nil
}

// resume registers the stopped job again with Stop=false, unless someone
// changed it since (the modify index guards the write). It registers the
// version recorded at the suspension (fetched from the job's versions),
// not merely the latest one: the stop itself made a new version, and a
// later change by someone else (a version above the stop's) wins.
func (a *Actuator) resume(ctx context.Context, rec state.Suspension) error {
	key := nomadwatch.Key(rec.Namespace, rec.Job)
	qo := (&nomadapi.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx)
	latest, _, err := a.nomad.Jobs().Info(rec.Job, qo)
	if err != nil {
		return fmt.Errorf("resuming %s: reading the job: %w", key, err)
	}
	if latest.Stop == nil || !*latest.Stop {
		return nil // already running again; the record is cleared once it runs
	}
	var idx uint64
	if latest.JobModifyIndex != nil {
		idx = *latest.JobModifyIndex
	}
	job, from, err := a.resumeSpec(ctx, rec, latest)
	if err != nil {
		return err
	}
	stop := false
	job.Stop = &stop
	if err := a.guard(ctx, "resuming "+key); err != nil {
		return err
	}
	if _, _, err := a.nomad.Jobs().EnforceRegister(job, idx, (&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("resuming %s: registering it with Stop=false: %w", key, err)
	}
	now := time.Now()
	a.mu.Lock()
	a.inflight[key] = inflight{wantStop: false, since: now}
	a.resumedAt[key] = now
	a.mu.Unlock()
	a.log.Info("resumed job", "job", key, "project", rec.Project, "from", from)
	return nil
}

// resumeSpec picks what to register: the recorded version while the only
// version after it is the stop (Version+1), else the latest. from says
// which, for the log.
func (a *Actuator) resumeSpec(ctx context.Context, rec state.Suspension, latest *nomadapi.Job) (*nomadapi.Job, string, error) {
	var cur uint64
	if latest.Version != nil {
		cur = *latest.Version
	}
	if cur == rec.Version {
		return latest, "recorded version (no stop version seen)", nil
	}
	if cur > rec.Version+1 || cur < rec.Version {
		return latest, fmt.Sprintf("latest version %d: the job changed after its suspension (recorded version %d)", cur, rec.Version), nil
	}
	versions, _, _, err := a.nomad.Jobs().Versions(rec.Job, false, (&nomadapi.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil {
		return nil, "", fmt.Errorf("resuming %s: listing its versions: %w", nomadwatch.Key(rec.Namespace, rec.Job), err)
	}
	for _, v := range versions {
		if v.Version != nil && *v.Version == rec.Version {
			return v, fmt.Sprintf("recorded version %d", rec.Version), nil
		}
	}
	return latest, fmt.Sprintf("latest version %d: recorded version %d is no longer kept", cur, rec.Version), nil
}

func (a *Actuator) history(ctx context.Context, rep *Report, e state.Entry) {
	e.By = a.instance
	if err := a.store.AddHistory(ctx, e); err != nil {
		a.log.Warn("writing history failed", "error", err)
		rep.Errors = append(rep.Errors, err)
	}
}
