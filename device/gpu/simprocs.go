package gpu

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/gpushare/nomad-gpushare/device/gpu/simproc"
)

// simProcs reads the simulated processes of SimOptions.ProcessDir (see
// package simproc), at most once per simProcsTTL so that one monitor
// cycle's calls for every GPU share one read of the directory.
type simProcs struct {
	dir string
	now func() time.Time

	mu     sync.Mutex
	readAt time.Time
	byGPU  map[string][]simproc.State
}

const simProcsTTL = 20 * time.Millisecond

func (p *simProcs) forGPU(uuid string) []simproc.State {
	if p == nil || p.dir == "" {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := p.now(); p.byGPU == nil || now.Sub(p.readAt) >= simProcsTTL {
		states, _ := simproc.List(p.dir)
		p.byGPU = map[string][]simproc.State{}
		for _, s := range states {
			p.byGPU[s.GPU] = append(p.byGPU[s.GPU], s)
		}
		p.readAt = now
	}
	return p.byGPU[uuid]
}

// fillProcesses sets GPU i's process calls from the simulated processes,
// and adds their memory and utilization to the GPU's readings (on top of
// SetUsage's).
func (s *Simulated) fillProcesses(i int, d *server.Device) {
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		if r := s.lostRet(i); r != nvml.SUCCESS {
			return nil, r
		}
		var out []nvml.ProcessInfo
		for _, p := range s.procs.forGPU(d.UUID) {
			out = append(out, nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: p.UsedMiB << 20})
		}
		return out, nvml.SUCCESS
	}
	d.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	d.GetProcessUtilizationFunc = func(last uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
		ts := uint64(s.procs.clock().UnixMicro())
		var out []nvml.ProcessUtilizationSample
		for _, p := range s.procs.forGPU(d.UUID) {
			if p.SMPct > 0 && ts > last {
				out = append(out, nvml.ProcessUtilizationSample{Pid: uint32(p.PID), TimeStamp: ts, SmUtil: p.SMPct})
			}
		}
		if len(out) == 0 {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return out, nvml.SUCCESS
	}
	baseMem, baseUtil := d.GetMemoryInfoFunc, d.GetUtilizationRatesFunc
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		m, ret := baseMem()
		if ret != nvml.SUCCESS {
			return m, ret
		}
		for _, p := range s.procs.forGPU(d.UUID) {
			m.Used = min(m.Used+p.UsedMiB<<20, m.Total)
		}
		m.Free = m.Total - m.Used
		return m, ret
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		u, ret := baseUtil()
		if ret != nvml.SUCCESS {
			return u, ret
		}
		used := uint64(0)
		for _, p := range s.procs.forGPU(d.UUID) {
			u.Gpu = min(u.Gpu+p.SMPct, 100)
			used += p.UsedMiB << 20
		}
		if total := d.MemoryInfo.Total; total > 0 && used > 0 {
			u.Memory = uint32(min(100, uint64(u.Memory)+used*100/total))
		}
		return u, ret
	}
}

func (p *simProcs) clock() time.Time {
	if p == nil {
		return time.Now()
	}
	return p.now()
}

// ReadProcessesAgain makes the next call re-read the process directory
// (tests change a state file and look at once).
func (s *Simulated) ReadProcessesAgain() {
	if s.procs == nil {
		return
	}
	s.procs.mu.Lock()
	defer s.procs.mu.Unlock()
	s.procs.byGPU = nil
}
