package plan

import (
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
