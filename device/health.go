package device

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/device/gpu"
)

// Health beyond NVML call failures: critical Xid errors, reported by the
// GPU's event set (xidMarks), and uncorrectable memory errors, read at
// every fingerprint (memoryFault).

// xidName describes the Xid errors marked critical by default.
var xidName = map[uint64]string{
	48: "double-bit ECC error",
	62: "internal micro-controller halt",
	63: "ECC page retirement or row remapping event",
	64: "ECC page retirement or row remapping failure",
	74: "NVLink error",
	79: "GPU has fallen off the bus",
}

// xidKey names what an Xid error is about: a GPU (gi and ci -1) or one of
// its MIG devices.
type xidKey struct {
	uuid   string
	gi, ci int
}

// xidMarks are the critical Xid errors seen, which keep their GPU (or MIG
// device) unhealthy until the plugin restarts: the GPU needs a reset,
// which NVML does not announce. It has its own lock, because the Xid watch
// reports into it while the hardware lock may be held by a reset that
// waits for the watch to stop.
type xidMarks struct {
	mu    sync.Mutex
	byKey map[xidKey]string
}

// add records a critical Xid error and returns its reason, or "" when the
// GPU (or MIG device) was marked already.
func (x *xidMarks) add(e gpu.XidEvent, at time.Time) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := xidKey{e.UUID, e.GPUInstance, e.ComputeInstance}
	if _, ok := x.byKey[k]; ok {
		return ""
	}
	what := ""
	if n := xidName[e.Xid]; n != "" {
		what = " (" + n + ")"
	}
	r := fmt.Sprintf("gpushare: critical Xid %d%s at %s; unhealthy until the plugin restarts (reset the GPU, then restart the Nomad client)",
		e.Xid, what, at.UTC().Format(time.RFC3339))
	if x.byKey == nil {
		x.byKey = map[xidKey]string{}
	}
	x.byKey[k] = r
	return r
}

// apply marks unhealthy, in a copy of the hardware state, the GPUs and MIG
// devices with critical Xid errors. An error about a MIG device that is no
// longer listed marks its GPU.
func (x *xidMarks) apply(g *hwGPU) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.byKey) == 0 {
		return
	}
	if r := x.byKey[xidKey{g.UUID, -1, -1}]; r != "" && g.healthy {
		g.healthy, g.reason = false, r
	}
	if !g.MIG {
		return
	}
	g.MIGDevices = append([]gpu.MIGDevice(nil), g.MIGDevices...)
	listed := map[xidKey]bool{}
	for i := range g.MIGDevices {
		m := &g.MIGDevices[i]
		k := xidKey{g.UUID, m.GPUInstance, m.ComputeInstance}
		listed[k] = true
		if r := x.byKey[k]; r != "" && m.Err == nil {
			m.Err = errors.New(r[len("gpushare: "):])
		}
	}
	for k, r := range x.byKey {
		if k.uuid == g.UUID && k.gi >= 0 && !listed[k] && g.healthy {
			g.healthy, g.reason = false, r
		}
	}
}

// memoryFault says why a GPU's memory makes it unhealthy, "" when it does
// not: uncorrectable ECC errors since the driver loaded (the volatile
// count, which a GPU reset clears), or, where only the lifetime count is
// reported, uncorrectable errors since the plugin first saw the GPU (base
// holds the count first seen, by UUID), or a failed row remapping.
func memoryFault(g gpu.GPU, base map[string]uint64) string {
	m := g.Memory
	switch {
	case m.RemapFailure:
		return "gpushare: row remapping failed: the GPU has a memory error it could not retire"
	case m.UncorrectedVolatile != nil && *m.UncorrectedVolatile > 0:
		return fmt.Sprintf("gpushare: %d uncorrectable ECC errors since the driver loaded; unhealthy until the GPU is reset", *m.UncorrectedVolatile)
	case m.UncorrectedVolatile == nil && m.UncorrectedAggregate != nil:
		first, ok := base[g.UUID]
		if !ok {
			base[g.UUID] = *m.UncorrectedAggregate
			return ""
		}
		if n := *m.UncorrectedAggregate - first; *m.UncorrectedAggregate > first {
			return fmt.Sprintf("gpushare: %d uncorrectable ECC errors since the plugin started (lifetime count)", n)
		}
	}
	return ""
}
