package device

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device/ids"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// Environment variables set by Reserve.
const (
	EnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCudaVisibleDevices   = "CUDA_VISIBLE_DEVICES"
	EnvMemoryLimitMiB       = "GPUSHARE_MEMORY_LIMIT_MIB"
	EnvFraction             = "GPUSHARE_FRACTION"
	EnvTFAllowGrowth        = "TF_FORCE_GPU_ALLOW_GROWTH"
	EnvXLAPreallocate       = "XLA_PYTHON_CLIENT_PREALLOCATE"
	EnvXLAMemFraction       = "XLA_PYTHON_CLIENT_MEM_FRACTION"
	EnvMPSPipeDirectory     = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSPinnedMemLimit    = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSThreadPercentage  = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
)

type gpuInfo struct {
	model     string
	memMiB    uint64
	shareable bool
}

// reserveView is an immutable snapshot that Reserve reads without locks or
// I/O: the GPUs and their usage as last read from Nomad.
type reserveView struct {
	gpus   map[string]gpuInfo
	whole  map[string]bool // held whole by a live allocation
	shares map[string]int  // shares held by live allocations
	mps    bool
	mpsDir string
}

// pendingUse records reservations made since the last Nomad read, so two
// Reserve calls between reads cannot give one GPU both whole and shared.
type pendingUse struct {
	whole, share bool
	at           time.Time
}

// dropPending forgets reservations that a Nomad read begun after them
// accounts for. p.mu must be held.
func (p *Plugin) dropPending(readStarted time.Time) {
	p.pendMu.Lock()
	defer p.pendMu.Unlock()
	for u, pu := range p.pending {
		if pu.at.Before(readStarted) {
			delete(p.pending, u)
		}
	}
}

// Reserve validates a binding of device instances to a task and returns how
// to expose the GPU to it. All instances must be whole GPUs, or shares of a
// single GPU. A whole GPU that has share tenants, or shares of a GPU held
// whole, are refused: a placement planned before a switch may still land on
// a withdrawn instance, and it must not give one GPU both ways.
func (p *Plugin) Reserve(deviceIDs []string) (*dev.ContainerReservation, error) {
	if len(deviceIDs) == 0 {
		return &dev.ContainerReservation{}, nil
	}
	v := p.view.Load()
	if v == nil {
		return nil, fmt.Errorf("gpushare: cannot reserve %s: no GPU fingerprinted yet", strings.Join(deviceIDs, ", "))
	}
	var unknown, wholeIDs, shareIDs []string
	gpus := map[string][]string{} // UUID -> share IDs
	seen := make(map[string]bool, len(deviceIDs))
	var shareUUID string
	for _, raw := range deviceIDs {
		if seen[raw] {
			return nil, fmt.Errorf("gpushare: device ID %s requested twice", raw)
		}
		seen[raw] = true
		id, err := ids.Parse(raw)
		if err != nil {
			unknown = append(unknown, strconv.Quote(raw))
			continue
		}
		info, ok := v.gpus[id.UUID]
		if !ok || id.IsShare && !info.shareable {
			unknown = append(unknown, raw)
			continue
		}
		if id.IsShare {
			shareIDs = append(shareIDs, raw)
			gpus[id.UUID] = append(gpus[id.UUID], raw)
			shareUUID = id.UUID
		} else {
			wholeIDs = append(wholeIDs, raw)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("gpushare: unknown device IDs: %s", strings.Join(unknown, ", "))
	}
	if len(wholeIDs) > 0 && len(shareIDs) > 0 {
		return nil, fmt.Errorf("gpushare: a reservation mixes whole GPUs (%s) and GPU shares (%s); request either nvidia/gpu or nvidia/gpu-share",
			strings.Join(wholeIDs, ", "), strings.Join(shareIDs, ", "))
	}
	if len(gpus) > 1 {
		parts := make([]string, 0, len(gpus))
		for u, s := range gpus {
			parts = append(parts, fmt.Sprintf("%s: %s", u, strings.Join(s, ", ")))
		}
		sort.Strings(parts)
		return nil, fmt.Errorf("gpushare: shares of one reservation must come from one GPU, got %s", strings.Join(parts, "; "))
	}

	now := p.now()
	p.pendMu.Lock()
	if len(shareIDs) > 0 {
		if v.whole[shareUUID] || p.pending[shareUUID] != nil && p.pending[shareUUID].whole {
			p.pendMu.Unlock()
			return nil, fmt.Errorf("gpushare: refusing shares %s: GPU %s is held whole by another allocation", strings.Join(shareIDs, ", "), shareUUID)
		}
		pu := p.pending[shareUUID]
		if pu == nil {
			pu = &pendingUse{}
			p.pending[shareUUID] = pu
		}
		pu.share, pu.at = true, now
	} else {
		for _, u := range wholeIDs {
			if v.shares[u] > 0 || p.pending[u] != nil && p.pending[u].share {
				p.pendMu.Unlock()
				return nil, fmt.Errorf("gpushare: refusing whole GPU %s: it has share tenants (%d shares held)", u, v.shares[u])
			}
		}
		for _, u := range wholeIDs {
			pu := p.pending[u]
			if pu == nil {
				pu = &pendingUse{}
				p.pending[u] = pu
			}
			pu.whole, pu.at = true, now
		}
	}
	p.pendMu.Unlock()

	if len(wholeIDs) > 0 {
		list := strings.Join(wholeIDs, ",")
		return &dev.ContainerReservation{Envs: map[string]string{
			EnvNvidiaVisibleDevices: list,
			EnvCudaVisibleDevices:   list,
		}}, nil
	}
	return shareReservation(v, shareUUID, len(shareIDs)), nil
}

func shareReservation(v *reserveView, uuid string, k int) *dev.ContainerReservation {
	info := v.gpus[uuid]
	frac := strconv.FormatFloat(float64(k)/ids.SharesPerGPU, 'f', -1, 64)
	memMiB := info.memMiB * uint64(k) / ids.SharesPerGPU
	env := map[string]string{
		EnvNvidiaVisibleDevices: uuid,
		EnvCudaVisibleDevices:   uuid,
		EnvMemoryLimitMiB:       strconv.FormatUint(memMiB, 10),
		EnvFraction:             frac,
		EnvTFAllowGrowth:        "true",
		EnvXLAPreallocate:       "false",
		EnvXLAMemFraction:       frac,
	}
	r := &dev.ContainerReservation{Envs: env}
	if v.mps {
		env[EnvMPSPipeDirectory] = v.mpsDir
		env[EnvMPSPinnedMemLimit] = fmt.Sprintf("%s=%dM", uuid, memMiB)
		env[EnvMPSThreadPercentage] = strconv.Itoa(k)
		r.Mounts = []*dev.Mount{{TaskPath: v.mpsDir, HostPath: v.mpsDir}}
	}
	return r
}
