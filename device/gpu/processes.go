package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Process is one compute process on a GPU.
type Process struct {
	// PID is the host PID (NVML reports host PIDs; the plugin runs on the
	// host).
	PID int
	// UsedMiB is the GPU memory it uses; MemKnown is false when NVML
	// cannot tell (it reports "not available", e.g. without the rights to
	// see another container's processes), and UsedMiB is then 0.
	UsedMiB  uint64
	MemKnown bool
	// SMPct is its SM utilization in the newest NVML sample since the
	// previous call, 0 without one (idle, or not supported).
	SMPct uint32
}

// Processes lists the compute processes of every GPU, keyed by UUID:
// NVML's running compute processes (and, where the driver lists them
// apart, the clients of the MPS server), each with its memory and its SM
// utilization. lastSample holds, per UUID, the NVML timestamp of the newest
// utilization sample already read; it is updated so that the next call
// gets only newer samples (pass the same map every time). A GPU whose
// processes cannot be read is left out of the result with its error in
// errs; an error means nothing could be read.
func (s *Source) Processes(lastSample map[string]uint64) (procs map[string][]Process, errs map[string]error, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.init(); err != nil {
		return nil, nil, err
	}
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nil, fmt.Errorf("NVML could not count GPUs: %v", ret)
	}
	procs, errs = make(map[string][]Process, n), map[string]error{}
	for i := 0; i < n; i++ {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		ps, err := readProcesses(d)
		if err != nil {
			errs[uuid] = err
			continue
		}
		addSamples(d, ps, lastSample, uuid)
		procs[uuid] = ps
	}
	return procs, errs, nil
}

// readProcesses lists a GPU's compute processes, MPS clients included, one
// entry per PID.
func readProcesses(d nvml.Device) ([]Process, error) {
	infos, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("list compute processes: %v", ret)
	}
	if mps, ret := d.GetMPSComputeRunningProcesses(); ret == nvml.SUCCESS {
		infos = append(infos, mps...)
	}
	out := make([]Process, 0, len(infos))
	seen := make(map[uint32]bool, len(infos))
	for _, in := range infos {
		if seen[in.Pid] {
			continue
		}
		seen[in.Pid] = true
		p := Process{PID: int(in.Pid)}
		if in.UsedGpuMemory != notAvailable {
			p.UsedMiB, p.MemKnown = in.UsedGpuMemory>>20, true
		}
		out = append(out, p)
	}
	return out, nil
}

// addSamples sets each process's SM utilization from the newest NVML
// sample taken after lastSample[uuid], and advances lastSample. NVML
// answers NOT_FOUND when no sample is newer, NOT_SUPPORTED on GPUs
// without per-process accounting: both leave 0.
func addSamples(d nvml.Device, ps []Process, lastSample map[string]uint64, uuid string) {
	samples, ret := d.GetProcessUtilization(lastSample[uuid])
	if ret != nvml.SUCCESS {
		return
	}
	newest := map[uint32]nvml.ProcessUtilizationSample{}
	for _, sm := range samples {
		if cur, ok := newest[sm.Pid]; !ok || sm.TimeStamp > cur.TimeStamp {
			newest[sm.Pid] = sm
		}
		if sm.TimeStamp > lastSample[uuid] {
			lastSample[uuid] = sm.TimeStamp
		}
	}
	for i := range ps {
		if sm, ok := newest[uint32(ps[i].PID)]; ok {
			ps[i].SMPct = min(sm.SmUtil, 100)
		}
	}
}

// notAvailable is NVML_VALUE_NOT_AVAILABLE as an unsigned 64-bit reading.
const notAvailable = ^uint64(0)
