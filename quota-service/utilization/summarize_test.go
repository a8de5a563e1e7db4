package utilization

import (
	"math"
	"testing"

	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

func TestSummarize(t *testing.T) {
	const gpu = 81920
	reports := []nodeusage.Report{
		{NodeID: "n1", Tenants: []nodeusage.Tenant{
			// A notebook of request 0.25 that idles: 4096 MiB, 5% SM.
			{Namespace: "team-a", Job: "nb", Request: 0.25, RequestMiB: gpu / 4, GPUMiB: gpu, UsedMiB: 4096, SMPct: 5},
			// A bursting job of request 0.25 using 0.5 of the memory.
			{Namespace: "team-a", Job: "burst", Request: 0.25, RequestMiB: gpu / 4, GPUMiB: gpu, UsedMiB: gpu / 2, SMPct: 80},
		}},
		{NodeID: "n2", Tenants: []nodeusage.Tenant{
			// A whole-GPU job using all the compute, little memory.
			{Namespace: "research", Job: "train", Whole: true, Request: 1, RequestMiB: gpu, GPUMiB: gpu, UsedMiB: 8192, SMPct: 100},
			{Namespace: "team-a", Job: "mapped-elsewhere", Request: 0.5, RequestMiB: gpu / 2, GPUMiB: gpu},
		}},
	}
	projectOf := func(ns, job string) string {
		if job == "mapped-elsewhere" {
			return "research"
		}
		return ns
	}
	got := Summarize(reports, projectOf)
	want := []ProjectUsage{
		{Project: "research", Allocated: 1.5, UsedMemory: 0.1, UsedCompute: 1, Idle: 0.5, Borrowed: 0, UsedMiB: 8192, RequestMiB: gpu + gpu/2, Tenants: 2},
		{Project: "team-a", Allocated: 0.5, UsedMemory: 0.05 + 0.5, UsedCompute: 0.85, Idle: 0.2, Borrowed: 0.25, UsedMiB: 4096 + gpu/2, RequestMiB: gpu / 2, Tenants: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		g, w := got[i], want[i]
		near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
		if g.Project != w.Project || !near(g.Allocated, w.Allocated) || !near(g.UsedMemory, w.UsedMemory) || !near(g.UsedCompute, w.UsedCompute) ||
			!near(g.Idle, w.Idle) || !near(g.Borrowed, w.Borrowed) || g.UsedMiB != w.UsedMiB || g.RequestMiB != w.RequestMiB || g.Tenants != w.Tenants {
			t.Errorf("project %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}
