package device

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/ids"
	"github.com/gpushare/nomad-gpushare/device/partition"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/plugins/base"
	dev "github.com/hashicorp/nomad/plugins/device"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
)

// PluginName is the plugin's name: the binary name in the plugin directory
// and the label of its `plugin` block in the Nomad client config.
const PluginName = "nomad-device-gpushare"

// PluginVersion is reported to Nomad.
const PluginVersion = "v0.1.0"

var pluginInfo = &base.PluginInfoResponse{
	Type:              base.PluginTypeDevice,
	PluginApiVersions: []string{dev.ApiVersion010},
	PluginVersion:     PluginVersion,
	Name:              PluginName,
}

// hwGPU is one GPU as the hardware last showed it.
type hwGPU struct {
	gpu.GPU
	healthy bool
	reason  string
}

// Plugin is the gpushare device plugin. Create it with New.
type Plugin struct {
	logger hclog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	// newLib makes the nvml.Interface of the nvml backend (tests replace it).
	newLib func() nvml.Interface

	mu        sync.Mutex
	cfg       *settings
	src       *gpu.Source
	sim       *gpu.Simulated
	tracker   *alloctrack.Tracker
	machine   *partition.Machine
	hw        map[string]*hwGPU
	driver    string
	cuda      string
	hwErr     error
	hwRead    bool
	blind     bool
	demandErr string // the last demand read error, "-" before the first read
	usage     map[string]*alloctrack.GPUUsage
	groups    []*dev.DeviceGroup
	groupSig  string
	subs      map[chan struct{}]struct{}
	running   bool
	stopLoop  context.CancelFunc

	view    atomic.Pointer[reserveView]
	pendMu  sync.Mutex
	pending map[string]*pendingUse

	now func() time.Time
}

// New returns an unconfigured plugin.
func New(logger hclog.Logger) *Plugin {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Plugin{
		logger:  logger.Named(PluginName),
		ctx:     ctx,
		cancel:  cancel,
		newLib:  func() nvml.Interface { return nvml.New() },
		hw:      map[string]*hwGPU{},
		subs:    map[chan struct{}]struct{}{},
		pending: map[string]*pendingUse{},
		now:     time.Now,

		demandErr: "-",
	}
}

// PluginInfo describes the plugin.
func (p *Plugin) PluginInfo() (*base.PluginInfoResponse, error) { return pluginInfo, nil }

// ConfigSchema returns the configuration schema.
func (p *Plugin) ConfigSchema() (*hclspec.Spec, error) { return configSpec, nil }

// SetConfig validates the configuration and (re)starts the plugin's work.
func (p *Plugin) SetConfig(c *base.Config) error {
	cfg := DefaultConfig()
	if c != nil && len(c.PluginConfig) > 0 {
		if err := base.MsgPackDecode(c.PluginConfig, &cfg); err != nil {
			return fmt.Errorf("gpushare plugin config: cannot decode: %v", err)
		}
	}
	return p.configure(cfg)
}

// configure applies a decoded configuration.
func (p *Plugin) configure(c Config) error {
	s, err := c.validate()
	if err != nil {
		return err
	}
	var lib nvml.Interface
	var sim *gpu.Simulated
	if s.Backend == BackendSimulated {
		sim, err = gpu.NewSimulated(gpu.SimOptions{
			Preset: s.SimulatedPreset, Count: s.SimulatedCount, Model: s.SimulatedModel,
			MemoryMiB: uint64(s.SimulatedMemoryMiB), Seed: s.SimulatedSeed,
		})
		if err != nil {
			return &FieldError{"simulated_preset", err.Error(), "fix the simulated_* settings"}
		}
		lib = sim
	} else {
		lib = p.newLib()
	}
	tr, err := alloctrack.New(alloctrack.Config{Address: s.NomadAddress, Token: s.NomadToken, NodeID: s.NodeID, NodeName: s.NodeName,
		Demand: true, Logger: p.logger.Named("demand")})
	if err != nil {
		return &FieldError{"nomad_address", err.Error(), `use a URL such as "http://127.0.0.1:4646"`}
	}
	p.mu.Lock()
	wasRunning := p.running
	if p.stopLoop != nil {
		p.stopLoop()
		p.stopLoop, p.running = nil, false
	}
	if p.src != nil {
		p.src.Close()
	}
	p.cfg, p.src, p.sim, p.tracker = &s, gpu.NewSource(lib), sim, tr
	p.machine = partition.New(partition.Policy{
		MinIdleShareGPUs: s.MinIdleShareGPUs, ShareHeadroom: s.ShareHeadroom, SettlePeriod: s.settlePeriod,
		DemandHold: demandHold(s.pollPeriod),
	})
	p.hw, p.hwRead, p.usage, p.groups, p.groupSig = map[string]*hwGPU{}, false, nil, nil, "(nothing published)"
	p.mu.Unlock()
	if wasRunning {
		// Reconfigured while streaming: the open streams follow the new loop.
		if err := p.start(); err != nil {
			return err
		}
	}
	p.logger.Info("configured", "backend", s.Backend, "nomad", tr.Address(), "min_idle_share_gpus", s.MinIdleShareGPUs,
		"share_headroom", s.ShareHeadroom, "switch_settle_period", s.settlePeriod, "mps", s.MPSEnabled)
	return nil
}

// start runs the plugin's loop once configured.
func (p *Plugin) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg == nil {
		return errors.New("gpushare plugin is not configured: SetConfig was not called")
	}
	if p.running {
		return nil
	}
	ctx, cancel := context.WithCancel(p.ctx)
	p.running, p.stopLoop = true, cancel
	go p.loop(ctx, *p.cfg)
	return nil
}

// Shutdown stops the plugin's goroutines (tests; the process exit does it in
// production).
func (p *Plugin) Shutdown() {
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.src != nil {
		p.src.Close()
	}
}

func (p *Plugin) loop(ctx context.Context, s settings) {
	p.refreshHardware()
	p.observe(ctx)
	fp := time.NewTicker(s.fingerprintPeriod)
	poll := time.NewTicker(s.pollPeriod)
	defer fp.Stop()
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fp.C:
			p.refreshHardware()
		case <-poll.C:
			p.observe(ctx)
		}
	}
}

// refreshHardware re-reads the GPUs and republishes if anything changed.
func (p *Plugin) refreshHardware() {
	p.mu.Lock()
	src, cfg := p.src, p.cfg
	p.mu.Unlock()
	inv, err := src.Inventory()

	p.mu.Lock()
	defer p.mu.Unlock()
	p.hwRead = true
	if err != nil {
		if p.hwErr == nil || p.hwErr.Error() != err.Error() {
			p.logger.Error("fingerprinting GPUs failed; known GPUs are marked unhealthy and NVML is retried", "error", err, "retry_every", cfg.fingerprintPeriod)
		}
		p.hwErr = err
		for _, g := range p.hw {
			g.healthy, g.reason = false, "gpushare: "+err.Error()
		}
		p.publishLocked()
		return
	}
	if p.hwErr != nil {
		p.logger.Info("fingerprinting GPUs works again", "gpus", len(inv.GPUs))
	}
	p.hwErr = nil
	p.driver, p.cuda = inv.DriverVersion, inv.CUDAVersion
	seen := map[string]bool{}
	byIndex := map[int]gpu.GPU{}
	for _, g := range inv.GPUs {
		byIndex[g.Index] = g
		if g.UUID == "" || cfg.ignored[g.UUID] {
			continue
		}
		seen[g.UUID] = true
		h := &hwGPU{GPU: g, healthy: g.Err == nil}
		if g.Err != nil {
			h.reason = "gpushare: " + g.Err.Error()
			if old := p.hw[g.UUID]; old != nil && g.MemoryMiB == 0 {
				h.GPU = old.GPU // keep the description of a failing GPU
				h.GPU.Err = g.Err
			}
		}
		if old := p.hw[g.UUID]; old == nil || old.healthy != h.healthy || old.reason != h.reason {
			p.logger.Info("GPU", "uuid", g.UUID, "index", g.Index, "model", g.Model, "healthy", h.healthy, "reason", h.reason)
		}
		p.hw[g.UUID] = h
	}
	for u, g := range p.hw {
		if seen[u] {
			continue
		}
		reason := "gpushare: GPU no longer reported by NVML"
		if e := byIndex[g.Index].Err; e != nil {
			reason = "gpushare: " + e.Error()
		}
		if g.healthy || g.reason != reason {
			p.logger.Warn("GPU unhealthy", "uuid", u, "index", g.Index, "reason", reason)
		}
		g.healthy, g.reason = false, reason
	}
	p.publishLocked()
}

// observe reads usage from Nomad and steps the partition machine.
func (p *Plugin) observe(ctx context.Context) {
	p.mu.Lock()
	tr := p.tracker
	p.mu.Unlock()
	snap, err := tr.Read(ctx)

	p.mu.Lock()
	defer p.mu.Unlock()
	o := partition.Observation{At: p.now(), GPUs: map[string]partition.GPUObs{}}
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		if !p.blind {
			p.logger.Error("cannot read GPU usage from the Nomad API; keeping the last known state and switching no GPU until it answers",
				"address", tr.Address(), "error", err)
		} else {
			p.logger.Debug("Nomad API still unreachable", "error", err)
		}
		p.blind = true
		o.Blind = true
	} else {
		if p.blind {
			p.logger.Info("Nomad API reachable again", "address", tr.Address(), "node_id", snap.NodeID)
		}
		p.blind = false
		o.At = snap.Started
		p.usage = snap.GPUs
		switch {
		case snap.DemandErr != nil && p.demandErr != snap.DemandErr.Error():
			p.logger.Warn("cannot read waiting GPU demand from the Nomad API; partitioning by usage alone until it answers", "error", snap.DemandErr)
			p.demandErr = snap.DemandErr.Error()
		case snap.DemandErr == nil && p.demandErr != "":
			p.logger.Info("reading waiting GPU demand from the Nomad API (blocked evaluations)")
			p.demandErr = ""
		}
		o.Demand = append(o.Demand, snap.Demand...)
		if p.logger.IsTrace() {
			p.logger.Trace("usage", "snapshot", snap.String())
		}
	}
	for u, h := range p.hw {
		g := partition.GPUObs{Order: h.Index, Healthy: h.healthy, Shareable: !h.MIG}
		if use := p.usage[u]; use != nil {
			g.WholeHeld = len(use.WholeAllocs) > 0
			g.ShareUnits = use.ShareUnits
			g.ServerWhole, g.ServerShare = use.ServerWhole, use.ServerShare
		}
		o.GPUs[u] = g
	}
	for _, e := range p.machine.Step(o) {
		p.logger.Info("partition", "uuid", e.UUID, "event", e.Msg)
	}
	if !o.Blind {
		p.dropPending(snap.Started)
	}
	p.publishLocked()
}

// demandHold is how long demand that is no longer seen keeps GPUs in the
// family it needs: an evaluation that Nomad retries is not blocked for a
// moment, and one poll may fall in that moment.
func demandHold(poll time.Duration) time.Duration {
	return max(3*poll, 3*time.Second)
}

// sortedHW returns the GPUs in index order. p.mu must be held.
func (p *Plugin) sortedHW() []*hwGPU {
	out := make([]*hwGPU, 0, len(p.hw))
	for _, g := range p.hw {
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Index != out[j].Index {
			return out[i].Index < out[j].Index
		}
		return out[i].UUID < out[j].UUID
	})
	return out
}

// shareGroupName is the name of a GPU's share device group.
func shareGroupName(g gpu.GPU) string {
	return fmt.Sprintf("%s-%s", g.Model, ids.ShortUUID(g.UUID))
}
