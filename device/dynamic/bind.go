package dynamic

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/nodesched"
	"github.com/gpushare/nomad-gpushare/vocab"
)

// reserveReadTimeout bounds Reserve's read of the node's allocations.
const reserveReadTimeout = 3 * time.Second

// ShareBinding is a share binding as the node-level scheduler completes
// it: the GPU the task's instances name (Home), the GPU it runs on (GPU;
// a guest's differs), and its request and limit in units.
type ShareBinding struct {
	Home, GPU      string
	Request, Limit int
	Guest          bool
}

// BindShare completes Reserve's binding of share instances of GPU home:
// it finds the task the shares are for (Reserve is given only instance
// IDs) to read its limit, and places it (package nodesched). When no
// allocation of the node is found holding exactly these shares, the task
// is bound as a static share (limit = request) on its home GPU. ctx bounds
// the read of the node's allocations.
func (t *Tenancy) BindShare(ctx context.Context, home string, shareIDs []string) (ShareBinding, error) {
	units := shareUnits(shareIDs)
	sb := ShareBinding{Home: home, GPU: home, Request: units, Limit: units}
	tn, ok := t.findShareTenant(ctx, home, shareIDs)
	if !ok {
		t.logger.Warn("no allocation of this node is listed holding these shares; bound as a static share (limit = request) on its home GPU",
			"gpu", home, "shares", units)
		return sb, nil
	}
	lim, err := checkLimit(tn)
	if err != nil {
		return sb, err
	}
	sb.Limit = lim
	gpus := t.node.GPUs()
	t.mu.Lock()
	defer t.mu.Unlock()
	pl := nodesched.Placement{GPU: sb.Home, Why: "spread is off"}
	if t.cfg.Spread {
		pl = nodesched.Place(nodesched.Ask{Home: sb.Home, Burstable: lim > sb.Request}, t.schedGPUsLocked(gpus, tn.Key()))
	}
	t.hosted[tn.Key()] = hosting{home: sb.Home, host: pl.GPU, guest: pl.Guest, at: time.Now()}
	sb.GPU, sb.Guest = pl.GPU, pl.Guest
	t.logger.Info("share tenant bound", "alloc_id", tn.AllocID, "namespace", tn.Namespace, "job", tn.Job, "task", tn.Task,
		"request", sb.Request, "limit", sb.Limit, "home", sb.Home, "gpu", sb.GPU, "guest", sb.Guest, "why", pl.Why)
	return sb, nil
}

// findShareTenant reads the node's allocations now (the one being started
// may be newer than the loop's last read) and returns the task holding
// exactly the shares: the one not being stopped, else the newest.
func (t *Tenancy) findShareTenant(ctx context.Context, home string, shareIDs []string) (alloctrack.Tenant, bool) {
	_, tr, nodeID := t.settings()
	if tr != nil && nodeID != "" {
		rctx, cancel := context.WithTimeout(ctx, reserveReadTimeout)
		ts, err := tr.ReadTenants(rctx, nodeID)
		cancel()
		if err != nil {
			t.logger.Warn("Reserve could not read the node's allocations; using the last read", "error", err)
		} else {
			t.merge(ts)
		}
	}
	return t.findShare(home, shareIDs)
}

// findShare returns the known tenant holding exactly these shares of GPU
// home.
func (t *Tenancy) findShare(home string, shareIDs []string) (alloctrack.Tenant, bool) {
	want := slices.Sorted(slices.Values(shareIDs))
	t.mu.Lock()
	defer t.mu.Unlock()
	var best alloctrack.Tenant
	found := false
	for _, tn := range t.tenants {
		if tn.ShareGPU != home || !slices.Equal(tn.ShareIDs, want) {
			continue
		}
		if !found || best.Stopping && !tn.Stopping || best.Stopping == tn.Stopping && tn.CreateIndex > best.CreateIndex {
			best, found = tn, true
		}
	}
	return best, found
}

// shareUnits is what share instance IDs stand for, in units.
func shareUnits(shareIDs []string) int {
	n := 0
	for _, raw := range shareIDs {
		if id, err := vocab.Parse(raw); err == nil {
			n += id.Units
		}
	}
	return n
}

// checkLimit returns a share task's limit in shares, or an error that
// names the meta key and the fix.
func checkLimit(tn alloctrack.Tenant) (int, error) {
	req := tn.Shares()
	if tn.Limit == "" {
		return req, nil
	}
	where := fmt.Sprintf("gpushare: task %q of job %q (namespace %q): %s meta", tn.Task, tn.Job, tn.Namespace, tn.LimitFrom)
	lim, err := vocab.ParseLimit(tn.Limit)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", where, err)
	}
	if lim < req {
		return 0, fmt.Errorf(`%s %s = %q is below the task's request of %s GPU (count = %d of nvidia/gpu-share): set it to at least %q, or remove it (the limit is then the request)`,
			where, vocab.LimitMetaKey, tn.Limit, fraction(req), len(tn.ShareIDs), fraction(req))
	}
	return lim, nil
}

// fraction writes shares as a fraction of a GPU ("0.25").
func fraction(shares int) string {
	return fmt.Sprintf("%d.%02d", shares/vocab.UnitsPerGPU, shares%vocab.UnitsPerGPU)
}

// ClearForWhole makes sure a whole binding's task gets its GPUs to itself:
// the guests running there are moved (their allocations stopped), and the
// binding waits until no process of any allocation is left on the GPUs.
// ctx is the plugin's lifetime.
func (t *Tenancy) ClearForWhole(ctx context.Context, uuids []string) error {
	cfg, tr, _ := t.settings()
	now := time.Now()
	t.mu.Lock()
	var moves []guestMove
	for _, tn := range t.guestsOnLocked(uuids) {
		if at, ok := t.moving[tn.Key()]; ok && now.Sub(at) < moveRetry {
			continue
		}
		t.moving[tn.Key()] = now
		moves = append(moves, guestMove{tn: tn, host: t.hostLocked(tn), why: "host GPU bound whole by Nomad"})
	}
	t.mu.Unlock()
	if tr != nil && len(moves) > 0 {
		t.moveGuests(ctx, tr, moves)
	}
	return t.waitGPUsClear(ctx, uuids, cfg.GuestMoveTimeout)
}

// waitGPUsClear waits until no process of any allocation runs on the GPUs
// (guests being moved, a previous holder still exiting). Half-way through
// the bound the processes left are killed; at the bound the binding fails,
// and the Nomad client retries the task under its restart policy.
func (t *Tenancy) waitGPUsClear(ctx context.Context, uuids []string, bound time.Duration) error {
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	killed := false
	for {
		busy := t.allocationProcessesOn(uuids)
		waited := time.Since(start)
		if len(busy) == 0 {
			if waited > 100*time.Millisecond {
				t.logger.Info("whole GPU clear of other tenants' processes", "gpus", uuids, "waited", waited.Round(time.Millisecond))
			}
			return nil
		}
		if waited >= bound {
			return fmt.Errorf("gpushare: refusing whole GPU %s: processes of other allocations are still on it after %s (%s); the task is retried under its restart policy",
				strings.Join(uuids, ", "), bound, describe(busy))
		}
		if !killed && waited >= bound/2 {
			t.logger.Warn("killing the processes left on a GPU bound whole", "gpus", uuids, "processes", describe(busy))
			for _, sp := range busy {
				if err := t.resolver.Kill(sp.id); err != nil {
					t.logger.Error("kill failed", "pid", sp.id.PID, "error", err)
				}
			}
			killed = true
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gpushare: plugin shutting down while GPU %s was being cleared", strings.Join(uuids, ", "))
		case <-tick.C:
		}
	}
}

// allocationProcessesOn lists the processes of Nomad allocations on the
// GPUs, read from NVML now.
func (t *Tenancy) allocationProcessesOn(uuids []string) []seenProcess {
	procs, _, err := t.node.Processes(map[string]uint64{})
	if err != nil {
		t.logger.Warn("reading GPU processes", "error", err)
		return nil
	}
	var out []seenProcess
	for _, u := range uuids {
		for _, pr := range procs[u] {
			id, err := t.resolver.Resolve(pr.PID)
			if err == nil && id.Owner.Known() {
				out = append(out, seenProcess{gpu: u, proc: pr, id: id})
			}
		}
	}
	return out
}

func describe(sps []seenProcess) string {
	parts := make([]string, 0, len(sps))
	for _, sp := range sps {
		parts = append(parts, fmt.Sprintf("pid %d of allocation %s task %s, %d MiB", sp.id.PID, sp.id.Owner.AllocID, sp.id.Owner.Task, sp.proc.UsedMiB))
	}
	return strings.Join(parts, "; ")
}

// GuestsByHost counts the guests each GPU hosts, for the partition: a
// switch of a GPU completes only once its guests are gone (a guest being
// stopped is gone once the monitor sees no process of it there).
func (t *Tenancy) GuestsByHost() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := map[string]int{}
	for k, tn := range t.tenants {
		if tn.ShareGPU == "" {
			continue
		}
		if h := t.hostLocked(tn); h != tn.ShareGPU && (!tn.Stopping || t.present[chargeKey{k, h}]) {
			n[h]++
		}
	}
	return n
}
