package gpu

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/gpushare/nomad-gpushare/device/gpu/simproc"
)

// startSleeper starts a process that lives until the test ends (or is
// killed) and returns it with its start time.
func startSleeper(t *testing.T) (*exec.Cmd, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	start, err := simproc.StartTicks(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, start
}

func TestSimulatedProcessesAreReportedAsNVMLProcesses(t *testing.T) {
	dir := t.TempDir()
	sim, err := NewSimulated(SimOptions{Preset: PresetH100, Count: 2, ProcessDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	uuids := sim.UUIDs()
	a, aStart := startSleeper(t)
	b, bStart := startSleeper(t)
	write := func(s simproc.State) {
		if err := simproc.Write(dir, s); err != nil {
			t.Fatal(err)
		}
	}
	write(simproc.State{PID: a.Process.Pid, StartTicks: aStart, GPU: uuids[0], UsedMiB: 20000, SMPct: 40})
	write(simproc.State{PID: b.Process.Pid, StartTicks: bStart, GPU: uuids[0], UsedMiB: 1000})
	write(simproc.State{PID: b.Process.Pid + 1_000_000, StartTicks: 1, GPU: uuids[1], UsedMiB: 5000}) // no such process

	src := NewSource(sim)
	last := map[string]uint64{}
	procs, errs, err := src.Processes(last)
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	got := map[int]Process{}
	for _, p := range procs[uuids[0]] {
		got[p.PID] = p
	}
	if p := got[a.Process.Pid]; p.UsedMiB != 20000 || !p.MemKnown || p.SMPct != 40 {
		t.Errorf("process a: %+v", p)
	}
	if p := got[b.Process.Pid]; p.UsedMiB != 1000 || p.SMPct != 0 {
		t.Errorf("process b: %+v", p)
	}
	if len(procs[uuids[1]]) != 0 {
		t.Errorf("GPU 1 lists a process that does not exist: %+v", procs[uuids[1]])
	}
	stats, _ := src.Stats()
	if s := stats[uuids[0]]; s.MemUsedMiB != 21000 || *s.GPUUtilPct != 40 {
		t.Errorf("GPU 0 stats: used %d MiB, util %d%%", s.MemUsedMiB, *s.GPUUtilPct)
	}

	a.Process.Kill()
	a.Wait()
	sim.procs.readAt = sim.procs.readAt.Add(-simProcsTTL) // next call re-reads
	procs, _, _ = src.Processes(last)
	if len(procs[uuids[0]]) != 1 || procs[uuids[0]][0].PID != b.Process.Pid {
		t.Errorf("after a was killed: %+v", procs[uuids[0]])
	}
	if _, err := os.Stat(dir + "/" + strconv.Itoa(a.Process.Pid) + ".json"); !os.IsNotExist(err) {
		t.Errorf("the killed process's file stays: %v", err)
	}
}

func TestProcessesFromNVML(t *testing.T) {
	dev := &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return "GPU-1", nvml.SUCCESS },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 3 << 30}, {Pid: 11, UsedGpuMemory: notAvailable}}, nvml.SUCCESS
		},
		GetMPSComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) {
			return []nvml.ProcessInfo{{Pid: 10, UsedGpuMemory: 3 << 30}, {Pid: 12, UsedGpuMemory: 1 << 30}}, nvml.SUCCESS
		},
		GetProcessUtilizationFunc: func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
			if last >= 300 {
				return nil, nvml.ERROR_NOT_FOUND
			}
			return []nvml.ProcessUtilizationSample{{Pid: 10, TimeStamp: 100, SmUtil: 10}, {Pid: 10, TimeStamp: 300, SmUtil: 70}, {Pid: 12, TimeStamp: 200, SmUtil: 150}}, nvml.SUCCESS
		},
	}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return 1, nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
	}
	src := NewSource(lib)
	last := map[string]uint64{}
	procs, _, err := src.Processes(last)
	if err != nil {
		t.Fatal(err)
	}
	want := []Process{{PID: 10, UsedMiB: 3072, MemKnown: true, SMPct: 70}, {PID: 11}, {PID: 12, UsedMiB: 1024, MemKnown: true, SMPct: 100}}
	if got := procs["GPU-1"]; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("processes %+v, want %+v", got, want)
	}
	if last["GPU-1"] != 300 {
		t.Errorf("last sample %d, want 300", last["GPU-1"])
	}
	procs, _, _ = src.Processes(last)
	if procs["GPU-1"][0].SMPct != 0 {
		t.Errorf("no newer sample, yet SM %d%%", procs["GPU-1"][0].SMPct)
	}
}
