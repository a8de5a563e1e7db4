package plan

import (
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// BenchmarkPlanCycle is one full planning cycle (fair share, reclaim,
// preemption and placement) at scale: 5,000 nodes x 8 GPUs, 100,000 running
// allocations, 500 projects, 1,000 pending workloads, placed by first fit.
func BenchmarkPlanCycle(b *testing.B) {
	benchmarkPlanCycle(b, "")
}

// BenchmarkPlanCyclePolicy is the same cycle with the service's default
// placement policy (gpushare), built per cycle from the snapshot as the
// service does (PolicyByName).
func BenchmarkPlanCyclePolicy(b *testing.B) {
	benchmarkPlanCycle(b, "gpushare")
}

// BenchmarkPlanCyclePolicyReserve is the same cycle with gpushare-reserve,
// which weighs its reserve only where it sees every node.
func BenchmarkPlanCyclePolicyReserve(b *testing.B) {
	benchmarkPlanCycle(b, "gpushare-reserve")
}

func benchmarkPlanCycle(b *testing.B, policy string) {
	snap := cluster.Synthetic(cluster.ScaleSpec)
	b.ReportAllocs()
	var res Result
	for b.Loop() {
		var opts Options
		if policy != "" {
			var err error
			if opts.Policy, err = PolicyByName(policy, 1, snap); err != nil {
				b.Fatal(err)
			}
		}
		var err error
		if res, err = Plan(snap, opts); err != nil {
			b.Fatal(err)
		}
	}
	var suspended, placed int
	for _, a := range res.Actions {
		if a.Kind == Suspend {
			suspended++
		} else {
			placed++
		}
	}
	b.ReportMetric(float64(placed), "placements")
	b.ReportMetric(float64(suspended), "suspensions")
	b.ReportMetric(float64(len(res.Unplaced)), "unplaced")
}

// BenchmarkPlannerNewPending is the cycle of BenchmarkPlanCyclePolicy
// after a change of the pending work alone (a job registered or gone,
// the quota service's commonest change): each iteration plans the scale
// snapshot with one pending workload more or less than the last, its
// running lists equal but not shared (as the service's cycles see them),
// with the policy of a task mix kept across cycles (as the service
// does). Planner plans with a Planner, Plan without: compare the two.
func BenchmarkPlannerNewPending(b *testing.B) {
	base := cluster.Synthetic(cluster.ScaleSpec)
	other := *base
	other.Pending = base.Pending[:len(base.Pending)-1]
	other.Allocations = slices.Clone(base.Allocations)
	other.Nodes = slices.Clone(base.Nodes)
	snaps := []*cluster.Snapshot{base, &other}
	mix := SnapshotWorkload(base)
	for _, name := range []string{"Plan", "Planner"} {
		b.Run(name, func(b *testing.B) {
			var p Planner
			i := 0
			for b.Loop() {
				pol, err := PolicyWithWorkload("gpushare", 1, mix)
				if err != nil {
					b.Fatal(err)
				}
				snap := snaps[i%2]
				i++
				if name == "Plan" {
					_, err = Plan(snap, Options{Policy: pol})
				} else {
					_, err = p.Plan(snap, Options{Policy: pol})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
