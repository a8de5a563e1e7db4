package dynamic

import (
	"fmt"
	"time"

	"github.com/gpushare/nomad-gpushare/device/borrow"
	"github.com/gpushare/nomad-gpushare/device/tenants"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

// plannedKill is a kill the borrowing rule asks for: the tenant's processes
// on one GPU.
type plannedKill struct {
	kill nodeusage.Kill
	ids  []tenants.Identity
	// first: the tenant was not flagged in the previous cycle.
	first bool
}

// decideLocked applies the borrowing rule (package borrow) to every GPU of
// the cycle, records what it asks for and returns the kills, to be carried
// out (enforcement "kill") or only reported ("report"). t.mu must be held.
func (t *Tenancy) decideLocked(v *cycleView) []plannedKill {
	var out []plannedKill
	flagged := map[string]bool{}
	enforced := t.cfg.MemoryEnforcement == EnforceKill
	for _, ga := range v.gpus {
		in := borrow.GPU{UUID: ga.uuid, TotalMiB: ga.totalMiB, OtherMiB: ga.otherMiB, HeadroomMiB: uint64(float64(ga.totalMiB) * t.cfg.Headroom)}
		byKey := map[string]*tenantAccount{}
		for _, ta := range ga.tenants {
			k := ta.tn.Key()
			byKey[k] = ta
			in.Tenants = append(in.Tenants, borrow.Tenant{Key: k, RequestMiB: ta.requestMiB, LimitMiB: ta.limitMiB, UsedMiB: ta.usedMiB, Since: ta.tn.Created})
		}
		d := borrow.Decide(in)
		ga.shortMiB = d.ShortMiB
		for _, k := range d.Kills {
			ta := byKey[k.Tenant.Key]
			if len(ta.procs) == 0 {
				continue
			}
			pk := plannedKill{ids: ta.procs, first: !t.violating[k.Tenant.Key], kill: nodeusage.Kill{At: v.at,
				AllocID: ta.tn.AllocID, Namespace: ta.tn.Namespace, Job: ta.tn.Job, Task: ta.tn.Task, GPU: ga.uuid,
				PIDs: pids(ta.procs), UsedMiB: ta.usedMiB, RequestMiB: ta.requestMiB, LimitMiB: ta.limitMiB,
				Reason: string(k.Reason), Detail: k.Detail, Enforced: enforced}}
			flagged[k.Tenant.Key] = true
			if enforced || pk.first {
				t.noteKillLocked(pk.kill, pk.ids)
			}
			out = append(out, pk)
		}
	}
	t.violating = flagged
	return out
}

func pids(ids []tenants.Identity) []int {
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = id.PID
	}
	return out
}

// carryOut kills the processes of the planned kills (enforcement "kill")
// and logs every decision.
func (t *Tenancy) carryOut(kills []plannedKill, resolver *tenants.Resolver) {
	for _, pk := range kills {
		k := pk.kill
		args := []any{"alloc_id", k.AllocID, "namespace", k.Namespace, "job", k.Job, "task", k.Task, "gpu", k.GPU,
			"pids", k.PIDs, "used_mib", k.UsedMiB, "request_mib", k.RequestMiB, "limit_mib", k.LimitMiB, "reason", k.Reason, "detail", k.Detail}
		if !k.Enforced {
			if pk.first {
				t.logger.Warn("GPU tenant would be killed (memory_enforcement = \"report\")", args...)
			} else {
				t.logger.Debug("GPU tenant still would be killed", args...)
			}
			continue
		}
		for _, id := range pk.ids {
			if err := resolver.Kill(id); err != nil {
				t.logger.Error("killing GPU tenant process failed", append(args, "pid", id.PID, "error", err)...)
			}
		}
		t.logger.Warn("killed GPU tenant", args...)
	}
}

// ReasonMove is the kill reason of a guest that did not leave its host.
const ReasonMove = "move"

// overdueGuestsLocked kills the guests whose move was asked for more than
// half of guest_move_timeout ago and whose processes are still on their
// host, so that a switch or a whole binding is not held up by a task that
// does not stop. t.mu must be held.
func (t *Tenancy) overdueGuestsLocked(v *cycleView) []plannedKill {
	var out []plannedKill
	for _, ga := range v.gpus {
		for _, ta := range ga.tenants {
			at, ok := t.moving[ta.tn.Key()]
			if !ok || !ta.guest || len(ta.procs) == 0 || v.at.Sub(at) < t.cfg.GuestMoveTimeout/2 {
				continue
			}
			k := nodeusage.Kill{At: v.at, AllocID: ta.tn.AllocID, Namespace: ta.tn.Namespace, Job: ta.tn.Job, Task: ta.tn.Task, GPU: ga.uuid,
				PIDs: pids(ta.procs), UsedMiB: ta.usedMiB, RequestMiB: ta.requestMiB, LimitMiB: ta.limitMiB, Reason: ReasonMove, Enforced: true,
				Detail: fmt.Sprintf("its allocation was stopped %s ago to move it off this GPU, and its processes are still here", v.at.Sub(at).Round(time.Second))}
			t.noteKillLocked(k, ta.procs)
			out = append(out, plannedKill{kill: k, ids: ta.procs, first: true})
		}
	}
	return out
}
