package gpu

import (
	"crypto/sha256"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// go-nvml's mock machines create GPU instances but have no MIG devices: the
// calls a MIG-aware reader makes (GetMaxMigDeviceCount,
// GetMigDeviceHandleByIndex and the MIG device's own GetUUID, GetName,
// GetMemoryInfo, GetGpuInstanceId, GetComputeInstanceId) are filled in
// here.

// maxMIGDevices is what GetMaxMigDeviceCount answers (seven 1-slice
// instances on an A100 or H100).
const maxMIGDevices = 7

// SetMIG enables or disables MIG mode on GPU i. Disabling it removes the
// GPU's MIG devices, as NVML requires them destroyed first.
func (s *Simulated) SetMIG(i int, on bool) {
	mode := nvml.DEVICE_MIG_DISABLE
	if on {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	s.devs[i].SetMigMode(mode)
	if !on {
		s.mu.Lock()
		delete(s.mig, i)
		s.mu.Unlock()
	}
}

// AddMIGDevice creates on GPU i, which must be in MIG mode, a GPU instance
// of the given profile (nvml.GPU_INSTANCE_PROFILE_*) with one compute
// instance spanning it, and returns the UUID of the MIG device CUDA sees.
// UUIDs are stable for a seed, GPU and position.
func (s *Simulated) AddMIGDevice(i int, giProfile int) (string, error) {
	d := s.devs[i]
	if cur, _, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
		return "", fmt.Errorf("GPU %d is not in MIG mode", i)
	}
	info, ret := d.GetGpuInstanceProfileInfo(giProfile)
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("GPU %d: MIG profile %d: %v", i, giProfile, ret)
	}
	gi, ret := d.CreateGpuInstance(&info)
	if ret != nvml.SUCCESS {
		return "", fmt.Errorf("GPU %d: create GPU instance: %v", i, ret)
	}
	giInfo, _ := gi.GetInfo()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.mig[i]) >= maxMIGDevices {
		return "", fmt.Errorf("GPU %d already has %d MIG devices", i, maxMIGDevices)
	}
	uuid := migUUID(s.seed, i, len(s.mig[i]))
	s.mig[i] = append(s.mig[i], s.migDevice(i, d, uuid, info, int(giInfo.Id)))
	return uuid, nil
}

// migDevice is the mock of one MIG device of GPU i.
func (s *Simulated) migDevice(i int, parent *server.Device, uuid string, info nvml.GpuInstanceProfileInfo, gi int) *mock.Device {
	name := fmt.Sprintf("%s MIG %s", parent.Config.Name, migProfileName(info))
	return &mock.Device{
		GetUUIDFunc: func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
		GetNameFunc: func() (string, nvml.Return) { return name, nvml.SUCCESS },
		GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
			if r := s.lostRet(i); r != nvml.SUCCESS {
				return nvml.Memory{}, r
			}
			total := info.MemorySizeMB << 20
			return nvml.Memory{Total: total, Free: total}, nvml.SUCCESS
		},
		GetGpuInstanceIdFunc:                   func() (int, nvml.Return) { return gi, nvml.SUCCESS },
		GetComputeInstanceIdFunc:               func() (int, nvml.Return) { return 0, nvml.SUCCESS },
		IsMigDeviceHandleFunc:                  func() (bool, nvml.Return) { return true, nvml.SUCCESS },
		GetDeviceHandleFromMigDeviceHandleFunc: func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS },
	}
}

// fillMIG sets GPU i's calls that list its MIG devices.
func (s *Simulated) fillMIG(i int, d *server.Device) {
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return maxMIGDevices, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if j < 0 || j >= maxMIGDevices {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		if j >= len(s.mig[i]) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return s.mig[i][j], nvml.SUCCESS
	}
}

// migProfileName names a GPU instance profile as NVML does: slices, then
// memory rounded up to GB ("1g.5gb" for 4864 MB).
func migProfileName(info nvml.GpuInstanceProfileInfo) string {
	return fmt.Sprintf("%dg.%dgb", info.SliceCount, (info.MemorySizeMB+1023)/1024)
}

func migUUID(seed string, i, j int) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s/%d/mig/%d", seed, i, j)))
	return fmt.Sprintf("MIG-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
