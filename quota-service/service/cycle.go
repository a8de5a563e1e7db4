package service

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/actuator"
	"github.com/gpushare/nomad-gpushare/quota-service/leader"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// cycle reads Nomad (package nomadwatch), plans and acts once; held reports that an action was
// held back or failed, so that the leader retries soon.
func (s *Service) cycle(ctx context.Context) (held bool) { return s.run(ctx, true) }

// observe is a cycle that never acts (standby).
func (s *Service) observe(ctx context.Context) { s.run(ctx, false) }

// cycleData is what one cycle read, planned and did.
type cycleData struct {
	settings []quota.Settings
	// departments are the departments in force, with settings.
	departments []quota.Department
	view        *nomadwatch.View
	res         plan.Result
	rep         actuator.Report
	// acted is set when the cycle went through the actuator (leader).
	acted bool
	// gangs are the gangs that run in part (boundPartialGangs), and
	// factors each project's surplus factor (applySurplusFactors; nil
	// when time-aware fair share is off).
	gangs   []partialGang
	factors map[string]float64
	// planGen is the plan's lastPlan.gen.
	planGen uint64
}

// cycleFailure is why a cycle took no action. cause labels
// gpushare_cycle_errors_total.
type cycleFailure struct {
	cause string
	err   error
}

// run is one cycle: read Nomad and Consul, plan, act (when mayAct and
// leading) and record the outcome.
func (s *Service) run(ctx context.Context, mayAct bool) (held bool) {
	s.cycleMu.Lock()
	defer s.cycleMu.Unlock()
	start := time.Now()
	defer func() { s.metrics.Cycle.Observe(time.Since(start).Seconds()) }()
	phases := cyclePhases{last: start}
	c, failure := s.read(ctx)
	phases.mark(&phases.read)
	if failure == nil {
		s.applySurplusFactors(ctx, c, start)
		failure = s.plan(c)
		phases.mark(&phases.plan)
	}
	if failure == nil && mayAct && s.leading() {
		failure = s.apply(ctx, c)
		phases.mark(&phases.act)
	} else if !mayAct {
		s.heldBack = nil // a standby holds nothing back; a new tenure starts afresh
	}
	if failure != nil {
		s.fail(failure)
		times := s.builder.LastTimes()
		s.log.Debug("cycle failed", "cause", failure.cause, "read", phases.read, "nomad_reading", times.Reading,
			"assembling", times.Assembling, "plan", phases.plan, "act", phases.act)
		return false
	}
	s.metrics.CycleOK.Set(1)
	if s.lastError() != "" {
		s.log.Info("cycle works again")
	}
	s.noteSurplusUse(ctx, c, start)
	s.record(ctx, c)
	phases.mark(&phases.record)
	times := s.builder.LastTimes()
	s.log.Debug("cycle", "read", phases.read, "nomad_reading", times.Reading, "assembling", times.Assembling,
		"segments", times.Segments, "plan", phases.plan, "act", phases.act, "record", phases.record)
	return len(c.rep.Skipped) > 0 || len(c.rep.Errors) > 0
}

// cyclePhases are where one cycle's time went, for the debug log
// (docs/scale.md): reading Consul and Nomad, planning, acting, recording
// the status and metrics.
type cyclePhases struct {
	last                    time.Time
	read, plan, act, record time.Duration
}

// mark ends a phase: its time since the last mark (or since the cycle
// began) goes to d.
func (p *cyclePhases) mark(d *time.Duration) {
	now := time.Now()
	*d, p.last = now.Sub(p.last), now
}

// read takes the quota settings in force, the suspension records and the
// view of Nomad, and keeps the planner off jobs the service could
// not bring back (actuator.Vet).
func (s *Service) read(ctx context.Context) (*cycleData, *cycleFailure) {
	if s.watcher.LastSync().IsZero() {
		return nil, &cycleFailure{cause: "quotas-unread", err: errors.New("quota documents not read from Consul yet")}
	}
	recs, err := s.store.Suspensions(ctx)
	if err == nil {
		recs.Shrinks, recs.ShrinkErrors, err = s.store.Shrinks(ctx)
	}
	if err != nil {
		return nil, &cycleFailure{cause: "consul", err: err}
	}
	set := s.watcher.InForce()
	c := &cycleData{settings: set.Projects, departments: set.Departments}
	if c.view, err = s.builder.Build(ctx, set, recs); err != nil {
		return nil, &cycleFailure{cause: "nomad", err: err}
	}
	for i := range c.view.RecordErrors {
		if e := &c.view.RecordErrors[i]; e.Key == "" {
			e.Key = s.cfg.Layout.Suspension(e.Namespace, e.Job)
		}
	}
	s.metrics.LastRelist.Set(float64(c.view.ListedAt.Unix()))
	s.noteProjects(c.view)
	s.act.Vet(ctx, c.view)
	return c, nil
}

// plan plans on the cycle's snapshot with the configured placement policy.
func (s *Service) plan(c *cycleData) *cycleFailure {
	opts := plan.Options{MaxMoves: s.cfg.MaxMoves}
	var err error
	var mix *placement.Workload
	if s.cfg.PolicyName != "" {
		if placement.NeedsWorkload(s.cfg.PolicyName) {
			mix = s.taskMix.of(c.view.Snapshot, time.Now())
		}
		if opts.Policy, err = plan.PolicyWithWorkload(s.cfg.PolicyName, 1, mix); err != nil {
			return &cycleFailure{cause: "plan", err: err}
		}
	}
	res, reused, err := s.lastPlan.of(c.view.Snapshot, mix, opts)
	if err != nil {
		return &cycleFailure{cause: "plan", err: err}
	}
	c.res, c.planGen = res, s.lastPlan.gen
	if reused {
		s.metrics.PlansReused.Inc()
	}
	s.boundPartialGangs(c, time.Now())
	s.logPlanChange(c)
	s.log.Trace("planned", "pending", len(c.view.Snapshot.Pending), "allocations", len(c.view.Snapshot.Allocations), "actions", len(c.res.Actions), "unplaced", len(c.res.Unplaced))
	return nil
}

// apply checks that the lock still names this instance and carries out
// the plan.
func (s *Service) apply(ctx context.Context, c *cycleData) *cycleFailure {
	if err := leader.Held(ctx, s.cfg.Consul, s.cfg.Layout.Leader(), s.cfg.Instance); err != nil {
		return &cycleFailure{cause: "leadership", err: err}
	}
	// The demand goes out before the actions: a plugin may start moving
	// an idle GPU to the family a resumption needs before Nomad blocks it.
	deferred := s.publishDemand(ctx, c)
	rep, err := s.act.Apply(ctx, c.view, c.res)
	if err != nil {
		return &cycleFailure{cause: "stale", err: err}
	}
	c.rep, c.acted = rep, true
	c.rep.Skipped = append(c.rep.Skipped, deferred...)
	s.offerRanks(c)
	for _, e := range rep.Errors {
		s.log.Error("action failed", "error", e)
	}
	for _, sk := range rep.Skipped {
		s.log.Debug("action held back", "why", sk)
	}
	s.noteHeldBack(c.rep.Skipped, time.Now())
	return nil
}

// heldBackWarnAfter is how long one action may be held back, cycle after
// cycle with the same reason, before the service warns of it.
const heldBackWarnAfter = time.Minute

// noteHeldBack warns, once, of an action held back for the same reason in
// every cycle for heldBackWarnAfter: a hold that lasts means the plan
// keeps asking for something the service will not do, and the work it
// was for waits (the chaos soak found such a stall, logged only at debug
// level). Reasons that change from cycle to cycle (a hold's remaining
// time) are transient by nature and never warned of.
func (s *Service) noteHeldBack(skipped []string, now time.Time) {
	seen := make(map[string]bool, len(skipped))
	for _, why := range skipped {
		seen[why] = true
		h, ok := s.heldBack[why]
		if !ok {
			if s.heldBack == nil {
				s.heldBack = map[string]heldBack{}
			}
			s.heldBack[why] = heldBack{since: now}
			continue
		}
		if !h.warned && now.Sub(h.since) >= heldBackWarnAfter {
			s.log.Warn("an action has been held back in every cycle", "for", now.Sub(h.since).Round(time.Second), "why", why)
			h.warned = true
			s.heldBack[why] = h
		}
	}
	for why := range s.heldBack {
		if !seen[why] {
			delete(s.heldBack, why)
		}
	}
}

// heldBack is when an action was first held back for one reason, in an
// unbroken run of cycles, and whether the service warned of it.
type heldBack struct {
	since  time.Time
	warned bool
}

// fail records a cycle that took no action: metrics, the status's last
// error, and a log line once per outage (cycle_ok and /v1/health say it
// meanwhile).
func (s *Service) fail(f *cycleFailure) {
	s.metrics.CycleErrors.WithLabelValues(f.cause).Inc()
	s.metrics.CycleOK.Set(0)
	s.mu.Lock()
	again := s.status.LastError != ""
	s.status.LastCycle, s.status.LastError = time.Now(), f.err.Error()
	s.mu.Unlock()
	if again {
		s.log.Debug("cycle took no action", "cause", f.cause, "error", f.err)
	} else {
		s.log.Warn("cycle took no action", "cause", f.cause, "error", f.err)
	}
}

// logPlanChange logs, at debug level, the plan of a cycle whose actions or
// unplaced work differ from the last one logged: what an operator (or the
// chaos soak's reader) needs to follow why work waits. A cycle that took
// the plan last logged with the same actions has nothing new to log (its
// unplaced work is that plan's, of an equal snapshot) and is not written
// out again.
func (s *Service) logPlanChange(c *cycleData) {
	if !s.log.IsDebug() {
		return
	}
	last := &s.planLogged
	if last.text != "" && last.gen == c.planGen && reflect.DeepEqual(last.actions, c.res.Actions) {
		return
	}
	var b strings.Builder
	for _, a := range c.res.Actions {
		b.WriteString("\n  ")
		b.WriteString(a.String())
	}
	for _, u := range c.res.Unplaced {
		fmt.Fprintf(&b, "\n  unplaced %s: %s", c.view.Snapshot.Pending[u.Workload].Job, u.Reason)
	}
	text := b.String()
	last.gen, last.actions = c.planGen, slices.Clone(c.res.Actions)
	if text == last.text {
		return
	}
	last.text = text
	s.log.Debug("plan changed" + text)
}

// loggedPlan is the plan logPlanChange last logged: its lastPlan.gen, its
// actions as the cycle left them, and the text logged.
type loggedPlan struct {
	gen     uint64
	actions []plan.Action
	text    string
}
