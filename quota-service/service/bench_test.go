package service_test

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkReclaimLatency measures the guaranteed-quota reclaim on the
// simulated 4-GPU node, ten times: team-a (guaranteed 2) runs 4 whole-GPU
// jobs, team-b (guaranteed 2) submits 2; the latency is from team-b's
// submission until both its allocations run. It prints `reclaim_latency_s
// median=<x> max=<y> runs=10` (target: median <= 2 s).
func BenchmarkReclaimLatency(b *testing.B) {
	c := needCluster(b)
	const runs = 10
	var lat []time.Duration
	for range b.N {
		lat = lat[:0]
		for i := range runs {
			s := newScenario(b, c, fmt.Sprintf("bench-reclaim-%d", i))
			s.quota("team-a", `{"guaranteed": 2}`)
			s.quota("team-b", `{"guaranteed": 2}`)
			svc, stop := s.startQuotaService("bench", nil)
			waitLeader(b, svc)
			ja, jb := jobsOf("team-a", 4, 1), jobsOf("team-b", 2, 1)
			for k := range ja {
				ja[k].id = fmt.Sprintf("%s-r%d", ja[k].id, i)
			}
			for k := range jb {
				jb[k].id = fmt.Sprintf("%s-r%d", jb[k].id, i)
			}
			for _, j := range ja {
				s.submit(j)
			}
			s.wait(90*time.Second, "running", isRunning, ja...)
			d, _ := s.reclaim(ja, jb, 2)
			lat = append(lat, d)
			stop()
			s.purgeAll()
		}
	}
	slices.Sort(lat)
	median := (lat[runs/2-1] + lat[runs/2]) / 2
	b.ReportMetric(median.Seconds(), "median-s")
	b.ReportMetric(lat[runs-1].Seconds(), "max-s")
	fmt.Printf("reclaim_latency_s median=%.2f max=%.2f runs=%d\n", median.Seconds(), lat[runs-1].Seconds(), runs)
}
