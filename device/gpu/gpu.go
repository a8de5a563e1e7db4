// Package gpu reads GPUs through go-nvml's nvml.Interface: the inventory
// (UUID, model, memory, compute capability, PCI bus ID, driver and CUDA
// versions, MIG mode and the MIG devices of a MIG-enabled GPU) and live
// statistics (memory used, utilization, temperature, power). The interface
// is either real NVML (nvml.New) or a simulated machine built on go-nvml's
// mocks (see NewSimulated).
package gpu

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU is the static description of one GPU.
type GPU struct {
	Index        int
	UUID         string
	Model        string
	MemoryMiB    uint64
	ComputeMajor int
	ComputeMinor int
	Architecture string
	PCIBusID     string
	// Optional facts; zero when NVML does not report them.
	PCIBandwidthMBps int
	PowerLimitW      int
	CoresClockMHz    int
	MemoryClockMHz   int
	BAR1MiB          uint64
	CUDACores        int
	// MIG is true when MIG mode is enabled: the GPU itself is not offered,
	// its MIG devices are.
	MIG        bool
	MIGDevices []MIGDevice
	// Memory is what the GPU reports about uncorrectable memory errors.
	Memory MemoryHealth
	// Err is set when the GPU answered with an error; it is then listed
	// unhealthy with this reason.
	Err error
}

// ComputeCapability returns "major.minor", e.g. "9.0".
func (g GPU) ComputeCapability() string {
	return fmt.Sprintf("%d.%d", g.ComputeMajor, g.ComputeMinor)
}

// Inventory is the result of one fingerprint.
type Inventory struct {
	DriverVersion string
	CUDAVersion   string // e.g. "12.4"
	GPUs          []GPU
}

// Source reads GPUs through an nvml.Interface. It is safe for concurrent
// use.
type Source struct {
	mu     sync.Mutex
	lib    nvml.Interface
	inited bool
	xid    *xidWatch // the running Xid watch (WatchXid), nil before
}

// NewSource wraps lib. Nothing is called until Inventory or Stats.
func NewSource(lib nvml.Interface) *Source { return &Source{lib: lib} }

// ErrInit wraps NVML initialization failures.
var ErrInit = errors.New("NVML failed to initialize")

// init calls nvml Init once it succeeds; a failure is retried on the next
// call.
func (s *Source) init() error {
	if s.inited {
		return nil
	}
	ret := s.lib.Init()
	if ret != nvml.SUCCESS {
		hint := ""
		if ret == nvml.ERROR_LIBRARY_NOT_FOUND {
			hint = " (libnvidia-ml.so.1 not found: is the NVIDIA driver installed? use backend = \"simulated\" on machines without GPUs)"
		}
		return fmt.Errorf("%w: %v%s", ErrInit, ret, hint)
	}
	s.inited = true
	return nil
}

// Close stops the Xid watch and shuts NVML down if it was initialized.
// It does not wait for the watch's last wait (at most half a second): NVML
// is shut down after it.
func (s *Source) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	lib, inited := s.lib, s.inited
	s.inited = false
	s.stopXid(func() {
		if inited {
			lib.Shutdown()
		}
	})
}

// Inventory lists the GPUs. An error means nothing could be listed (NVML
// does not initialize or cannot count devices); a single failing GPU is
// returned with its Err set instead.
func (s *Source) Inventory() (Inventory, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.init(); err != nil {
		return Inventory{}, err
	}
	var inv Inventory
	if v, ret := s.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	if v, ret := s.lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS && v > 0 {
		inv.CUDAVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		// NVML may have been unloaded under us (driver reload): init again
		// next time, and watch Xid errors again after that.
		s.stopXid(func() {})
		s.inited = false
		return Inventory{}, fmt.Errorf("NVML could not count GPUs: %v", ret)
	}
	for i := 0; i < n; i++ {
		inv.GPUs = append(inv.GPUs, s.describe(i))
	}
	return inv, nil
}

// describe reads GPU i: its identity and memory (a failure sets Err), then
// the optional facts.
func (s *Source) describe(i int) GPU {
	g := GPU{Index: i}
	d, ret := s.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		g.Err = fmt.Errorf("GPU %d: get handle: %v", i, ret)
		return g
	}
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		g.Err = fmt.Errorf("GPU %d: read UUID: %v", i, ret)
		return g
	}
	if g.Model, ret = d.GetName(); ret != nvml.SUCCESS {
		g.Err = fmt.Errorf("GPU %s: read name: %v", g.UUID, ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		g.Err = fmt.Errorf("GPU %s: read memory: %v", g.UUID, ret)
	}
	g.MemoryMiB = mem.Total >> 20
	g.ComputeMajor, g.ComputeMinor, _ = d.GetCudaComputeCapability()
	if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
		g.PCIBusID = busID(pci)
	}
	cur, _, ret := d.GetMigMode()
	g.MIG = ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE
	if g.MIG {
		g.MIGDevices = migDevices(d)
	}
	if arch, ret := d.GetArchitecture(); ret == nvml.SUCCESS {
		g.Architecture = archName(arch)
	}
	describeLimits(d, &g)
	g.Memory = readMemoryHealth(d)
	return g
}

// describeLimits reads the facts NVML may not report (zero when it does
// not): PCIe bandwidth, power limit, clocks, BAR1 size and core count.
func describeLimits(d nvml.Device, g *GPU) {
	gen, r1 := d.GetMaxPcieLinkGeneration()
	width, r2 := d.GetMaxPcieLinkWidth()
	if r1 == nvml.SUCCESS && r2 == nvml.SUCCESS {
		g.PCIBandwidthMBps = pcieLaneMBps(gen) * width
	}
	if mw, ret := d.GetPowerManagementLimit(); ret == nvml.SUCCESS {
		g.PowerLimitW = int(mw / 1000)
	}
	if mhz, ret := d.GetMaxClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		g.CoresClockMHz = int(mhz)
	}
	if mhz, ret := d.GetMaxClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		g.MemoryClockMHz = int(mhz)
	}
	if bar1, ret := d.GetBAR1MemoryInfo(); ret == nvml.SUCCESS {
		g.BAR1MiB = bar1.Bar1Total >> 20
	}
	if c, ret := d.GetNumGpuCores(); ret == nvml.SUCCESS {
		g.CUDACores = c
	}
}

func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	if b.Len() > 0 {
		return b.String()
	}
	if p.Domain|p.Bus|p.Device != 0 {
		return fmt.Sprintf("%08x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
	}
	return ""
}

// pcieLaneMBps is the usable bandwidth of one PCIe lane per generation.
func pcieLaneMBps(gen int) int {
	switch gen {
	case 1:
		return 250
	case 2:
		return 500
	case 3:
		return 985
	case 4:
		return 1969
	case 5:
		return 3938
	case 6:
		return 7563
	}
	return 0
}

func archName(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_KEPLER:
		return "kepler"
	case nvml.DEVICE_ARCH_MAXWELL:
		return "maxwell"
	case nvml.DEVICE_ARCH_PASCAL:
		return "pascal"
	case nvml.DEVICE_ARCH_VOLTA:
		return "volta"
	case nvml.DEVICE_ARCH_TURING:
		return "turing"
	case nvml.DEVICE_ARCH_AMPERE:
		return "ampere"
	case nvml.DEVICE_ARCH_ADA:
		return "ada"
	case nvml.DEVICE_ARCH_HOPPER:
		return "hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "blackwell"
	}
	return ""
}
