package sim

import (
	"slices"
	"testing"
)

// gangCase is the simulated cluster: 8 nodes of 8 GPUs, ten hours, the
// workload arriving at 1.3 times what the cluster can run.
func gangCase(seed int64, service bool) GangConfig {
	return GangConfig{Nodes: 8, GPUsPerNode: 8, Minutes: 600, Load: 1.3, Seed: seed, Service: service}
}

// TestGangsHeldInPart: under plain Nomad, gangs hold GPUs in part while
// they wait for the rest; with the service's plan after every placement
// round, no gang holds any GPU in part at the end of a minute.
func TestGangsHeldInPart(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		nomad, err := RunGangs(gangCase(seed, false))
		if err != nil {
			t.Fatal(err)
		}
		svc, err := RunGangs(gangCase(seed, true))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: partial GPU-hours %.1f (Nomad) vs %.1f (service); busy %.1f vs %.1f; completed %d vs %d of %d",
			seed, nomad.PartialGPUHours, svc.PartialGPUHours, nomad.BusyGPUHours, svc.BusyGPUHours, nomad.Completed, svc.Completed, nomad.Arrived)
		if nomad.PartialGPUHours == 0 {
			t.Errorf("seed %d: plain Nomad held no gang in part: the workload does not test anything", seed)
		}
		if svc.PartialGPUHours != 0 {
			t.Errorf("seed %d: with the service, gangs held %.2f GPU-hours in part, want 0", seed, svc.PartialGPUHours)
		}
	}
}

func TestRunGangsRejectsBadConfig(t *testing.T) {
	if _, err := RunGangs(GangConfig{Nodes: 1, GPUsPerNode: 4, Minutes: 10, Load: 1}); err == nil {
		t.Error("a node of 4 GPUs cannot hold the workload's 8-GPU allocations: want an error")
	}
}

// BenchmarkGangPartialHold reports GPU-hours held by gangs placed in part
// under plain Nomad and with the service (expected: zero), and the GPU-hours
// of work that runs whole, as medians over seeds 1 to 5.
func BenchmarkGangPartialHold(b *testing.B) {
	var nomadPartial, svcPartial, nomadBusy, svcBusy []float64
	for i := 0; i < b.N; i++ {
		nomadPartial, svcPartial, nomadBusy, svcBusy = nil, nil, nil, nil
		for seed := int64(1); seed <= 5; seed++ {
			nomad, err := RunGangs(gangCase(seed, false))
			if err != nil {
				b.Fatal(err)
			}
			svc, err := RunGangs(gangCase(seed, true))
			if err != nil {
				b.Fatal(err)
			}
			nomadPartial, svcPartial = append(nomadPartial, nomad.PartialGPUHours), append(svcPartial, svc.PartialGPUHours)
			nomadBusy, svcBusy = append(nomadBusy, nomad.BusyGPUHours), append(svcBusy, svc.BusyGPUHours)
		}
	}
	b.ReportMetric(median(nomadPartial), "partial-gpu-h-nomad")
	b.ReportMetric(median(svcPartial), "partial-gpu-h-service")
	b.ReportMetric(median(nomadBusy), "busy-gpu-h-nomad")
	b.ReportMetric(median(svcBusy), "busy-gpu-h-service")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
