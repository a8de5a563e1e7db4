package device_test

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
)

// BenchmarkIdlePluginNomadRequests counts the requests that one idle
// plugin, at the default nomad_poll_period (2s), sends to the Nomad API
// over a minute once its GPUs are published and nothing changes on the
// node or in the cluster (docs/scale.md, "The plugin's reads of Nomad"):
// requests/min, and by kind in the log.
func BenchmarkIdlePluginNomadRequests(b *testing.B) {
	cfg := strings.Replace(pluginConfig, `nomad_poll_period    = "500ms"`, `nomad_poll_period    = "2s"`, 1)
	c, gate := startGatedClusterWith(b, localcluster.Options{}, cfg)
	gate.open(b, c)
	waitLayout(b, c, 3, 1)
	const window = time.Minute
	counts := map[string]int{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		from := gate.requests()
		time.Sleep(window) // the measurement window, not a synchronization
		for k, n := range gate.requests() {
			if d := n - from[k]; d > 0 {
				counts[k] += d
			}
		}
	}
	b.StopTimer()
	total := 0
	var kinds []string
	for k, n := range counts {
		total += n
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		b.Logf("%6.1f/min  %s", float64(counts[k])/float64(b.N)/window.Minutes(), k)
	}
	b.ReportMetric(float64(total)/float64(b.N)/window.Minutes(), "requests/min")
}
