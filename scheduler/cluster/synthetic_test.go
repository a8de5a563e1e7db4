package cluster

import (
	"runtime"
	"testing"
)

func TestSyntheticIsValidAndDeterministic(t *testing.T) {
	spec := SyntheticSpec{Nodes: 50, GPUsPerNode: 8, Allocations: 1000, Projects: 10, Pending: 20, Seed: 7}
	a, b := Synthetic(spec), Synthetic(spec)
	if _, err := a.Index(); err != nil {
		t.Fatal(err)
	}
	if len(a.Allocations) != 1000 || len(a.Pending) != 20 {
		t.Fatalf("%d allocations, %d pending", len(a.Allocations), len(a.Pending))
	}
	for i := range a.Allocations {
		if a.Allocations[i].Job != b.Allocations[i].Job || a.Allocations[i].Node != b.Allocations[i].Node {
			t.Fatalf("allocation %d differs between two builds from the same seed", i)
		}
	}
}

// BenchmarkSnapshotMemory reports the heap a scale snapshot (5,000 nodes x
// 8 GPUs, 100,000 allocations, 500 projects, 1,000 pending) and its index
// hold, in MiB.
func BenchmarkSnapshotMemory(b *testing.B) {
	b.ReportAllocs()
	var mib float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		snap := Synthetic(ScaleSpec)
		x, err := snap.Index()
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		mib = float64(after.HeapAlloc-before.HeapAlloc) / (1 << 20)
		runtime.KeepAlive(snap)
		runtime.KeepAlive(x)
	}
	b.ReportMetric(mib, "MiB/snapshot")
}
