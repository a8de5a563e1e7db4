package gpu

import (
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
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
// memory in use, processes (from SimOptions.ProcessDir), stable UUIDs, MIG
// devices (simulated_mig.go). Its Set and Add methods let tests and demos
// change readings, break GPUs and create MIG devices.
//
// A go-nvml mock function that is not set panics when called, and Source
// recovers from nothing (real NVML does not panic, and a panic there is a
// bug to see), so Simulated sets every function that Source calls; the
// package tests call all of them on every preset.
type Simulated struct {
	*server.Server

	seed     string
	mu       sync.Mutex
	devs     []*server.Device
	mig      map[int][]*mock.Device // MIG devices by GPU index
	lost     map[int]nvml.Return
	nameErr  map[int]nvml.Return
	util     map[int]uint32
	initFail nvml.Return
	procs    *simProcs
	// events carries injected events to the event sets' Wait;
	// xidRegistered are the GPUs registered for Xid events; ecc their
	// memory errors.
	events        chan nvml.EventData
	xidRegistered map[int]bool
	ecc           map[int]simECC
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
	s := &Simulated{Server: srv, seed: seed, mig: map[int][]*mock.Device{}, xidRegistered: map[int]bool{}, ecc: map[int]simECC{}, lost: map[int]nvml.Return{}, nameErr: map[int]nvml.Return{}, util: map[int]uint32{}, initFail: nvml.SUCCESS,
		procs: &simProcs{dir: o.ProcessDir, now: time.Now}}
	for i, nd := range srv.Devices {
		d := nd.(*server.Device)
		d.UUID = simUUID(seed, i)
		d.PciBusID = fmt.Sprintf("00000000:%02X:00.0", simBus(i))
		d.MemoryInfo.Free = d.MemoryInfo.Total
		s.devs = append(s.devs, d)
		s.fillIdentity(i, d)
		s.fillReadings(i, d)
		fillLimits(d)
		s.fillMIG(i, d)
		s.fillHealth(i, d)
		s.fillProcesses(i, d) // after fillReadings: it adds the processes to the readings
	}
	s.fillEvents()
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

// The mock machines leave most calls unset, and the Set methods break
// some: fillIdentity, fillReadings and fillLimits set them.

// fillIdentity sets GPU i's name and PCI information.
func (s *Simulated) fillIdentity(i int, d *server.Device) {
	d.GetNameFunc = func() (string, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if r, ok := s.nameErr[i]; ok {
			return "", r
		}
		return d.Config.Name, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Bus: uint32(simBus(i))}
		for j := 0; j < len(d.PciBusID) && j < len(p.BusId)-1; j++ {
			p.BusId[j] = int8(d.PciBusID[j])
		}
		return p, nvml.SUCCESS
	}
}

// fillReadings sets GPU i's live readings: memory, utilization,
// temperature and power follow SetUsage.
func (s *Simulated) fillReadings(i int, d *server.Device) {
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
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.util[i] / 4, 167000, nvml.SUCCESS // utilization, sampling period (us)
	}
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.util[i] / 2, 167000, nvml.SUCCESS
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
}

// fillLimits sets a GPU's fixed facts by its architecture: power limit,
// PCIe link, clocks, BAR1 and core count.
func fillLimits(d *server.Device) {
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
		const used = 2 << 20 // the driver maps a little
		return nvml.BAR1Memory{Bar1Total: d.MemoryInfo.Total, Bar1Free: d.MemoryInfo.Total - used, Bar1Used: used}, nvml.SUCCESS
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
func (s *Simulated) SetLost(i int, ret nvml.Return) { s.setFailure(s.lost, i, ret) }

// SetNameError makes GPU i's name unreadable (ret, e.g.
// nvml.ERROR_UNKNOWN); nvml.SUCCESS heals it.
func (s *Simulated) SetNameError(i int, ret nvml.Return) { s.setFailure(s.nameErr, i, ret) }

// setFailure records GPU i's failure ret in m (nvml.SUCCESS clears it).
func (s *Simulated) setFailure(m map[int]nvml.Return, i int, ret nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ret == nvml.SUCCESS {
		delete(m, i)
	} else {
		m[i] = ret
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
