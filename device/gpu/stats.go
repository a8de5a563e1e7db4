package gpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Stats are live readings of one GPU or MIG device. Pointers are nil where
// NVML gives no value (a MIG device reports its memory only).
type Stats struct {
	UUID         string
	MemUsedMiB   uint64
	MemTotalMiB  uint64
	GPUUtilPct   *uint32
	MemUtilPct   *uint32
	EncoderPct   *uint32
	DecoderPct   *uint32
	TemperatureC *uint32
	PowerW       *float64
	BAR1UsedMiB  *uint64
	BAR1TotalMiB *uint64
	ECCCorrected ECCCounts
	Err          error
}

// ECCCounts are corrected ECC errors since the driver loaded, by memory
// location; nil where NVML does not report them.
type ECCCounts struct {
	L1Cache, L2Cache, Device *uint64
}

// Stats reads live statistics of every GPU, and of the MIG devices of
// MIG-enabled GPUs, keyed by UUID.
func (s *Source) Stats() (map[string]Stats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.init(); err != nil {
		return nil, err
	}
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML could not count GPUs: %v", ret)
	}
	out := make(map[string]Stats, n)
	for i := 0; i < n; i++ {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		out[uuid] = readStats(uuid, d)
		if cur, _, ret := d.GetMigMode(); ret == nvml.SUCCESS && cur == nvml.DEVICE_MIG_ENABLE {
			readMIGStats(d, out)
		}
	}
	return out, nil
}

// readStats reads one GPU's live statistics.
func readStats(uuid string, d nvml.Device) Stats {
	st := Stats{UUID: uuid}
	readMemory(d, &st)
	if ut, ret := d.GetUtilizationRates(); ret == nvml.SUCCESS {
		st.GPUUtilPct, st.MemUtilPct = &ut.Gpu, &ut.Memory
	}
	if u, _, ret := d.GetEncoderUtilization(); ret == nvml.SUCCESS {
		st.EncoderPct = &u
	}
	if u, _, ret := d.GetDecoderUtilization(); ret == nvml.SUCCESS {
		st.DecoderPct = &u
	}
	if t, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		st.TemperatureC = &t
	}
	if mw, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
		w := float64(mw) / 1000
		st.PowerW = &w
	}
	if b, ret := d.GetBAR1MemoryInfo(); ret == nvml.SUCCESS {
		used, total := b.Bar1Used>>20, b.Bar1Total>>20
		st.BAR1UsedMiB, st.BAR1TotalMiB = &used, &total
	}
	st.ECCCorrected = ECCCounts{
		L1Cache: eccCount(d, nvml.MEMORY_LOCATION_L1_CACHE),
		L2Cache: eccCount(d, nvml.MEMORY_LOCATION_L2_CACHE),
		Device:  eccCount(d, nvml.MEMORY_LOCATION_DEVICE_MEMORY),
	}
	return st
}

// readMIGStats reads the memory of a MIG-enabled GPU's MIG devices (NVML
// reports no utilization, temperature or power for them).
func readMIGStats(d nvml.Device, out map[string]Stats) {
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return
	}
	for j := 0; j < n; j++ {
		md, ret := d.GetMigDeviceHandleByIndex(j)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := md.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		st := Stats{UUID: uuid}
		readMemory(md, &st)
		out[uuid] = st
	}
}

func readMemory(d nvml.Device, st *Stats) {
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		st.Err = fmt.Errorf("read memory: %v", ret)
		return
	}
	st.MemUsedMiB, st.MemTotalMiB = mem.Used>>20, mem.Total>>20
}

// eccCount reads the corrected volatile ECC count at a location.
func eccCount(d nvml.Device, loc nvml.MemoryLocation) *uint64 {
	n, ret := d.GetMemoryErrorCounter(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC, loc)
	if ret != nvml.SUCCESS {
		return nil
	}
	return &n
}
