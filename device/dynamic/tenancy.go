// Package dynamic is the plugin's dynamic fractions: the node-level half
// of GPU sharing (docs/design.md, "Dynamic fractions and the node-level
// scheduler"). A share task asks Nomad for a request and may use up to a
// limit while nobody else needs the memory. The package knows the node's
// tenants (the tasks holding gpushare devices, as package alloctrack reads
// them), where each physically runs, and what its processes use:
//
//   - at Reserve it completes a share binding with the task's limit and
//     places it (package nodesched: at home, or as a guest on an idle
//     whole GPU), and clears a GPU bound whole of other tenants
//     (BindShare, ClearForWhole; bind.go);
//   - every monitor_period it charges each GPU process to its tenant
//     (package tenants finds the owner; account.go), applies the
//     borrowing rule (package borrow) and kills what it asks for
//     (enforce.go), sends back the guests that must move (moves.go), and
//     publishes the usage report (Monitor, Cycle; monitor.go);
//   - it serves the report (package vocab/nodeusage) and Prometheus
//     metrics on usage_listen (usageapi.go).
//
// The plugin hosts it: it reads the hardware and the plugin's state
// through Node, takes validated Settings and the plugin's Nomad tracker
// (Configure), and is told each Nomad read (Update) and each publication
// (SetLeaving); the partition asks which GPUs host guests (GuestsByHost).
package dynamic

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/tenants"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
	hclog "github.com/hashicorp/go-hclog"
)

// Memory enforcement modes (memory_enforcement).
const (
	EnforceKill   = "kill"
	EnforceReport = "report"
)

// Settings are the validated settings of dynamic fractions (the plugin's
// config block, which names and checks them).
type Settings struct {
	// MonitorPeriod is how often a monitor cycle runs.
	MonitorPeriod time.Duration
	// MemoryEnforcement is EnforceKill or EnforceReport.
	MemoryEnforcement string
	// Headroom is reclaim_headroom, a fraction of a GPU's memory.
	Headroom float64
	// Spread: burstable share tenants may run as guests on idle whole GPUs.
	Spread bool
	// GuestMoveTimeout bounds how long a whole binding waits for its GPUs
	// to be clear.
	GuestMoveTimeout time.Duration
	// UsageListen is the address of the usage endpoint ("": off).
	UsageListen string
}

// Node is what the subsystem reads of the plugin that hosts it.
type Node interface {
	// GPUs describes the node's GPUs as the hardware last showed them, in
	// index order.
	GPUs() []GPU
	// HeldWhole reports whether a GPU is held whole: by an allocation the
	// Nomad API listed, or by a whole binding Reserve granted since.
	HeldWhole(uuid string) bool
	// Processes lists every GPU's compute processes (see
	// gpu.Source.Processes).
	Processes(lastSample map[string]uint64) (map[string][]gpu.Process, map[string]error, error)
}

// GPU is one GPU of the node.
type GPU struct {
	UUID      string
	Index     int
	Model     string
	MemoryMiB uint64
	Healthy   bool
	// OfferedWhole: an instance of it is published healthy in the whole
	// family.
	OfferedWhole bool
}

// recentMax bounds the kills and moves a report lists.
const recentMax = 100

// killedGrace is how long a killed process's memory counts as freed while
// NVML still lists it (the driver frees it as the process is torn down).
const killedGrace = 10 * time.Second

// Tenancy is what the node-level scheduler and the monitor know of the
// GPU tenants, and what they do: the tenants Nomad lists on this node,
// where each runs (the placements Reserve made, and guests found running
// away from home after a plugin restart), the guests being moved, the
// processes killed, and the last report. Create it with New. mu guards
// every field below it but report.
type Tenancy struct {
	logger hclog.Logger
	node   Node
	api    usageAPI

	mu  sync.Mutex
	cfg Settings
	// tracker reads Nomad for Reserve (the plugin loop's tracker; its
	// ReadTenants and StopAllocation are safe to call beside the loop).
	tracker *alloctrack.Tracker
	nodeID  string
	// tenants are the last read's, by key (Reserve's fresh reads merged).
	tenants map[string]alloctrack.Tenant
	// hosted are where Reserve put share tenants, by key.
	hosted map[string]hosting
	// observedHost: share tenants with no placement that run away from
	// their home (found by the monitor after a restart), by key.
	observedHost map[string]string
	// moving: guests whose allocation stop was asked for, by key.
	moving map[string]time.Time
	// killed: processes killed within killedGrace.
	killed map[procKey]time.Time
	// present: the tenants with processes on a GPU in the last cycle.
	present map[chargeKey]bool
	// leaving: GPUs the partition is taking out of the whole family, from
	// the last publication (SetLeaving).
	leaving map[string]bool
	// violating: tenants the borrowing rule flagged in the last cycle (a
	// new flag is logged at warning level, repeats at debug).
	violating map[string]bool
	kills     []nodeusage.Kill
	moves     []nodeusage.Move
	killCount map[killLabels]int
	moveCount int
	// resolver finds processes' owners (cached across cycles).
	resolver *tenants.Resolver
	// lastSample is NVML's utilization sample cursor, per GPU (monitor
	// goroutine only).
	lastSample map[string]uint64

	report atomic.Pointer[nodeusage.Report]
}

// New returns the tenancy of a node, unconfigured; logger gets its
// messages.
func New(logger hclog.Logger, node Node) *Tenancy {
	t := &Tenancy{logger: logger, node: node,
		tenants: map[string]alloctrack.Tenant{}, hosted: map[string]hosting{}, observedHost: map[string]string{},
		moving: map[string]time.Time{}, killed: map[procKey]time.Time{}, violating: map[string]bool{}, killCount: map[killLabels]int{},
		resolver: tenants.NewResolver("/proc"), lastSample: map[string]uint64{}}
	t.api.init(t)
	return t
}

// hosting is where Reserve put a share tenant: its home GPU (the one its
// Nomad instances name), the GPU it runs on, whether that is another GPU
// (a guest) and when.
type hosting struct {
	home, host string
	guest      bool
	at         time.Time
}

// procKey names one process for good.
type procKey struct {
	pid   int
	start uint64
}

// killLabels are the labels of the kill counter.
type killLabels struct{ reason, namespace, job string }

// Configure takes a new configuration and the plugin's Nomad tracker, and
// (re)starts the usage endpoint on cfg.UsageListen; what is known of the
// tenants stays. ctx bounds the retries of a busy address (the plugin's
// lifetime).
func (t *Tenancy) Configure(ctx context.Context, cfg Settings, tr *alloctrack.Tracker) {
	t.serveUsage(ctx, cfg.UsageListen)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cfg, t.tracker = cfg, tr
}

// Stop stops the usage endpoint (the plugin is disabled or shut down).
func (t *Tenancy) Stop() { t.stopUsage() }

// Report returns the last monitor cycle's report (what the usage endpoint
// serves), nil before the first.
func (t *Tenancy) Report() *nodeusage.Report { return t.report.Load() }

// settings returns the configuration, the tracker and the node ID.
func (t *Tenancy) settings() (Settings, *alloctrack.Tracker, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg, t.tracker, t.nodeID
}

// Update takes a Nomad read that began at readStarted: its tenants replace
// the known ones, and the placements and moves of tenants it no longer
// lists (and that it was read after) are forgotten.
func (t *Tenancy) Update(nodeID string, ts []alloctrack.Tenant, readStarted time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nodeID = nodeID
	t.tenants = make(map[string]alloctrack.Tenant, len(ts))
	for _, tn := range ts {
		t.tenants[tn.Key()] = tn
	}
	for k, pl := range t.hosted {
		if _, ok := t.tenants[k]; !ok && pl.at.Before(readStarted) {
			delete(t.hosted, k)
		}
	}
	for k, at := range t.moving {
		if _, ok := t.tenants[k]; !ok && at.Before(readStarted) {
			delete(t.moving, k)
		}
	}
	for k := range t.observedHost {
		if _, ok := t.tenants[k]; !ok {
			delete(t.observedHost, k)
		}
	}
}

// merge adds the tenants of a fresh read (Reserve's) to the known ones.
func (t *Tenancy) merge(ts []alloctrack.Tenant) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tn := range ts {
		t.tenants[tn.Key()] = tn
	}
}

// hostLocked is the GPU a share tenant runs on: where Reserve placed it,
// else where it was found running, else its home. t.mu must be held.
func (t *Tenancy) hostLocked(tn alloctrack.Tenant) string {
	if pl, ok := t.hosted[tn.Key()]; ok {
		return pl.host
	}
	if h, ok := t.observedHost[tn.Key()]; ok {
		return h
	}
	return tn.ShareGPU
}

// gpusOfLocked are the GPUs a tenant physically uses. t.mu must be held.
func (t *Tenancy) gpusOfLocked(tn alloctrack.Tenant) []string {
	if len(tn.Whole) > 0 {
		return tn.Whole
	}
	return []string{t.hostLocked(tn)}
}

// occupantsLocked counts the tenants physically on each GPU, leaving out
// the tenant named skip. t.mu must be held.
func (t *Tenancy) occupantsLocked(skip string) map[string]int {
	n := map[string]int{}
	for k, tn := range t.tenants {
		if k == skip {
			continue
		}
		for _, g := range t.gpusOfLocked(tn) {
			n[g]++
		}
	}
	return n
}

// guestsOnLocked lists the tenants running as guests on the given GPUs.
// t.mu must be held.
func (t *Tenancy) guestsOnLocked(gpus []string) []alloctrack.Tenant {
	var out []alloctrack.Tenant
	for _, k := range slices.Sorted(maps.Keys(t.tenants)) {
		tn := t.tenants[k]
		if tn.ShareGPU == "" {
			continue
		}
		if h := t.hostLocked(tn); h != tn.ShareGPU && slices.Contains(gpus, h) {
			out = append(out, tn)
		}
	}
	return out
}

// recentlyKilledLocked reports whether the process was killed within
// killedGrace of now, forgetting older kills. t.mu must be held.
func (t *Tenancy) recentlyKilledLocked(id tenants.Identity, now time.Time) bool {
	k := procKey{id.PID, id.StartTicks}
	at, ok := t.killed[k]
	if ok && now.Sub(at) > killedGrace {
		delete(t.killed, k)
		return false
	}
	return ok
}

// noteKillLocked records a kill for reports and metrics. Only an enforced
// kill frees the processes' memory in the accounts (killedGrace): with
// enforcement "report" they live on. t.mu must be held.
func (t *Tenancy) noteKillLocked(k nodeusage.Kill, ids []tenants.Identity) {
	t.kills = appendRecent(t.kills, k)
	if !k.Enforced {
		return
	}
	for _, id := range ids {
		t.killed[procKey{id.PID, id.StartTicks}] = k.At
	}
	t.killCount[killLabels{k.Reason, k.Namespace, k.Job}]++
}

// SetLeaving takes the GPUs the partition is taking out of the whole
// family (their guests must move), from each publication.
func (t *Tenancy) SetLeaving(leaving map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leaving = leaving
}

// noteMove records a move for reports and metrics.
func (t *Tenancy) noteMove(m nodeusage.Move) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.moves = appendRecent(t.moves, m)
	if m.Error == "" {
		t.moveCount++
	}
}

func appendRecent[T any](s []T, v T) []T {
	s = append(s, v)
	if len(s) > recentMax {
		s = slices.Delete(s, 0, len(s)-recentMax)
	}
	return s
}

// totalsLocked counts kills by reason and moves. t.mu must be held.
func (t *Tenancy) totalsLocked() nodeusage.Totals {
	tot := nodeusage.Totals{Kills: map[string]int{}, Moves: t.moveCount}
	for l, n := range t.killCount {
		tot.Kills[l.reason] += n
	}
	return tot
}
