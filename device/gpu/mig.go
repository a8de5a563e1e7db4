package gpu

import (
	"fmt"
	"strings"

	"github.com/gpushare/nomad-gpushare/vocab"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIGDevice is one MIG device of a MIG-enabled GPU: a GPU instance with a
// compute instance, which CUDA sees as a GPU of its own (by its UUID).
type MIGDevice struct {
	// UUID is the MIG device's UUID ("MIG-..."), what
	// NVIDIA_VISIBLE_DEVICES names.
	UUID string
	// Name is NVML's name, the parent's model and the profile, e.g.
	// "NVIDIA A100-SXM4-40GB MIG 1g.5gb".
	Name string
	// Profile is the MIG profile, e.g. "1g.5gb" ("" when the name has
	// none).
	Profile string
	// MemoryMiB is the MIG device's memory.
	MemoryMiB uint64
	// Shares is the part of its GPU the MIG device is, in shares: its
	// profile's compute slices over the GPU's (NVML's maximum MIG device
	// count), rounded down (vocab.MIGShares); 0 when unknown.
	Shares int
	// GPUInstance and ComputeInstance identify it on its parent (Xid
	// events name them).
	GPUInstance, ComputeInstance int
	// Err is set when the MIG device answered with an error.
	Err error
}

// migDevices lists the MIG devices of a MIG-enabled GPU. Slots without a
// device are skipped; a device that fails to describe itself is listed
// with Err (and its UUID when it could be read).
func migDevices(d nvml.Device) []MIGDevice {
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	var out []MIGDevice
	for j := 0; j < n; j++ {
		md, ret := d.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			continue // no handle, so no UUID to list it under
		}
		m, ok := describeMIG(md)
		m.Shares = vocab.MIGShares(vocab.MIGProfileSlices(m.Profile), n)
		if ok {
			out = append(out, m)
		}
	}
	return out
}

// describeMIG reads one MIG device; ok is false when its UUID is
// unreadable (it cannot be named).
func describeMIG(md nvml.Device) (MIGDevice, bool) {
	var m MIGDevice
	var ret nvml.Return
	if m.UUID, ret = md.GetUUID(); ret != nvml.SUCCESS {
		return m, false
	}
	if m.Name, ret = md.GetName(); ret != nvml.SUCCESS {
		m.Err = fmt.Errorf("MIG device %s: read name: %v", m.UUID, ret)
	}
	m.Profile = migProfile(m.Name)
	if mem, ret := md.GetMemoryInfo(); ret == nvml.SUCCESS {
		m.MemoryMiB = mem.Total >> 20
	} else {
		m.Err = fmt.Errorf("MIG device %s: read memory: %v", m.UUID, ret)
	}
	if gi, ret := md.GetGpuInstanceId(); ret == nvml.SUCCESS {
		m.GPUInstance = gi
	}
	if ci, ret := md.GetComputeInstanceId(); ret == nvml.SUCCESS {
		m.ComputeInstance = ci
	}
	return m, true
}

// migProfile returns the profile at the end of a MIG device's name
// ("NVIDIA A100-SXM4-40GB MIG 1g.5gb" -> "1g.5gb").
func migProfile(name string) string {
	i := strings.LastIndex(name, "MIG ")
	if i < 0 {
		return ""
	}
	return strings.TrimSpace(name[i+len("MIG "):])
}
