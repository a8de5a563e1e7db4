package device

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device/dynamic"
	"github.com/gpushare/nomad-gpushare/device/partition"
	"github.com/gpushare/nomad-gpushare/vocab"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// Environment variables set by Reserve.
const (
	EnvNvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvCudaVisibleDevices   = "CUDA_VISIBLE_DEVICES"
	EnvMemoryLimitMiB       = "GPUSHARE_MEMORY_LIMIT_MIB"
	EnvFraction             = "GPUSHARE_FRACTION"
	EnvLimitFraction        = "GPUSHARE_LIMIT_FRACTION"
	EnvRequestMiB           = "GPUSHARE_REQUEST_MIB"
	EnvLimitMiB             = "GPUSHARE_LIMIT_MIB"
	EnvHomeGPU              = "GPUSHARE_HOME_GPU"
	EnvTFAllowGrowth        = "TF_FORCE_GPU_ALLOW_GROWTH"
	EnvXLAPreallocate       = "XLA_PYTHON_CLIENT_PREALLOCATE"
	EnvXLAMemFraction       = "XLA_PYTHON_CLIENT_MEM_FRACTION"
	EnvMPSPipeDirectory     = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSPinnedMemLimit    = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	EnvMPSThreadPercentage  = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
	// EnvIsolation says what enforces a share's or a MIG device's limits:
	// IsolationMPS, IsolationNone (advisory) or IsolationMIG.
	EnvIsolation = "GPUSHARE_ISOLATION"
)

// ReserveWait bounds how long Reserve waits, after a plugin start or a
// reconfiguration, for the first read of the node's allocations: until
// then it cannot tell which GPUs are held, and it refuses rather than
// guess.
const ReserveWait = 10 * time.Second

// gpuInfo is what Reserve needs to know of a GPU or of a MIG device.
type gpuInfo struct {
	memMiB    uint64
	shareable bool
	// family is where the GPU is offered now (Unknown: nowhere); a MIG
	// device is always offered whole.
	family partition.Mode
	// unhealthy is the reason the hardware is unhealthy, "" when healthy.
	unhealthy string
	// migParent is set for a MIG-enabled GPU, which is offered only as its
	// MIG devices; migGroups names their device groups. mig is set for a
	// MIG device.
	migParent bool
	migGroups string
	mig       bool
}

// reserveView is an immutable snapshot of the published GPUs and the MPS
// settings, which Reserve reads without locks or I/O.
type reserveView struct {
	gpus   map[string]gpuInfo
	iso    shareIsolation
	mpsDir string
}

func newReserveView(hw hwView, pubs map[string]partition.Publication, iso shareIsolation, s settings) *reserveView {
	v := &reserveView{gpus: make(map[string]gpuInfo, len(hw.gpus)), iso: iso, mpsDir: s.MPSPipeDirectory}
	for i := range hw.gpus {
		g := &hw.gpus[i]
		if g.MIG {
			v.addMIG(g)
			continue
		}
		info := gpuInfo{memMiB: g.MemoryMiB, shareable: true, family: pubs[g.UUID].Family}
		if !g.healthy {
			info.unhealthy = g.reason
		}
		v.gpus[g.UUID] = info
	}
	return v
}

// addMIG adds a MIG-enabled GPU, which is not to be reserved itself, and
// its MIG devices, which are reserved like whole GPUs.
func (v *reserveView) addMIG(g *hwGPU) {
	var names []string
	for _, m := range g.MIGDevices {
		info := gpuInfo{memMiB: m.MemoryMiB, family: partition.Whole, mig: true}
		if ok, reason := migHealth(g, m); !ok {
			info.unhealthy = reason
		}
		v.gpus[m.UUID] = info
		if !slices.Contains(names, strconv.Quote(m.Name)) {
			names = append(names, strconv.Quote(m.Name))
		}
	}
	v.gpus[g.UUID] = gpuInfo{migParent: true, migGroups: strings.Join(names, ", ")}
}

// binding is a Reserve request that names known instances: whole GPUs, or
// shares of one GPU.
type binding struct {
	whole    []string // whole GPU UUIDs
	shareGPU string   // the GPU of the shares
	shares   []string // share instance IDs
}

// gpuIDs are the GPUs a binding names.
func (b binding) gpuIDs() []string {
	if b.shareGPU != "" {
		return []string{b.shareGPU}
	}
	return b.whole
}

// Reserve validates a binding of device instances to a task and returns how
// to expose the GPU to it, in named steps: wait for knowledge of the
// node's allocations (awaitRead), check the IDs (bind) and the hardware
// (healthy), then claim the GPUs against what allocations hold (claim).
// All instances must be whole GPUs, or shares of a single GPU. A whole GPU
// that has share tenants, or shares of a GPU held whole, are refused: a
// placement planned before a switch may still land on a withdrawn
// instance, and it must not give one GPU both ways.
func (p *Plugin) Reserve(deviceIDs []string) (*dev.ContainerReservation, error) {
	if len(deviceIDs) == 0 {
		return &dev.ContainerReservation{}, nil
	}
	if p.disabled.Load() {
		return nil, dev.ErrPluginDisabled
	}
	if err := p.holdings.awaitRead(p.reserveWait); err != nil {
		return nil, fmt.Errorf("gpushare: refusing %s: %w", strings.Join(deviceIDs, ", "), err)
	}
	v := p.pub.view.Load()
	if v == nil {
		return nil, fmt.Errorf("gpushare: cannot reserve %s: no GPU fingerprinted yet", strings.Join(deviceIDs, ", "))
	}
	b, err := v.bind(deviceIDs)
	if err != nil {
		return nil, err
	}
	if err := v.healthy(b); err != nil {
		return nil, err
	}
	if err := p.holdings.claim(b, v, p.now()); err != nil {
		return nil, err
	}
	if len(b.whole) > 0 {
		if err := p.tenancy.ClearForWhole(p.ctx, b.whole); err != nil {
			return nil, err
		}
		return v.wholeReservation(b.whole), nil
	}
	sb, err := p.tenancy.BindShare(p.ctx, b.shareGPU, b.shares)
	if err != nil {
		return nil, err
	}
	return shareReservation(v, sb), nil
}

// wholeReservation exposes whole GPUs or MIG devices; MIG devices are
// isolated by the hardware.
func (v *reserveView) wholeReservation(uuids []string) *dev.ContainerReservation {
	list := strings.Join(uuids, ",")
	env := map[string]string{EnvNvidiaVisibleDevices: list, EnvCudaVisibleDevices: list}
	if v.gpus[uuids[0]].mig {
		env[EnvIsolation] = IsolationMIG
	}
	return &dev.ContainerReservation{Envs: env}
}

// healthy refuses a binding to a GPU whose hardware is unhealthy (lost,
// failing, or with critical errors), and shares while MPS should isolate
// them and cannot, with the reason.
func (v *reserveView) healthy(b binding) error {
	for _, id := range b.gpuIDs() {
		if r := v.gpus[id].unhealthy; r != "" {
			return fmt.Errorf("gpushare: refusing GPU %s: it is unhealthy: %s", id, r)
		}
	}
	if b.shareGPU != "" && v.iso.down != "" {
		return fmt.Errorf("gpushare: refusing shares of GPU %s: %s", b.shareGPU, v.iso.down)
	}
	return nil
}

// bind checks that the instances are known, named once, and either whole
// GPUs or shares of one GPU.
func (v *reserveView) bind(deviceIDs []string) (binding, error) {
	var b binding
	var unknown []string
	byGPU := map[string][]string{} // GPU UUID -> its share IDs
	seen := make(map[string]bool, len(deviceIDs))
	for _, raw := range deviceIDs {
		if seen[raw] {
			return b, fmt.Errorf("gpushare: device ID %s requested twice", raw)
		}
		seen[raw] = true
		id, err := vocab.Parse(raw)
		if err != nil {
			unknown = append(unknown, strconv.Quote(raw))
			continue
		}
		info, ok := v.gpus[id.UUID]
		switch {
		case ok && info.migParent:
			return b, fmt.Errorf("gpushare: GPU %s has MIG enabled: it is offered only as its MIG devices (device groups: %s)", id.UUID, orNone(info.migGroups))
		case !ok || id.IsShare && !info.shareable:
			unknown = append(unknown, raw)
		case id.IsShare:
			b.shares = append(b.shares, raw)
			byGPU[id.UUID] = append(byGPU[id.UUID], raw)
			b.shareGPU = id.UUID
		default:
			b.whole = append(b.whole, raw)
		}
	}
	switch {
	case len(unknown) > 0:
		return b, fmt.Errorf("gpushare: unknown device IDs: %s", strings.Join(unknown, ", "))
	case len(b.whole) > 0 && len(b.shares) > 0:
		return b, fmt.Errorf("gpushare: a reservation mixes whole GPUs (%s) and GPU shares (%s); request either nvidia/gpu or nvidia/gpu-share",
			strings.Join(b.whole, ", "), strings.Join(b.shares, ", "))
	case len(byGPU) > 1:
		parts := make([]string, 0, len(byGPU))
		for u, s := range byGPU {
			parts = append(parts, fmt.Sprintf("%s: %s", u, strings.Join(s, ", ")))
		}
		sort.Strings(parts)
		return b, fmt.Errorf("gpushare: shares of one reservation must come from one GPU, got %s", strings.Join(parts, "; "))
	}
	return b, nil
}

func orNone(s string) string {
	if s == "" {
		return "none, it has no MIG device"
	}
	return s
}

// shareReservation tells a share task its GPU (where the node-level
// scheduler runs it), its request and limit as fractions and MiB, and
// framework hints; with MPS the limit is the hard cap.
func shareReservation(v *reserveView, sb dynamic.ShareBinding) *dev.ContainerReservation {
	info := v.gpus[sb.GPU]
	frac := strconv.FormatFloat(float64(sb.Request)/vocab.UnitsPerGPU, 'f', -1, 64)
	limFrac := strconv.FormatFloat(float64(sb.Limit)/vocab.UnitsPerGPU, 'f', -1, 64)
	reqMiB := info.memMiB * uint64(sb.Request) / vocab.UnitsPerGPU
	limMiB := info.memMiB * uint64(sb.Limit) / vocab.UnitsPerGPU
	env := map[string]string{
		EnvNvidiaVisibleDevices: sb.GPU,
		EnvCudaVisibleDevices:   sb.GPU,
		EnvMemoryLimitMiB:       strconv.FormatUint(limMiB, 10),
		EnvFraction:             frac,
		EnvLimitFraction:        limFrac,
		EnvRequestMiB:           strconv.FormatUint(reqMiB, 10),
		EnvLimitMiB:             strconv.FormatUint(limMiB, 10),
		EnvHomeGPU:              sb.Home,
		EnvTFAllowGrowth:        "true",
		EnvXLAPreallocate:       "false",
		EnvXLAMemFraction:       limFrac,
		EnvIsolation:            v.iso.mode(),
	}
	r := &dev.ContainerReservation{Envs: env}
	if v.iso.mps {
		env[EnvMPSPipeDirectory] = v.mpsDir
		env[EnvMPSPinnedMemLimit] = fmt.Sprintf("%s=%dM", sb.GPU, limMiB)
		env[EnvMPSThreadPercentage] = strconv.Itoa(sb.Limit)
		r.Mounts = []*dev.Mount{{TaskPath: v.mpsDir, HostPath: v.mpsDir}}
	}
	return r
}
