package dynamic

import (
	"maps"
	"slices"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/tenants"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

// seenProcess is one GPU process of a monitor cycle and who it is.
type seenProcess struct {
	gpu  string
	proc gpu.Process
	id   tenants.Identity
}

// cycleView is one monitor cycle's accounting: on every GPU, the tenants
// physically there with what they use, and what processes of no tenant
// use; and those processes.
type cycleView struct {
	at      time.Time
	gpus    []*gpuAccount // in index order
	byUUID  map[string]*gpuAccount
	outside []nodeusage.Process
}

// gpuAccount is one GPU's accounting.
type gpuAccount struct {
	uuid     string
	index    int
	totalMiB uint64
	tenants  []*tenantAccount
	// otherMiB and otherSM: processes of no tenant of this GPU.
	otherMiB uint64
	otherSM  uint32
	shortMiB uint64
}

// tenantAccount is one tenant's use of one GPU.
type tenantAccount struct {
	tn    alloctrack.Tenant
	gpu   string
	guest bool
	// request and limit in shares of a GPU, and in MiB of this one.
	request, limit       int
	requestMiB, limitMiB uint64
	usedMiB              uint64
	sm                   uint32
	procs                []tenants.Identity
}

// accountLocked charges the processes of a cycle to the tenants. t.mu must
// be held.
func (t *Tenancy) accountLocked(gpus []GPU, seen []seenProcess, now time.Time) *cycleView {
	v := &cycleView{at: now, byUUID: make(map[string]*gpuAccount, len(gpus))}
	for _, g := range gpus {
		a := &gpuAccount{uuid: g.UUID, index: g.Index, totalMiB: g.MemoryMiB}
		v.gpus = append(v.gpus, a)
		v.byUUID[g.UUID] = a
	}
	live := t.dropKilledLocked(seen, now)
	t.adoptHostsLocked(live)
	owned := t.openAccountsLocked(v)
	t.present = map[chargeKey]bool{}
	for _, sp := range live {
		ck := chargeKey{sp.id.Owner.AllocID + "/" + sp.id.Owner.Task, sp.gpu}
		if ta := owned[ck]; ta != nil {
			t.present[ck] = true
			ta.usedMiB += sp.proc.UsedMiB
			ta.sm = min(ta.sm+sp.proc.SMPct, 100)
			ta.procs = append(ta.procs, sp.id)
			continue
		}
		v.addOutside(sp, t.whyOutsideLocked(sp))
	}
	return v
}

// chargeKey is a tenant on one GPU.
type chargeKey struct{ tenant, gpu string }

// dropKilledLocked leaves out the processes killed within killedGrace:
// their memory counts as freed. t.mu must be held.
func (t *Tenancy) dropKilledLocked(seen []seenProcess, now time.Time) []seenProcess {
	live := make([]seenProcess, 0, len(seen))
	for _, sp := range seen {
		if !t.recentlyKilledLocked(sp.id, now) {
			live = append(live, sp)
		}
	}
	return live
}

// adoptHostsLocked finds the share tenants with no placement that run
// away from their home (after a plugin restart, Reserve's placements are
// gone): all their processes on one other GPU make it their host. t.mu
// must be held.
func (t *Tenancy) adoptHostsLocked(seen []seenProcess) {
	on := map[string]map[string]bool{} // tenant key -> GPUs of its processes
	for _, sp := range seen {
		k := sp.id.Owner.AllocID + "/" + sp.id.Owner.Task
		if on[k] == nil {
			on[k] = map[string]bool{}
		}
		on[k][sp.gpu] = true
	}
	for k, tn := range t.tenants {
		if _, ok := t.hosted[k]; ok || tn.ShareGPU == "" || len(on[k]) != 1 {
			continue
		}
		for g := range on[k] {
			if g == tn.ShareGPU {
				delete(t.observedHost, k)
			} else {
				t.observedHost[k] = g
			}
		}
	}
}

// openAccountsLocked opens an account for every tenant on each GPU it
// physically uses, and returns them by tenant and GPU. t.mu must be held.
func (t *Tenancy) openAccountsLocked(v *cycleView) map[chargeKey]*tenantAccount {
	owned := map[chargeKey]*tenantAccount{}
	for _, k := range slices.Sorted(maps.Keys(t.tenants)) {
		tn := t.tenants[k]
		req, lim := vocab.UnitsPerGPU, vocab.UnitsPerGPU
		if len(tn.Whole) == 0 {
			req = tn.Shares()
			lim = limitShares(tn)
		}
		for _, g := range t.gpusOfLocked(tn) {
			ga := v.byUUID[g]
			if ga == nil {
				continue
			}
			ta := &tenantAccount{tn: tn, gpu: g, guest: len(tn.Whole) == 0 && g != tn.ShareGPU, request: req, limit: lim,
				requestMiB: ga.totalMiB * uint64(req) / vocab.UnitsPerGPU, limitMiB: ga.totalMiB * uint64(lim) / vocab.UnitsPerGPU}
			ga.tenants = append(ga.tenants, ta)
			owned[chargeKey{k, g}] = ta
		}
	}
	return owned
}

// limitShares is a share tenant's limit in shares: its gpushare_limit, or
// its request when unset or not valid (Reserve refuses a task whose limit
// is not valid; one bound before still runs).
func limitShares(tn alloctrack.Tenant) int {
	if tn.Limit == "" {
		return tn.Shares()
	}
	lim, err := vocab.ParseLimit(tn.Limit)
	if err != nil || lim < tn.Shares() {
		return tn.Shares()
	}
	return lim
}

// whyOutsideLocked says why a process is charged to no tenant of its GPU.
// t.mu must be held.
func (t *Tenancy) whyOutsideLocked(sp seenProcess) string {
	o := sp.id.Owner
	if !o.Known() {
		return "belongs to no Nomad allocation"
	}
	if tn, ok := t.tenants[o.AllocID+"/"+o.Task]; ok {
		return "its task holds no gpushare device on this GPU (it was given " + firstOf(t.gpusOfLocked(tn)) + ")"
	}
	return "its task holds no gpushare device, or Nomad does not list its allocation on this node (yet)"
}

func firstOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// addOutside records a process of no tenant of its GPU.
func (v *cycleView) addOutside(sp seenProcess, why string) {
	if ga := v.byUUID[sp.gpu]; ga != nil {
		ga.otherMiB += sp.proc.UsedMiB
		ga.otherSM = min(ga.otherSM+sp.proc.SMPct, 100)
	}
	v.outside = append(v.outside, nodeusage.Process{PID: sp.id.PID, GPU: sp.gpu, UsedMiB: sp.proc.UsedMiB, SMPct: sp.proc.SMPct,
		Command: sp.id.Comm, AllocID: sp.id.Owner.AllocID, Task: sp.id.Owner.Task, Why: why})
}
