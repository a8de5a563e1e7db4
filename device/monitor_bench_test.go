package device

import (
	"fmt"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/gpu/simproc"
	"github.com/gpushare/nomad-gpushare/vocab"
)

// BenchmarkMonitorCycle is one monitor cycle on 8 GPUs with 20 processes
// each (160 real processes, 5 share tenants of 4 processes per GPU): NVML
// listing (go-nvml mocks answering from memory, so NVML's own cost is left
// out), /proc attribution, accounting, the borrowing rule and the report.
// %core@1s is the share of one core the monitor takes at a 1 s period.
func BenchmarkMonitorCycle(b *testing.B) {
	const gpus, perGPU, perTenant = 8, 20, 4
	f := newFakeNomad(b)
	sim, err := gpu.NewSimulated(gpu.SimOptions{Preset: gpu.PresetH100, Count: gpus})
	if err != nil {
		b.Fatal(err)
	}
	p := newPlugin(b, f, func(c *Config) { c.Backend = BackendNVML })
	p.newLib = func() nvml.Interface { return sim }
	if err := p.configure(p.loop.state.cfg.Config); err != nil {
		b.Fatal(err)
	}
	cycle(p, f)
	var tenants []alloctrack.Tenant
	for g, d := range sim.Server.Devices {
		dev := d.(*server.Device)
		var infos []nvml.ProcessInfo
		var samples []nvml.ProcessUtilizationSample
		for k := 0; k < perGPU; k++ {
			alloc := fmt.Sprintf("%08x-0000-4000-8000-%012x", g, k/perTenant)
			if k%perTenant == 0 {
				tenants = append(tenants, alloctrack.Tenant{AllocID: alloc, Namespace: "default", Job: alloc[:8], Task: "main",
					ShareGPU: dev.UUID, ShareIDs: shares(dev.UUID, k/perTenant*20, 20), Limit: "0.5", Created: time.Unix(int64(k), 0)})
			}
			cmd := exec.Command("sleep", "600")
			cmd.Env = []string{"NOMAD_ALLOC_ID=" + alloc, "NOMAD_TASK_NAME=main"}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			infos = append(infos, nvml.ProcessInfo{Pid: uint32(cmd.Process.Pid), UsedGpuMemory: 800 << 20})
			samples = append(samples, nvml.ProcessUtilizationSample{Pid: uint32(cmd.Process.Pid), TimeStamp: 1, SmUtil: 3})
		}
		dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return infos, nvml.SUCCESS }
		dev.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return samples, nvml.SUCCESS }
	}
	p.tenancy.Update(fakeNodeID, tenants, time.Now())
	p.tenancy.Cycle(p.ctx)
	if r := p.tenancy.Report(); len(r.Tenants) != gpus*perGPU/perTenant || len(r.Outside) != 0 || len(r.Kills) != 0 {
		b.Fatalf("report: %d tenants, %d outside, %d kills", len(r.Tenants), len(r.Outside), len(r.Kills))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p.tenancy.Cycle(p.ctx)
	}
	b.StopTimer()
	perCycle := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perCycle/1e9*100, "%core@1s")
}

// BenchmarkDetectionToKill measures, on the simulated backend with the
// monitor running at its default period (500 ms), the time from a
// tenant's process going above its limit (its state file written) to the
// process being dead (reaped). The violations fall at spread phases of the
// monitor's period (a violation just after a cycle waits a whole period).
// Reported: mean, p50 and max.
func BenchmarkDetectionToKill(b *testing.B) {
	f := newFakeNomad(b)
	dir := b.TempDir()
	p := newPlugin(b, f, func(c *Config) { c.SimulatedProcessDir = dir })
	u := uuids(p)
	f.placeTenant(allocA, "capped", "0.5", "gpu-share", shares(u[3], 0, 25)...)
	cycle(p, f)
	go p.tenancy.Monitor(p.ctx)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		cmd := exec.Command("sleep", "600")
		cmd.Env = []string{"NOMAD_ALLOC_ID=" + allocA, "NOMAD_TASK_NAME=main"}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		start, _ := simproc.StartTicks(cmd.Process.Pid)
		st := simproc.State{PID: cmd.Process.Pid, StartTicks: start, GPU: u[3], UsedMiB: 1000}
		simproc.Write(dir, st)
		time.Sleep(time.Duration(i*37%100) * 5 * time.Millisecond) // phase: 0-99% of the 500 ms period
		b.StartTimer()
		st.UsedMiB = 40960*50/vocab.UnitsPerGPU + 1 // above the 0.5 limit of an A100 40GB
		t0 := time.Now()
		simproc.Write(dir, st)
		cmd.Wait()
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	b.ReportMetric(float64(sum.Milliseconds())/float64(len(lat)), "mean-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
}
