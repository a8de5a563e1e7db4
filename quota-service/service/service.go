// Package service is the quota service's control loop: it follows the quota
// documents in Consul and the cluster in Nomad, plans with scheduler/plan
// and, while it holds the leader lock, acts through package actuator and
// writes per-project status to Consul KV.
//
// A cycle runs after every Nomad event or quota change (paced), and at
// least every PlanInterval as a safety net. Every instance keeps its view
// of Nomad from Nomad's event stream (package nomadwatch: a full listing
// at start, after a gap, when Nomad's indexes show changes the stream did
// not deliver, and every ResyncInterval); an instance whose token Nomad
// refuses the stream lists Nomad in full every cycle. A cycle whose reads fail, or whose Consul reads fail, takes no
// action and says why in /v1/health and with gpushare_cycle_ok = 0. Before
// every action the leader re-reads its lock (leader.Held), so an instance
// that lost the lock while it hung never acts. A standby instance runs the
// same cycles read-only, so its status and health are as informative as
// the leader's.
package service

import (
	"context"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/actuator"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/leader"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/quota-service/surplususe"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
)

// DefaultPlanInterval is the default safety-net cycle period.
const DefaultPlanInterval = 10 * time.Second

// DefaultCycleGap is the default least time between the starts of two
// of the leader's cycles (Config.CycleGap).
const DefaultCycleGap = 75 * time.Millisecond

// DefaultMoveCooldown is how long a movable job runs before the plan may
// move it, and so the shortest time between two moves of a job.
const DefaultMoveCooldown = 10 * time.Minute

// Config configures a Service. A zero duration takes its default.
type Config struct {
	Nomad    *nomadapi.Client
	Consul   *consulapi.Client
	Layout   kvlayout.Layout
	Log      hclog.Logger
	Instance string
	// PlanInterval is the safety-net cycle period (default
	// DefaultPlanInterval).
	PlanInterval time.Duration
	// FollowUpWindow and FollowUpPeriod: after a Nomad event or quota
	// change, cycles repeat every FollowUpPeriod (default 500 ms) for
	// FollowUpWindow (default 3 s).
	FollowUpWindow, FollowUpPeriod time.Duration
	// CycleGap is the least time between the starts of two of the
	// leader's cycles (default DefaultCycleGap; see cyclePace.next): lower
	// decides sooner after an event and spends more CPU while Nomad is
	// busy.
	CycleGap time.Duration
	// MaxStaleness: no action on data older than this (default
	// actuator.DefaultMaxStaleness).
	MaxStaleness time.Duration
	// ResumeHold and SuspendHold: see package actuator.
	ResumeHold, SuspendHold time.Duration
	// FairShareHalfLife turns on time-aware fair share (package
	// surplususe): each project's weight in the split of the surplus is
	// lowered by its use of the surplus, decayed with this half-life. 0:
	// off. FairShareUsageWeight weighs that use (default 1).
	FairShareHalfLife    time.Duration
	FairShareUsageWeight float64
	// MaxMoves bounds the movable jobs one cycle moves to make room
	// (plan.Options.MaxMoves: 0 is plan.DefaultMaxMoves, negative none);
	// MoveCooldown is how long a movable job runs before it may be moved
	// (again) (default DefaultMoveCooldown). docs/design.md,
	// Consolidation.
	MaxMoves     int
	MoveCooldown time.Duration
	// GangPartialHold bounds how long a gang runs in part while the plan
	// expects Nomad to place the rest (default DefaultGangPartialHold):
	// past it, the gang is suspended whole (gangs.go).
	GangPartialHold time.Duration
	// MaxRecordBytes bounds a suspension record (default
	// state.DefaultMaxRecordBytes, Consul's default kv_max_value_size):
	// a job whose record would be larger is never suspended.
	MaxRecordBytes int
	// PolicyName names the placement policy for idle capacity
	// (placement.Names; empty: first fit). It is built each cycle; its
	// expected task mix is a recent snapshot's (taskmix.go).
	PolicyName string
	// Registry receives the metrics (nil: a new registry).
	Registry *prometheus.Registry
	// SessionTTL and LockDelay tune the leader lock.
	SessionTTL, LockDelay time.Duration
	// ResyncInterval is how often the view the event stream keeps is
	// checked against a full listing of Nomad (default
	// nomadwatch.DefaultResyncInterval); what the check corrects is
	// counted in gpushare_view_resync_corrections_total.
	ResyncInterval time.Duration
	// EventHook, when set, sees every batch of Nomad events before the
	// view applies it; false drops the batch. A test hook (events lost
	// without a break in the stream); nil in production.
	EventHook func(*nomadapi.Events) bool
	// Usage: reading what the GPU nodes' device plugins report as used
	// (utilization.go).
	Usage UsageConfig
	// PublishRanks: while leading, write the placement ranks as Nomad
	// dynamic node metadata (package ranking, ranks.go).
	PublishRanks bool
	// Demand: publishing each node's demand for its idle GPUs (demand.go).
	Demand DemandConfig
	// RecordKeys sign the suspension records and prove the service's
	// version tags (package recordkey). Nil: the Nomad Variable
	// DefaultRecordKeyPath in namespace "default", created with a new
	// key when absent.
	RecordKeys recordkey.Source
}

// DefaultRecordKeyPath is the Nomad Variable that holds the record keys
// unless Config.RecordKeys says otherwise.
const DefaultRecordKeyPath = "gpushare/record-key"

// Service is the control loop.
type Service struct {
	cfg     Config
	log     hclog.Logger
	watcher *quota.Watcher
	builder *nomadwatch.Builder
	store   *state.Store
	act     *actuator.Actuator
	metrics *metrics
	// metricDepartments are the departments with gauges set (cycle only).
	metricDepartments map[string]bool
	reg               *prometheus.Registry

	// cycleMu serializes cycles: the leader's and the standby's.
	cycleMu sync.Mutex
	// taskMix is the placement policy's task mix, and lastPlan the last
	// plan made (cycle only).
	taskMix  taskMix
	lastPlan lastPlan

	// reported are the record errors last logged (key to reason), and
	// reportWritten says this instance wrote them to Consul since it
	// started (a new leader rewrites them once).
	reported      map[string]string
	reportWritten bool

	// layoutMu lets one Status call at a time lay out nodesOf.
	layoutMu sync.Mutex

	mu     sync.Mutex
	status Status
	// nodesOf is the snapshot the last cycle's GPU map (Status.Nodes)
	// and nodes out of planning (Status.OutOfPlanning) are laid out from,
	// on the first Status call after the cycle (nil once laid out): about
	// 50 ms at 5,000 nodes, which a cycle need not pay while nobody reads
	// the status.
	nodesOf    *cluster.Snapshot
	written    map[string]state.ProjectStatus
	reclaimFor map[string]time.Time
	isLeader   bool

	// surplus is time-aware fair share's state (surplus.go); only cycles
	// touch it.
	surplus surplusState

	// partialSince is, by job Key, when each gang that runs in part was
	// first seen so (gangs.go); only cycles touch it (cycleMu).
	partialSince map[string]time.Time
	// gangsRunning are the gangs of the last cycle's allocations
	// (runningGangsOf); only cycles touch it (cycleMu).
	gangsRunning *runningGangs
	// planLogged is the plan logPlanChange last logged, and heldBack
	// the actions held back cycle after cycle (noteHeldBack); only cycles
	// touch them (cycleMu).
	planLogged loggedPlan
	heldBack   map[string]heldBack

	util utilizationState

	// ranks is nil without Config.PublishRanks.
	ranks *ranks
	// demand is nil without Config.Demand.Publish.
	demand *demand

	// nomadChanged is Follow's signal; nomadWake wakes the leader.
	nomadChanged func()
	nomadWake    <-chan struct{}
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
		{&c.CycleGap, DefaultCycleGap},
		{&c.MaxStaleness, actuator.DefaultMaxStaleness},
		{&c.GangPartialHold, DefaultGangPartialHold},
		{&c.MoveCooldown, DefaultMoveCooldown},
	} {
		if *d.field <= 0 {
			*d.field = d.def
		}
	}
	if c.FairShareUsageWeight <= 0 {
		c.FairShareUsageWeight = 1
	}
	return c
}

// New builds a service.
func New(cfg Config) *Service {
	cfg = cfg.withDefaults()
	store := state.New(cfg.Consul, cfg.Layout)
	store.MaxRecordBytes = cfg.MaxRecordBytes
	store.Keys = cfg.RecordKeys
	if store.Keys == nil {
		store.Keys = &recordkey.Variable{Client: cfg.Nomad, Namespace: "default", Path: DefaultRecordKeyPath}
	}
	act := actuator.New(cfg.Nomad, store, cfg.Log, cfg.Instance, actuator.Options{
		MaxStaleness: cfg.MaxStaleness, ResumeHold: cfg.ResumeHold, SuspendHold: cfg.SuspendHold,
		Guard: func(ctx context.Context) error {
			return leader.Held(ctx, cfg.Consul, cfg.Layout.Leader(), cfg.Instance)
		},
	})
	s := &Service{
		cfg: cfg, log: cfg.Log, store: store, act: act, reg: cfg.Registry,
		watcher:    quota.NewWatcher(cfg.Consul, cfg.Layout, cfg.Log),
		metrics:    newMetrics(cfg.Registry),
		written:    map[string]state.ProjectStatus{},
		reclaimFor: map[string]time.Time{}, partialSince: map[string]time.Time{},
		status: Status{Instance: cfg.Instance},
	}
	if cfg.FairShareHalfLife > 0 {
		s.surplus.tracker, _ = surplususe.New(cfg.FairShareHalfLife, cfg.FairShareUsageWeight) // both checked above
	}
	s.nomadChanged, s.nomadWake = nomadwatch.Queue()
	s.builder = nomadwatch.NewBuilder(cfg.Nomad, cfg.Log, nomadwatch.Options{
		ResyncInterval: cfg.ResyncInterval, EventHook: cfg.EventHook, OnRelist: s.noteRelist, MoveCooldown: cfg.MoveCooldown})
	s.initUtilization()
	if cfg.PublishRanks {
		s.ranks = newRanks(s)
	}
	if cfg.Demand.Publish {
		s.demand = newDemand(s)
	}
	return s
}

// Registry is where the metrics live.
func (s *Service) Registry() *prometheus.Registry { return s.reg }

// Run runs until ctx ends: the quota watcher, Nomad's event stream (the
// view of Nomad, kept by standby and leader alike), the history follower
// (the status's recent actions), the leader election, and the cycles
// (acting only while leader). A standby instance cycles every
// PlanInterval without acting, so that its /v1/status shows the same
// read-only view as the leader's and its health says whether it can read
// Nomad and Consul.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(6)
	go func() { defer wg.Done(); s.watcher.Run(ctx) }()
	go func() { defer wg.Done(); s.builder.Follow(ctx, s.nomadChanged) }()
	go func() { defer wg.Done(); s.followHistory(ctx) }()
	go func() { defer wg.Done(); s.runUtilization(ctx) }()
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
// quota change (paced: cyclePace.next), then again every FollowUpPeriod for
// FollowUpWindow: Nomad publishes a job's registration before its
// evaluation reports queued work, and a burst of short follow-ups sees
// that work within a second instead of at the next PlanInterval. A cycle
// that held an action back (a hold that expires) is retried after
// FollowUpPeriod too.
func (s *Service) lead(ctx context.Context) {
	s.setLeader(true)
	defer s.setLeader(false)
	// Leadership ends when ctx does (lock lost), not when the cycle in
	// flight returns.
	defer context.AfterFunc(ctx, func() { s.setLeader(false) })()
	s.ranksForget()
	s.startDemand()
	beats := make(chan struct{})
	go func() { defer close(beats); s.leadDemand(ctx) }()
	defer func() { <-beats }()
	ranked := make(chan struct{})
	go func() { defer close(ranked); s.leadRanks(ctx) }()
	defer func() { <-ranked }()
	tick := time.NewTicker(s.cfg.PlanInterval)
	defer tick.Stop()
	follow := time.NewTimer(s.cfg.FollowUpPeriod)
	defer follow.Stop()
	var followUntil time.Time
	var pace cyclePace
	held := s.pacedCycle(ctx, &pace)
	for {
		trigger := ""
		select {
		case <-ctx.Done():
			return
		case <-s.nomadWake:
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
		wait := time.NewTimer(time.Until(pace.next(time.Now(), s.cfg.CycleGap)))
		select {
		case <-ctx.Done():
			wait.Stop()
			return
		case <-wait.C:
		}
		s.log.Trace("cycle", "trigger", trigger)
		s.metrics.Triggers.WithLabelValues(trigger).Inc()
		held = s.pacedCycle(ctx, &pace)
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

func (s *Service) leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.isLeader
}
