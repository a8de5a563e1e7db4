package ranking

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// BenchmarkCompute is the ranks of the scale snapshot (5,000 nodes x 8
// GPUs, 100,000 allocations, 1,000 pending workloads; docs/scale.md),
// which the service's leader computes in its act phase.
func BenchmarkCompute(b *testing.B) {
	snap := cluster.Synthetic(cluster.ScaleSpec)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compute(snap, nil); err != nil {
			b.Fatal(err)
		}
	}
}
