package device

import (
	"sort"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/device/gpu"
	hclog "github.com/hashicorp/go-hclog"
)

// hwGPU is one GPU as the hardware last showed it.
type hwGPU struct {
	gpu.GPU
	healthy bool
	reason  string
}

// hardware is what NVML (or the simulated machine) last said about the
// GPUs, and the critical Xid errors it reported. The loop refreshes it;
// publication and Stats read it. mu guards every field below it and is
// held across NVML calls, so the source is never used after reset has
// closed it.
type hardware struct {
	logger hclog.Logger
	// xids are the critical Xid errors seen (own lock).
	xids xidMarks
	// changed gets a token when an Xid error marks a GPU, so that the loop
	// republishes at once.
	changed chan struct{}

	mu  sync.Mutex
	src *gpu.Source
	// sim is the simulated machine behind src, nil on real NVML (tests
	// break its GPUs).
	sim      *gpu.Simulated
	ignored  map[string]bool // GPU UUIDs never offered
	critical map[uint64]bool // Xid errors that mark a GPU unhealthy
	gpus     map[string]*hwGPU
	driver   string
	cuda     string
	// eccBase is the lifetime uncorrectable ECC count first seen, by UUID
	// (see memoryFault).
	eccBase map[string]uint64
	// err is the last inventory error; nil when the last one worked.
	err error
}

// hwConfig is what the hardware reads with: the source, the simulated
// machine behind it (nil on real NVML), the GPUs never offered and the
// critical Xid errors.
type hwConfig struct {
	src      *gpu.Source
	sim      *gpu.Simulated
	ignored  map[string]bool
	critical map[uint64]bool
}

// hwView is a copy of the hardware state for one publication or one stats
// response.
type hwView struct {
	gpus   []hwGPU // in index order
	driver string
	cuda   string
	err    error
}

// reset starts over on a new source, closing the old one (and its Xid
// watch). The Xid errors seen stay: the GPUs still need a reset.
func (h *hardware) reset(c hwConfig) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.src != nil {
		h.src.Close()
	}
	h.src, h.sim, h.ignored, h.critical = c.src, c.sim, c.ignored, c.critical
	h.gpus, h.driver, h.cuda, h.err = map[string]*hwGPU{}, "", "", nil
	h.eccBase = map[string]uint64{}
}

// close shuts the source down.
func (h *hardware) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.src != nil {
		h.src.Close()
	}
}

// simulated returns the simulated machine, nil on real NVML.
func (h *hardware) simulated() *gpu.Simulated {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sim
}

// refresh re-reads the GPUs. When the inventory fails, every known GPU is
// marked unhealthy with the error as the reason (NVML is retried on the
// next refresh, retryEvery later).
func (h *hardware) refresh(retryEvery time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.src == nil {
		return
	}
	inv, err := h.src.Inventory()
	if err != nil {
		h.inventoryFailed(err, retryEvery)
		return
	}
	if h.err != nil {
		h.logger.Info("fingerprinting GPUs works again", "gpus", len(inv.GPUs))
	}
	h.err = nil
	h.driver, h.cuda = inv.DriverVersion, inv.CUDAVersion
	seen := h.update(inv.GPUs)
	h.markMissing(seen, inv.GPUs)
	h.watchXid()
}

// watchXid starts the source's Xid watch when critical Xid errors are
// configured (a no-op while it runs).
func (h *hardware) watchXid() {
	if len(h.critical) == 0 {
		return
	}
	critical := h.critical
	started, unsupported, err := h.src.WatchXid(func(e gpu.XidEvent) { h.onXid(e, critical) })
	switch {
	case err != nil:
		h.logger.Warn("cannot watch Xid errors; GPU health comes from NVML calls and ECC counts only", "error", err)
	case started && len(unsupported) > 0:
		h.logger.Warn("some GPUs cannot report Xid errors", "gpus", unsupported)
	case started:
		h.logger.Debug("watching Xid errors")
	}
}

// onXid records a critical Xid error (runs on the Xid watch's goroutine;
// it takes no lock the hardware holds while stopping the watch).
func (h *hardware) onXid(e gpu.XidEvent, critical map[uint64]bool) {
	if !critical[e.Xid] {
		h.logger.Debug("Xid error (not critical)", "uuid", e.UUID, "xid", e.Xid)
		return
	}
	r := h.xids.add(e, time.Now())
	if r == "" {
		return
	}
	h.logger.Error("critical Xid error: GPU unhealthy", "uuid", e.UUID, "xid", e.Xid, "gpu_instance", e.GPUInstance, "compute_instance", e.ComputeInstance, "reason", r)
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *hardware) inventoryFailed(err error, retryEvery time.Duration) {
	if h.err == nil || h.err.Error() != err.Error() {
		h.logger.Error("fingerprinting GPUs failed; known GPUs are marked unhealthy and NVML is retried", "error", err, "retry_every", retryEvery)
	}
	h.err = err
	for _, g := range h.gpus {
		g.healthy, g.reason = false, "gpushare: "+err.Error()
	}
}

// update records the GPUs of an inventory (ignored ones left out) and
// returns the UUIDs it saw. A failing GPU keeps its last description.
func (h *hardware) update(gpus []gpu.GPU) map[string]bool {
	seen := map[string]bool{}
	for _, g := range gpus {
		if g.UUID == "" || h.ignored[g.UUID] {
			continue
		}
		seen[g.UUID] = true
		old := h.gpus[g.UUID]
		n := described(g, old)
		if f := memoryFault(g, h.eccBase); f != "" && n.healthy {
			n.healthy, n.reason = false, f
		}
		if old == nil || old.healthy != n.healthy || old.reason != n.reason {
			h.logger.Info("GPU", "uuid", g.UUID, "index", g.Index, "model", n.Model, "healthy", n.healthy, "reason", n.reason)
		}
		h.gpus[g.UUID] = n
	}
	return seen
}

// UnknownModel is the model of a GPU whose name NVML could not read and
// that was never described before: its whole device group needs a name
// (Nomad stops a plugin whose fingerprint has a group without one).
const UnknownModel = "unknown-model"

// described is a GPU as an inventory shows it, healthy unless it answered
// with an error. A failing GPU keeps what its last description had and
// this one lacks (memory, name), so that it stays in its device groups.
func described(g gpu.GPU, old *hwGPU) *hwGPU {
	n := &hwGPU{GPU: g, healthy: g.Err == nil}
	if g.Err != nil {
		n.reason = "gpushare: " + g.Err.Error()
		if old != nil && g.MemoryMiB == 0 {
			n.GPU = old.GPU // keep the description of a failing GPU
			n.GPU.Err = g.Err
		}
	}
	switch {
	case n.Model != "":
	case old != nil && old.Model != "":
		n.Model = old.Model
	default:
		n.Model = UnknownModel
	}
	return n
}

// markMissing marks unhealthy the known GPUs an inventory did not list by
// UUID, with the error of their index if it had one.
func (h *hardware) markMissing(seen map[string]bool, gpus []gpu.GPU) {
	byIndex := map[int]gpu.GPU{}
	for _, g := range gpus {
		byIndex[g.Index] = g
	}
	for u, g := range h.gpus {
		if seen[u] {
			continue
		}
		reason := "gpushare: GPU no longer reported by NVML"
		if e := byIndex[g.Index].Err; e != nil {
			reason = "gpushare: " + e.Error()
		}
		if g.healthy || g.reason != reason {
			h.logger.Warn("GPU unhealthy", "uuid", u, "index", g.Index, "reason", reason)
		}
		g.healthy, g.reason = false, reason
	}
}

// view copies the hardware state.
func (h *hardware) view() hwView {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.viewLocked()
}

func (h *hardware) viewLocked() hwView {
	v := hwView{gpus: make([]hwGPU, 0, len(h.gpus)), driver: h.driver, cuda: h.cuda, err: h.err}
	for _, g := range h.gpus {
		c := *g
		h.xids.apply(&c)
		v.gpus = append(v.gpus, c)
	}
	sort.Slice(v.gpus, func(i, j int) bool {
		if v.gpus[i].Index != v.gpus[j].Index {
			return v.gpus[i].Index < v.gpus[j].Index
		}
		return v.gpus[i].UUID < v.gpus[j].UUID
	})
	return v
}

// stats reads the live statistics of the GPUs, with the hardware state
// they belong to.
func (h *hardware) stats() (map[string]gpu.Stats, hwView, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.src == nil {
		return nil, hwView{}, nil
	}
	readings, err := h.src.Stats()
	return readings, h.viewLocked(), err
}

// processes lists every GPU's compute processes (see gpu.Source.Processes).
func (h *hardware) processes(lastSample map[string]uint64) (map[string][]gpu.Process, map[string]error, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.src == nil {
		return nil, nil, nil
	}
	return h.src.Processes(lastSample)
}
