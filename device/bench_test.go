package device

import (
	"sort"
	"testing"
	"time"
)

// benchPlugin is a plugin on a simulated 8 x H100 machine, 8 GPUs x 100
// shares, with the partition decided.
func benchPlugin(b *testing.B) (*Plugin, []string) {
	f := newFakeNomad(b)
	p := newPlugin(b, f, func(c *Config) { c.SimulatedPreset, c.SimulatedCount, c.MinIdleShareGPUs = "h100", 8, 4 })
	cycle(p, f)
	return p, uuids(p)
}

// BenchmarkReserve reserves 25 shares of one GPU, then a whole GPU, and
// reports the p99 latency of one Reserve call.
func BenchmarkReserve(b *testing.B) {
	p, u := benchPlugin(b)
	shareIDs := shares(u[7], 0, 25)
	whole := []string{u[0]}
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ids := shareIDs
		if i%2 == 1 {
			ids = whole
		}
		start := time.Now()
		if _, err := p.Reserve(ids); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns/op")
}

// BenchmarkFingerprint rebuilds the device groups (8 whole instances and 8
// share groups of 100 instances) and the Reserve view, as each hardware
// refresh or Nomad read does.
func BenchmarkFingerprint(b *testing.B) {
	p, _ := benchPlugin(b)
	b.ReportAllocs()
	b.ResetTimer()
	st := loopStateOf(p)
	for i := 0; i < b.N; i++ {
		p.pub.reset() // force a full rebuild and change detection
		p.publish(st)
	}
}

// BenchmarkFingerprintWithNVML adds the NVML inventory read of 8 simulated
// GPUs to each rebuild.
func BenchmarkFingerprintWithNVML(b *testing.B) {
	p, _ := benchPlugin(b)
	b.ReportAllocs()
	b.ResetTimer()
	st := loopStateOf(p)
	for i := 0; i < b.N; i++ {
		p.refreshHardware(st)
	}
}
