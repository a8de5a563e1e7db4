package dynamic

import (
	"context"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/nodesched"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

// moveRetry is how long a move waits before its allocation stop is asked
// for again (the guest still runs on its host).
const moveRetry = 10 * time.Second

// schedGPUsLocked describes the GPUs for package nodesched, leaving the
// tenant named skip out of the counts. t.mu must be held.
func (t *Tenancy) schedGPUsLocked(gpus []GPU, skip string) []nodesched.GPU {
	occ := t.occupantsLocked(skip)
	out := make([]nodesched.GPU, 0, len(gpus))
	for _, g := range gpus {
		out = append(out, nodesched.GPU{UUID: g.UUID, Order: g.Index, Model: g.Model, MemoryMiB: g.MemoryMiB,
			OfferedWhole: g.Healthy && g.OfferedWhole, Leaving: !g.Healthy || t.leaving[g.UUID],
			BoundWhole: t.node.HeldWhole(g.UUID), Tenants: occ[g.UUID]})
	}
	return out
}

// guestMove is a guest to send back.
type guestMove struct {
	tn   alloctrack.Tenant
	host string
	why  string
}

// planMovesLocked lists the guests that must move (package nodesched)
// and whose allocation stop was not asked for within moveRetry, and marks
// them moving. t.mu must be held.
func (t *Tenancy) planMovesLocked(gpus []GPU, now time.Time) []guestMove {
	var guests []nodesched.Guest
	for k, tn := range t.tenants {
		if tn.ShareGPU == "" || tn.Stopping {
			continue
		}
		if h := t.hostLocked(tn); h != tn.ShareGPU {
			guests = append(guests, nodesched.Guest{Key: k, Home: tn.ShareGPU, Host: h})
		}
	}
	var out []guestMove
	for _, m := range nodesched.Moves(guests, t.schedGPUsLocked(gpus, "")) {
		if at, ok := t.moving[m.Key]; ok && now.Sub(at) < moveRetry {
			continue
		}
		t.moving[m.Key] = now
		out = append(out, guestMove{tn: t.tenants[m.Key], host: m.Host, why: m.Why})
	}
	return out
}

// moveGuests asks Nomad to stop each guest's allocation, so that Nomad
// places a replacement, whose Reserve then binds it at home (its host is
// no longer free). The guest's processes end when the Nomad client stops
// its task.
func (t *Tenancy) moveGuests(ctx context.Context, tr *alloctrack.Tracker, moves []guestMove) {
	for _, m := range moves {
		rec := nodeusage.Move{At: time.Now(), AllocID: m.tn.AllocID, Namespace: m.tn.Namespace, Job: m.tn.Job, Task: m.tn.Task,
			Host: m.host, Home: m.tn.ShareGPU, Why: m.why}
		args := []any{"alloc_id", m.tn.AllocID, "namespace", m.tn.Namespace, "job", m.tn.Job, "task", m.tn.Task, "host", m.host, "home", m.tn.ShareGPU, "why", m.why}
		if err := tr.StopAllocation(ctx, m.tn.Namespace, m.tn.AllocID); err != nil {
			rec.Error = err.Error()
			t.logger.Error("moving a guest: stopping its allocation failed (the plugin's token needs alloc-lifecycle in its namespace); retrying", append(args, "error", err)...)
		} else {
			t.logger.Info("moving a guest back: its allocation is stopped and Nomad places a replacement", args...)
		}
		t.noteMove(rec)
	}
}
