package device_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
)

// BenchmarkSwitchOnRealNomad measures how long a GPU takes to move between
// the families on a real Nomad agent with the test node (simulated 4 x
// H100, min_idle_share_gpus 1, switch_settle_period 2s), the target being
// about switchBound. Each iteration starts from the idle layout (three
// whole GPUs and one share landing place): three whole jobs run, a fourth
// waits until the landing place is switched to whole (to-whole-s); then
// all stop and one GPU goes back to share mode (to-share-s).
func BenchmarkSwitchOnRealNomad(b *testing.B) {
	c, gate := startBareCluster(b)
	gate.open(b, c)
	waitLayout(b, c, 3, 1)
	var toWhole, toShare time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		toWhole += fourthWholeWait(b, c, i)
		start := time.Now()
		waitLayout(b, c, 3, 1)
		toShare += time.Since(start)
	}
	b.StopTimer()
	b.ReportMetric(toWhole.Seconds()/float64(b.N), "to-whole-s")
	b.ReportMetric(toShare.Seconds()/float64(b.N), "to-share-s")
	b.Logf("target: about %s per switch", switchBound)
}

// fourthWholeWait runs three whole jobs, then times a fourth until it
// runs on the switched landing place, and stops all four.
func fourthWholeWait(b *testing.B, c *localcluster.Cluster, round int) time.Duration {
	var names []string
	for k := 1; k <= 3; k++ {
		n := fmt.Sprintf("bench-%d-w%d", round, k)
		gpuJob(b, c, n, "gpu", 1)
		runningEnv(b, c, n)
		names = append(names, n)
	}
	last := fmt.Sprintf("bench-%d-w4", round)
	start := time.Now()
	gpuJob(b, c, last, "gpu", 1)
	runningAfter(b, c, last, start)
	wait := time.Since(start)
	for _, n := range append(names, last) {
		stopJob(b, c, n)
	}
	return wait
}
