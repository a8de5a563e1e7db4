// Package service is the quota service's control loop: it follows the quota
// documents in Consul and the cluster in Nomad, plans with scheduler/plan
// and, while it holds the leader lock, acts through package actuator and
// writes per-project status to Consul KV.
//
// A cycle runs after every Nomad event or quota change (coalesced), and at
// least every PlanInterval as a safety net. Every cycle re-lists Nomad in
// full; a cycle whose listing fails, or whose Consul reads fail, takes no
// action and says why in /v1/health and with gpushare_cycle_ok = 0. Before
// every action the leader re-reads its lock (leader.Held), so an instance
// that lost the lock while it hung never acts. A standby instance runs the
// same cycles read-only, so its status and health are as informative as
// the leader's.
package service

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/actuator"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/leader"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultPlanInterval is the default safety-net re-list period.
const DefaultPlanInterval = 10 * time.Second

// Config configures a Service. A zero duration takes its default.
type Config struct {
	Nomad    *nomadapi.Client
	Consul   *consulapi.Client
	Layout   kvlayout.Layout
	Log      hclog.Logger
	Instance string
	// PlanInterval is the safety-net re-list period (default
	// DefaultPlanInterval).
	PlanInterval time.Duration
	// FollowUpWindow and FollowUpPeriod: after a Nomad event or quota
	// change, cycles repeat every FollowUpPeriod (default 500 ms) for
	// FollowUpWindow (default 3 s).
	FollowUpWindow, FollowUpPeriod time.Duration
	// MaxStaleness: no action on data older than this (default
	// actuator.DefaultMaxStaleness).
	MaxStaleness time.Duration
	// ResumeHold and SuspendHold: see package actuator.
	ResumeHold, SuspendHold time.Duration
	// PolicyName names the placement policy for idle capacity
	// (placement.Names; empty: first fit). It is built each cycle with
	// the cycle's snapshot as its expected task mix (plan.PolicyByName).
	PolicyName string
	// Registry receives the metrics (nil: a new registry).
	Registry *prometheus.Registry
	// SessionTTL and LockDelay tune the leader lock.
	SessionTTL, LockDelay time.Duration
}

// ProjectView is one project's line in /v1/projects.
type ProjectView struct {
	state.ProjectStatus
	Priority        int    `json:"priority"`
	OverQuotaWeight int64  `json:"over_quota_weight"`
	Namespace       string `json:"namespace,omitempty"`
}

// Status is /v1/status.
type Status struct {
	Instance   string        `json:"instance"`
	Leader     bool          `json:"leader"`
	LastCycle  time.Time     `json:"last_cycle"`
	LastRelist time.Time     `json:"last_relist"`
	LastError  string        `json:"last_error,omitempty"`
	Projects   []ProjectView `json:"projects"`
	Pending    []string      `json:"pending"`
	Suspended  []string      `json:"suspended"`
	Unplaced   []string      `json:"unplaced"`
	Recent     []string      `json:"recent_actions"`
	Warnings   []string      `json:"warnings,omitempty"`
}

// Health is /v1/health.
type Health struct {
	OK     bool   `json:"ok"`
	Leader bool   `json:"leader"`
	Reason string `json:"reason,omitempty"`
}

// Service is the control loop.
type Service struct {
	cfg     Config
	log     hclog.Logger
	watcher *quota.Watcher
	builder *nomadwatch.Builder
	store   *state.Store
	act     *actuator.Actuator
	metrics *metrics
	reg     *prometheus.Registry

	// cycleMu serializes cycles: the leader's and the standby's.
	cycleMu sync.Mutex
	// blind is set when a cycle could not read Nomad or Consul, and
	// cleared by the next cycle that reads both (under cycleMu).
	blind bool

	mu         sync.Mutex
	status     Status
	written    map[string]state.ProjectStatus
	reclaimFor map[string]time.Time
	isLeader   bool
}

// withDefaults returns c with the defaults applied.
func (c Config) withDefaults() Config {
	if c.Log == nil {
		c.Log = hclog.NewNullLogger()
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	for _, d := range []struct {
		field *time.Duration
		def   time.Duration
	}{
		{&c.PlanInterval, DefaultPlanInterval},
		{&c.FollowUpWindow, 3 * time.Second},
		{&c.FollowUpPeriod, 500 * time.Millisecond},
		{&c.MaxStaleness, actuator.DefaultMaxStaleness},
	} {
		if *d.field <= 0 {
			*d.field = d.def
		}
	}
	return c
}

// New builds a service.
func New(cfg Config) *Service {
	cfg = cfg.withDefaults()
	store := state.New(cfg.Consul, cfg.Layout)
	act := actuator.New(cfg.Nomad, store, cfg.Log, cfg.Instance, actuator.Options{
		MaxStaleness: cfg.MaxStaleness, ResumeHold: cfg.ResumeHold, SuspendHold: cfg.SuspendHold,
		Guard: func(ctx context.Context) error {
			return leader.Held(ctx, cfg.Consul, cfg.Layout.Leader(), cfg.Instance)
		},
	})
	return &Service{
		cfg: cfg, log: cfg.Log, store: store, act: act, reg: cfg.Registry,
		watcher:    quota.NewWatcher(cfg.Consul, cfg.Layout, cfg.Log),
		builder:    nomadwatch.NewBuilder(cfg.Nomad, cfg.Log),
		metrics:    newMetrics(cfg.Registry),
		written:    map[string]state.ProjectStatus{},
		reclaimFor: map[string]time.Time{},
		status:     Status{Instance: cfg.Instance},
	}
}

// Registry is where the metrics live.
func (s *Service) Registry() *prometheus.Registry { return s.reg }

// Run runs until ctx ends: the quota watcher, the leader election, and the
// cycles (acting only while leader). A standby instance cycles every
// PlanInterval without acting, so that its /v1/status shows the same
// read-only view as the leader's and its health says whether it can read
// Nomad and Consul.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); s.watcher.Run(ctx) }()
	go func() { defer wg.Done(); s.standby(ctx) }()
	var lerr error
	go func() {
		defer wg.Done()
		lerr = leader.Run(ctx, s.cfg.Consul, leader.Options{Key: s.cfg.Layout.Leader(), Instance: s.cfg.Instance,
			SessionTTL: s.cfg.SessionTTL, LockDelay: s.cfg.LockDelay}, s.log, s.lead)
	}()
	wg.Wait()
	return lerr
}

// lead is the leader's loop. A cycle runs after every Nomad event or
// quota change (events coalesced over 100 ms), then again every
// FollowUpPeriod for FollowUpWindow: Nomad publishes a job's registration
// before its evaluation reports queued work, and a burst of short
// follow-ups sees that work within a second instead of at the next
// PlanInterval. A cycle that held an action back (a hold that expires)
// is retried after FollowUpPeriod too.
func (s *Service) lead(ctx context.Context) {
	s.setLeader(true)
	defer s.setLeader(false)
	// Leadership ends when ctx does (lock lost), not when the cycle in
	// flight returns.
	defer context.AfterFunc(ctx, func() { s.setLeader(false) })()
	signal, wake := nomadwatch.Queue()
	go nomadwatch.Watch(ctx, s.cfg.Nomad, s.log, signal)
	tick := time.NewTicker(s.cfg.PlanInterval)
	defer tick.Stop()
	follow := time.NewTimer(s.cfg.FollowUpPeriod)
	defer follow.Stop()
	var followUntil time.Time
	held := s.cycle(ctx)
	for {
		trigger := ""
		select {
		case <-ctx.Done():
			return
		case <-wake:
			trigger = "nomad-event"
			followUntil = time.Now().Add(s.cfg.FollowUpWindow)
		case <-s.watcher.Changed():
			trigger = "quota-change"
			followUntil = time.Now().Add(s.cfg.FollowUpWindow)
		case <-tick.C:
			trigger = "interval"
		case <-follow.C:
			if !held && time.Now().After(followUntil) {
				continue
			}
			trigger = "follow-up"
		}
		// Coalesce bursts of events into one cycle.
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		s.log.Trace("cycle", "trigger", trigger)
		s.metrics.Triggers.WithLabelValues(trigger).Inc()
		held = s.cycle(ctx)
		follow.Reset(s.cfg.FollowUpPeriod)
	}
}

// standby cycles without acting every PlanInterval while this instance
// does not lead.
func (s *Service) standby(ctx context.Context) {
	tick := time.NewTicker(s.cfg.PlanInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !s.leading() && !s.watcher.LastSync().IsZero() {
			s.observe(ctx)
		}
	}
}

func (s *Service) setLeader(v bool) {
	s.mu.Lock()
	s.isLeader = v
	s.status.Leader = v
	s.mu.Unlock()
	if v {
		s.metrics.Leader.Set(1)
	} else {
		s.metrics.Leader.Set(0)
	}
}

// cycle re-lists, plans and acts once; held reports that an action was
// held back or failed, so that the leader retries soon.
func (s *Service) cycle(ctx context.Context) (held bool) { return s.run(ctx, true) }

// observe is a cycle that never acts (standby).
func (s *Service) observe(ctx context.Context) { s.run(ctx, false) }

func (s *Service) run(ctx context.Context, mayAct bool) (held bool) {
	s.cycleMu.Lock()
	defer s.cycleMu.Unlock()
	start := time.Now()
	defer func() { s.metrics.Cycle.Observe(time.Since(start).Seconds()) }()
	fail := func(cause string, err error) {
		if cause == "nomad" || cause == "consul" {
			s.blind = true
		}
		s.metrics.CycleErrors.WithLabelValues(cause).Inc()
		s.metrics.CycleOK.Set(0)
		s.mu.Lock()
		again := s.status.LastError != ""
		s.status.LastCycle, s.status.LastError = time.Now(), err.Error()
		s.mu.Unlock()
		if again {
			// Said once per outage; cycle_ok and /v1/health say it meanwhile.
			s.log.Debug("cycle took no action", "cause", cause, "error", err)
		} else {
			s.log.Warn("cycle took no action", "cause", cause, "error", err)
		}
	}
	if s.watcher.LastSync().IsZero() {
		fail("quotas-unread", errors.New("quota documents not read from Consul yet"))
		return false
	}
	recs, bad, err := s.store.Suspensions(ctx)
	if err != nil {
		fail("consul", err)
		return false
	}
	for k, e := range bad {
		s.log.Error("ignoring unreadable suspension record", "key", k, "error", e)
	}
	settings := s.watcher.Settings()
	view, err := s.builder.Build(ctx, settings, recs)
	if err != nil {
		fail("nomad", err)
		return false
	}
	s.metrics.LastRelist.Set(float64(view.ListedAt.Unix()))
	if s.blind {
		// Reading again after an outage: Nomad's state settles for a
		// while (see actuator.HoldResumes).
		s.blind = false
		s.act.HoldResumes(time.Now())
	}
	var opts plan.Options
	if s.cfg.PolicyName != "" {
		if opts.Policy, err = plan.PolicyByName(s.cfg.PolicyName, 1, view.Snapshot); err != nil {
			fail("plan", err)
			return false
		}
	}
	res, err := plan.Plan(view.Snapshot, opts)
	if err != nil {
		fail("plan", err)
		return false
	}
	s.log.Trace("planned", "pending", len(view.Snapshot.Pending), "allocations", len(view.Snapshot.Allocations), "actions", len(res.Actions), "unplaced", len(res.Unplaced))
	var rep actuator.Report
	acted := false
	if mayAct && s.leading() {
		if err := leader.Held(ctx, s.cfg.Consul, s.cfg.Layout.Leader(), s.cfg.Instance); err != nil {
			fail("leadership", err)
			return false
		}
		rep, err = s.act.Apply(ctx, view, res)
		if errors.Is(err, actuator.ErrUnsettled) {
			// Transient after an agent restart: retry soon.
			fail("unsettled", err)
			return true
		}
		if err != nil {
			fail("stale", err)
			return false
		}
		acted = true
		for _, e := range rep.Errors {
			s.log.Error("action failed", "error", e)
		}
		for _, sk := range rep.Skipped {
			s.log.Debug("action held back", "why", sk)
		}
	}
	s.metrics.CycleOK.Set(1)
	if s.Status().LastError != "" {
		s.log.Info("cycle works again")
	}
	s.record(ctx, view, res, rep, settings, acted)
	return len(rep.Skipped) > 0 || len(rep.Errors) > 0
}

func (s *Service) leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isLeader
}

// record updates metrics, the HTTP status and (leader only) the KV status.
func (s *Service) record(ctx context.Context, v *nomadwatch.View, res plan.Result, rep actuator.Report, settings []quota.Settings, leader bool) {
	now := time.Now()
	snap := v.Snapshot
	rejected := s.watcher.Rejected()
	byName := map[string]quota.Settings{}
	for _, st := range settings {
		byName[st.Project] = st
	}
	pendingShares := map[string]model.Shares{}
	pendingCount := map[string]int{}
	var pending, suspended []string
	for _, p := range snap.Pending {
		pendingShares[p.Project] += p.GPUShares()
		pendingCount[p.Project]++
		if p.Suspended {
			suspended = append(suspended, p.Job+"/"+p.Group)
		} else {
			pending = append(pending, p.Job+"/"+p.Group)
		}
	}
	suspendedJobs := map[string]int{}
	for key := range v.Suspended {
		if info := v.Jobs[key]; info != nil {
			suspendedJobs[info.Project]++
		}
	}
	var views []ProjectView
	keep := map[string]bool{}
	for _, sh := range res.Shares {
		over := sh.Usage - sh.Guaranteed
		if over < 0 {
			over = 0
		}
		st := state.ProjectStatus{Project: sh.Name, Guaranteed: sh.Guaranteed.String(), Deserved: sh.Deserved.String(),
			Allocated: sh.Usage.String(), Pending: pendingShares[sh.Name].String(), OverQuota: over.String(),
			PendingWorkloads: pendingCount[sh.Name], SuspendedJobs: suspendedJobs[sh.Name]}
		qs := byName[sh.Name]
		if qs.HasLimit {
			st.Limit = qs.Limit.String()
		}
		if fe, ok := rejected[sh.Name]; ok {
			st.QuotaError = fe.Error()
		}
		views = append(views, ProjectView{ProjectStatus: st, Priority: qs.Priority, OverQuotaWeight: qs.OverQuotaWeight, Namespace: qs.Namespace})
		keep[sh.Name] = true
		gpus := func(x model.Shares) float64 { return float64(x) / float64(model.SharesPerGPU) }
		s.metrics.Guaranteed.WithLabelValues(sh.Name).Set(gpus(sh.Guaranteed))
		s.metrics.Allocated.WithLabelValues(sh.Name).Set(gpus(sh.Usage))
		s.metrics.Deserved.WithLabelValues(sh.Name).Set(gpus(sh.Deserved))
		s.metrics.Pending.WithLabelValues(sh.Name).Set(gpus(pendingShares[sh.Name]))
		s.metrics.Suspended.WithLabelValues(sh.Name).Set(float64(suspendedJobs[sh.Name]))
	}
	s.metrics.Queue.Set(float64(len(snap.Pending)))

	var recent []string
	stillPending := map[string]bool{}
	for _, p := range snap.Pending {
		if !p.Suspended {
			stillPending[p.Job+"/"+p.Group] = true
		}
	}
	s.mu.Lock()
	for _, d := range rep.Done {
		switch d.Event {
		case state.EventSuspend, state.EventSuspendFinished:
			kind := "reclaim"
			if d.Project == d.ForProject {
				kind = "preempt"
			}
			s.metrics.Reclaims.WithLabelValues(d.Project, kind).Inc()
			if _, ok := s.reclaimFor[d.ForWorkload]; !ok && d.ForWorkload != "" {
				s.reclaimFor[d.ForWorkload] = now
			}
		case state.EventResume:
			s.metrics.Resumes.WithLabelValues(d.Project).Inc()
		}
		recent = append(recent, fmt.Sprintf("%s %s %s/%s %s", now.UTC().Format(time.RFC3339), d.Event, d.Namespace, d.Job, d.Reason))
	}
	for w, t := range s.reclaimFor {
		if !stillPending[w] {
			s.metrics.ReclaimLatency.Observe(now.Sub(t).Seconds())
			delete(s.reclaimFor, w)
		}
	}
	var unplaced []string
	for _, u := range res.Unplaced {
		p := snap.Pending[u.Workload]
		unplaced = append(unplaced, fmt.Sprintf("%s/%s: %s", p.Job, p.Group, u.Reason))
	}
	sort.Strings(pending)
	sort.Strings(suspended)
	st := &s.status
	st.LastCycle, st.LastRelist, st.LastError = now, v.ListedAt, ""
	st.Projects, st.Pending, st.Suspended, st.Unplaced, st.Warnings = views, pending, suspended, unplaced, v.Warnings
	st.Recent = append(st.Recent, recent...)
	if n := len(st.Recent); n > 50 {
		st.Recent = append([]string(nil), st.Recent[n-50:]...)
	}
	s.mu.Unlock()

	if !leader {
		return
	}
	for _, pv := range views {
		old, ok := s.written[pv.Project]
		cur := pv.ProjectStatus
		if ok {
			old.Updated = cur.Updated
			if old == cur {
				continue
			}
		}
		cur.Updated = now
		if err := s.store.PutProjectStatus(ctx, cur); err != nil {
			s.log.Warn("writing project status failed", "project", pv.Project, "error", err)
			continue
		}
		s.written[pv.Project] = cur
	}
	for p := range s.written {
		if !keep[p] {
			delete(s.written, p)
		}
	}
	if err := s.store.PruneProjectStatus(ctx, keep); err != nil {
		s.log.Warn("pruning project status failed", "error", err)
	}
}

// Status returns the last cycle's status.
func (s *Service) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Projects = append([]ProjectView(nil), st.Projects...)
	st.Recent = append([]string(nil), st.Recent...)
	return st
}

// Projects returns the per-project lines of the last cycle.
func (s *Service) Projects() []ProjectView { return s.Status().Projects }

// Health says whether the service works: its last cycle succeeded and is
// recent. A standby instance is healthy when it can read (its read-only
// cycles succeed).
func (s *Service) Health() Health {
	st := s.Status()
	h := Health{OK: true, Leader: st.Leader}
	switch {
	case st.LastError != "":
		h.OK, h.Reason = false, st.LastError
	case !st.LastCycle.IsZero() && time.Since(st.LastRelist) > s.cfg.MaxStaleness+s.cfg.PlanInterval:
		h.OK, h.Reason = false, fmt.Sprintf("no successful re-list of Nomad since %s", st.LastRelist.Format(time.RFC3339))
	case !st.Leader:
		h.Reason = "standby: another instance holds the leader lock"
	}
	return h
}
