package dynamic

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/device/tenants"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

// Monitor runs Cycle every monitor_period until ctx ends (the plugin's
// loop runs it).
func (t *Tenancy) Monitor(ctx context.Context) {
	cfg, _, _ := t.settings()
	every(ctx, cfg.MonitorPeriod, func() bool {
		t.Cycle(ctx)
		return true
	})
}

// every calls f every period until f returns false or ctx ends.
func every(ctx context.Context, period time.Duration, f func() bool) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !f() {
			return
		}
	}
}

// Cycle is one monitor cycle (docs/design.md, "Dynamic fractions and the
// node-level scheduler"): it reads every GPU's processes, charges them to
// tenants, applies the borrowing rule, moves the guests that must move (in
// the background, until ctx ends) and publishes the usage report.
func (t *Tenancy) Cycle(ctx context.Context) {
	start := time.Now()
	defer func() { t.api.observeCycle(time.Since(start)) }()
	cfg, tr, nodeID := t.settings()
	seen, errs := t.seeProcesses()
	gpus := t.node.GPUs()
	t.mu.Lock()
	v := t.accountLocked(gpus, seen, start)
	kills := append(t.decideLocked(v), t.overdueGuestsLocked(v)...)
	var moves []guestMove
	if tr != nil {
		moves = t.planMovesLocked(gpus, start)
	}
	rep := t.reportLocked(v, nodeID, cfg, errs)
	resolver := t.resolver
	t.mu.Unlock()
	t.carryOut(kills, resolver)
	if len(moves) > 0 {
		go t.moveGuests(ctx, tr, moves)
	}
	t.report.Store(rep)
}

// seeProcesses lists every GPU's processes and who each is; a process
// that ends meanwhile is left out. Errors are returned as report lines.
func (t *Tenancy) seeProcesses() ([]seenProcess, []string) {
	procs, gpuErrs, err := t.node.Processes(t.lastSample)
	if err != nil {
		return nil, []string{"reading GPU processes: " + err.Error()}
	}
	var errs []string
	for u, e := range gpuErrs {
		errs = append(errs, fmt.Sprintf("GPU %s: %v", u, e))
	}
	sort.Strings(errs)
	n := 0
	for _, ps := range procs {
		n += len(ps)
	}
	seen := make([]seenProcess, 0, n)
	keep := make(map[int]bool, n)
	for u, ps := range procs {
		for _, pr := range ps {
			id, err := t.resolver.Resolve(pr.PID)
			if errors.Is(err, tenants.ErrGone) {
				continue
			}
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			keep[pr.PID] = true
			seen = append(seen, seenProcess{gpu: u, proc: pr, id: id})
		}
	}
	t.resolver.Forget(keep)
	return seen, errs
}

// reportLocked builds the usage report of a cycle. t.mu must be held.
func (t *Tenancy) reportLocked(v *cycleView, nodeID string, cfg Settings, errs []string) *nodeusage.Report {
	r := &nodeusage.Report{NodeID: nodeID, At: v.at, Enforcement: cfg.MemoryEnforcement, Outside: v.outside, Errors: errs,
		Kills: append([]nodeusage.Kill(nil), t.kills...), Moves: append([]nodeusage.Move(nil), t.moves...),
		Totals: t.totalsLocked(), Period: cfg.MonitorPeriod}
	for _, ga := range v.gpus {
		g := nodeusage.GPU{UUID: ga.uuid, Index: ga.index, TotalMiB: ga.totalMiB, UsedMiB: ga.otherMiB, SMPct: ga.otherSM, ShortMiB: ga.shortMiB}
		for _, ta := range ga.tenants {
			g.UsedMiB += ta.usedMiB
			g.SMPct = min(g.SMPct+ta.sm, 100)
			if ta.guest {
				g.Guests = append(g.Guests, ta.tn.Key())
			}
			r.Tenants = append(r.Tenants, tenantReport(ta, ga))
		}
		r.GPUs = append(r.GPUs, g)
	}
	return r
}

// tenantReport is one tenant's line of the report.
func tenantReport(ta *tenantAccount, ga *gpuAccount) nodeusage.Tenant {
	tn := ta.tn
	home := tn.ShareGPU
	if len(tn.Whole) > 0 {
		home = ta.gpu
	}
	return nodeusage.Tenant{AllocID: tn.AllocID, Namespace: tn.Namespace, Job: tn.Job, Group: tn.Group, Task: tn.Task,
		Whole: len(tn.Whole) > 0, Home: home, GPU: ta.gpu, Guest: ta.guest,
		Request: float64(ta.request) / vocab.UnitsPerGPU, Limit: float64(ta.limit) / vocab.UnitsPerGPU,
		RequestMiB: ta.requestMiB, LimitMiB: ta.limitMiB, GPUMiB: ga.totalMiB, UsedMiB: ta.usedMiB, SMPct: ta.sm, PIDs: pids(ta.procs)}
}
