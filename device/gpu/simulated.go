package gpu

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Simulated presets.
const (
	PresetH100   = "h100"   // 8 x H100 80GB (mock/dgxh100)
	PresetA100   = "a100"   // 8 x A100 40GB (mock/dgxa100)
	PresetCustom = "custom" // Count GPUs of Model with MemoryMiB
)

// SimOptions describe a simulated machine.
type SimOptions struct {
	Preset    string
	Count     int    // GPUs; 0 means the preset's 8 (required for custom)
	Model     string // custom only
	MemoryMiB uint64 // custom only
	// Seed makes the GPU UUIDs; the same seed gives the same UUIDs, so
	// allocations survive plugin restarts. Empty means "gpushare".
	Seed string
	// ProcessDir, when set, holds the state files of simulated GPU
	// processes (package simproc): each live one is reported as a compute
	// process of its GPU, with its memory and utilization added to the
	// GPU's. Empty: no processes.
	ProcessDir string
}

// Simulated is an nvml.Interface built on go-nvml's mock machines, with what
// the mocks lack filled in: PCI bus IDs, utilization, temperature, power,
// memory in use, processes (from SimOptions.ProcessDir), stable UUIDs. Its Set methods let tests
// and demos change readings and break GPUs.
//
// A go-nvml mock function that is not set panics when called, and Source
// recovers from nothing (real NVML does not panic, and a panic there is a
// bug to see), so Simulated sets every function that Source calls; the
// package tests call all of them on every preset.
type Simulated struct {
	*server.Server

	mu       sync.Mutex
	devs     []*server.Device
	lost     map[int]nvml.Return
	util     map[int]uint32
	initFail nvml.Return
	procs    *simProcs
}

// NewSimulated builds a simulated machine.
func NewSimulated(o SimOptions) (*Simulated, error) {
	var srv *server.Server
	switch o.Preset {
	case PresetH100, "":
		srv = dgxh100.New()
	case PresetA100:
		srv = dgxa100.New()
	case PresetCustom:
		if o.Count <= 0 || o.Model == "" || o.MemoryMiB == 0 {
			return nil, fmt.Errorf("custom simulated machine needs count > 0, a model and memory, got %d, %q, %d MiB", o.Count, o.Model, o.MemoryMiB)
		}
		cfg := gpus.A100_SXM4_40GB // architecture, compute capability and MIG profiles of an A100
		cfg.Name, cfg.MemoryMB = o.Model, o.MemoryMiB
		srv = server.NewServerWithGPUs("550.54.15", "12.550.54.15", 12040, gpus.Multiple(o.Count, cfg)...)
	default:
		return nil, fmt.Errorf("unknown simulated preset %q (want %q, %q or %q)", o.Preset, PresetH100, PresetA100, PresetCustom)
	}
	if o.Count > 0 && o.Count < len(srv.Devices) {
		srv.Devices = srv.Devices[:o.Count]
	} else if o.Count > len(srv.Devices) {
		cfg := srv.Devices[0].(*server.Device).Config
		for i := len(srv.Devices); i < o.Count; i++ {
			srv.Devices = append(srv.Devices, server.NewDeviceFromConfig(cfg, i))
		}
	}
	seed := o.Seed
	if seed == "" {
		seed = "gpushare"
	}
	s := &Simulated{Server: srv, lost: map[int]nvml.Return{}, util: map[int]uint32{}, initFail: nvml.SUCCESS,
		procs: &simProcs{dir: o.ProcessDir, now: time.Now}}
	for i, nd := range srv.Devices {
		d := nd.(*server.Device)
		d.UUID = simUUID(seed, i)
		d.PciBusID = fmt.Sprintf("00000000:%02X:00.0", simBus(i))
		d.MemoryInfo.Free = d.MemoryInfo.Total
		s.devs = append(s.devs, d)
		s.fill(i, d)
		s.fillProcesses(i, d)
	}
	srv.InitFunc = func() nvml.Return {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.initFail
	}
	srv.DeviceGetCountFunc = func() (int, nvml.Return) { return len(srv.Devices), nvml.SUCCESS }
	srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(srv.Devices) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if r := s.lostRet(i); r != nvml.SUCCESS {
			return nil, r
		}
		return srv.Devices[i], nvml.SUCCESS
	}
	return s, nil
}

func simUUID(seed string, i int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d", seed, i)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

func simBus(i int) int {
	dgx := []int{0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF}
	if i < len(dgx) {
		return dgx[i]
	}
	return (0xE0 + i) % 256
}

func (s *Simulated) lostRet(i int) nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.lost[i]; ok {
		return r
	}
	return nvml.SUCCESS
}

// fill sets the mock functions the mock machines leave unset.
func (s *Simulated) fill(i int, d *server.Device) {
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Bus: uint32(simBus(i))}
		for j := 0; j < len(d.PciBusID) && j < len(p.BusId)-1; j++ {
			p.BusId[j] = int8(d.PciBusID[j])
		}
		return p, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if r := s.lostRet(i); r != nvml.SUCCESS {
			return nvml.Memory{}, r
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return d.MemoryInfo, nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		u := s.util[i]
		var m uint32
		if d.MemoryInfo.Total > 0 {
			m = uint32(d.MemoryInfo.Used * 100 / d.MemoryInfo.Total)
		}
		return nvml.Utilization{Gpu: u, Memory: m}, nvml.SUCCESS
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return 32 + s.util[i]/2, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return 70_000 + s.util[i]*5_000, nvml.SUCCESS // milliwatts
	}
	d.GetPowerManagementLimitFunc = func() (uint32, nvml.Return) {
		if d.Config.Architecture == nvml.DEVICE_ARCH_HOPPER {
			return 700_000, nvml.SUCCESS
		}
		return 400_000, nvml.SUCCESS
	}
	d.GetMaxPcieLinkGenerationFunc = func() (int, nvml.Return) {
		if d.Config.Architecture == nvml.DEVICE_ARCH_HOPPER {
			return 5, nvml.SUCCESS
		}
		return 4, nvml.SUCCESS
	}
	d.GetMaxPcieLinkWidthFunc = func() (int, nvml.Return) { return 16, nvml.SUCCESS }
	d.GetMaxClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		if t == nvml.CLOCK_MEM {
			return 1593, nvml.SUCCESS
		}
		return 1980, nvml.SUCCESS
	}
	d.GetBAR1MemoryInfoFunc = func() (nvml.BAR1Memory, nvml.Return) {
		return nvml.BAR1Memory{Bar1Total: d.MemoryInfo.Total, Bar1Free: d.MemoryInfo.Total}, nvml.SUCCESS
	}
	d.GetNumGpuCoresFunc = func() (int, nvml.Return) {
		if d.Config.Architecture == nvml.DEVICE_ARCH_HOPPER {
			return 16896, nvml.SUCCESS
		}
		return 6912, nvml.SUCCESS
	}
}

// UUIDs returns the simulated GPUs' UUIDs in index order.
func (s *Simulated) UUIDs() []string {
	out := make([]string, len(s.devs))
	for i, d := range s.devs {
		out[i] = d.UUID
	}
	return out
}

// SetLost makes GPU i answer every call with ret (e.g.
// nvml.ERROR_GPU_IS_LOST); nvml.SUCCESS brings it back.
func (s *Simulated) SetLost(i int, ret nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ret == nvml.SUCCESS {
		delete(s.lost, i)
	} else {
		s.lost[i] = ret
	}
}

// SetUsage sets GPU i's memory in use and utilization.
func (s *Simulated) SetUsage(i int, memUsedMiB uint64, utilPct uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.devs[i]
	used := memUsedMiB << 20
	if used > d.MemoryInfo.Total {
		used = d.MemoryInfo.Total
	}
	d.MemoryInfo.Used, d.MemoryInfo.Free = used, d.MemoryInfo.Total-used
	s.util[i] = utilPct
}

// SetInitError makes nvml Init return ret (nvml.SUCCESS to heal).
func (s *Simulated) SetInitError(ret nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.initFail = ret
}

// SetMIG enables or disables MIG mode on GPU i.
func (s *Simulated) SetMIG(i int, on bool) {
	mode := nvml.DEVICE_MIG_DISABLE
	if on {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	s.devs[i].SetMigMode(mode)
}
