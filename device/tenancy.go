package device

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/partition"
	"github.com/gpushare/nomad-gpushare/device/tenants"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

// recentMax bounds the kills and moves a report lists.
const recentMax = 100

// killedGrace is how long a killed process's memory counts as freed while
// NVML still lists it (the driver frees it as the process is torn down).
const killedGrace = 10 * time.Second

// tenancy is what the node-level scheduler and the monitor know of the
// GPU tenants (docs/design.md, "Dynamic fractions and the node-level
// scheduler"): the tenants Nomad lists on this node, where each runs (the
// placements Reserve made, and guests found running away from home after a
// plugin restart), the guests being moved, the processes killed, and the
// last report. mu guards every field but report.
type tenancy struct {
	mu  sync.Mutex
	cfg dynamicSettings
	// tracker reads Nomad for Reserve (the loop's tracker; its ReadTenants
	// and StopAllocation are safe to call beside the loop).
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
	// leaving: GPUs the partition is taking out of the whole family
	// (partition.Publication.LeavingWhole), from the last publication.
	leaving map[string]bool
	// violating: tenants the reclaim rule flagged in the last cycle (a
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

// configure takes a new configuration; what is known of the tenants stays.
func (t *tenancy) configure(cfg dynamicSettings, tr *alloctrack.Tracker) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cfg, t.tracker = cfg, tr
	if t.tenants == nil {
		t.tenants, t.hosted, t.observedHost = map[string]alloctrack.Tenant{}, map[string]hosting{}, map[string]string{}
		t.moving, t.killed, t.violating, t.killCount = map[string]time.Time{}, map[procKey]time.Time{}, map[string]bool{}, map[killLabels]int{}
		t.resolver, t.lastSample = tenants.NewResolver("/proc"), map[string]uint64{}
	}
}

// settings returns the configuration and the tracker.
func (t *tenancy) settings() (dynamicSettings, *alloctrack.Tracker, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cfg, t.tracker, t.nodeID
}

// update takes a Nomad read that began at readStarted: its tenants replace
// the known ones, and the placements and moves of tenants it no longer
// lists (and that it was read after) are forgotten.
func (t *tenancy) update(nodeID string, ts []alloctrack.Tenant, readStarted time.Time) {
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
func (t *tenancy) merge(ts []alloctrack.Tenant) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tn := range ts {
		t.tenants[tn.Key()] = tn
	}
}

// hostLocked is the GPU a share tenant runs on: where Reserve placed it,
// else where it was found running, else its home. t.mu must be held.
func (t *tenancy) hostLocked(tn alloctrack.Tenant) string {
	if pl, ok := t.hosted[tn.Key()]; ok {
		return pl.host
	}
	if h, ok := t.observedHost[tn.Key()]; ok {
		return h
	}
	return tn.ShareGPU
}

// gpusOfLocked are the GPUs a tenant physically uses. t.mu must be held.
func (t *tenancy) gpusOfLocked(tn alloctrack.Tenant) []string {
	if len(tn.Whole) > 0 {
		return tn.Whole
	}
	return []string{t.hostLocked(tn)}
}

// occupantsLocked counts the tenants physically on each GPU, leaving out
// the tenant named skip. t.mu must be held.
func (t *tenancy) occupantsLocked(skip string) map[string]int {
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
func (t *tenancy) guestsOnLocked(gpus []string) []alloctrack.Tenant {
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
func (t *tenancy) recentlyKilledLocked(id tenants.Identity, now time.Time) bool {
	k := procKey{id.PID, id.StartTicks}
	at, ok := t.killed[k]
	if ok && now.Sub(at) > killedGrace {
		delete(t.killed, k)
		return false
	}
	return ok
}

// noteKill records a kill for reports and metrics. t.mu must be held.
func (t *tenancy) noteKillLocked(k nodeusage.Kill, ids []tenants.Identity) {
	for _, id := range ids {
		t.killed[procKey{id.PID, id.StartTicks}] = k.At
	}
	t.kills = appendRecent(t.kills, k)
	if k.Enforced {
		t.killCount[killLabels{k.Reason, k.Namespace, k.Job}]++
	}
}

// notePublications takes which GPUs the partition is taking out of the
// whole family.
func (t *tenancy) notePublications(pubs map[string]partition.Publication) {
	leaving := map[string]bool{}
	for u, pub := range pubs {
		if pub.LeavingWhole {
			leaving[u] = true
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leaving = leaving
}

// noteMove records a move for reports and metrics.
func (t *tenancy) noteMove(m nodeusage.Move) {
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
func (t *tenancy) totalsLocked() nodeusage.Totals {
	tot := nodeusage.Totals{Kills: map[string]int{}, Moves: t.moveCount}
	for l, n := range t.killCount {
		tot.Kills[l.reason] += n
	}
	return tot
}
