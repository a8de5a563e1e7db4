// Package device is the gpushare Nomad device plugin: it publishes every
// NVIDIA GPU of a node in one of two families, whole GPUs (vendor "nvidia",
// type "gpu", one instance per GPU named by its UUID) and shares (type
// "gpu-share", one device group per GPU with vocab.DefaultSharesPerGPU instances
// "<UUID>-sNN", each 1% of the GPU; docs/design.md, "Units and device
// families"), and moves idle GPUs between the families safely (package
// partition; docs/design.md, "Partition protocol"). A MIG-enabled GPU is in
// neither family: its MIG devices are offered as whole devices, one group
// per MIG device name, as HashiCorp's nvidia plugin does. Reserve validates a
// binding against the cached holdings of allocations and returns the
// environment that tells the workload which GPU and which fraction it got.
// Holdings come from the Nomad API (package alloctrack), hardware from NVML or a simulated machine
// (package gpu). Dynamic fractions (a share task's limit above its
// request, the node-level scheduler, the monitor that charges GPU
// processes to tasks and the usage report) are package dynamic, which the
// plugin hosts.
package device

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/dynamic"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/partition"
	"github.com/gpushare/nomad-gpushare/vocab"
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

// Plugin is the gpushare device plugin. Create it with New.
//
// Its state is split by concern, each part with its own lock (none is
// held while taking another, except that configure holds the loop's while
// it resets the others):
//   - hw (hardware.go): the GPUs as NVML last showed them;
//   - holdings (holdings.go): what the Nomad API says the allocations
//     hold, and the reservations made since;
//   - pub (publication.go): the device groups streamed to Nomad, their
//     subscribers, and the view Reserve reads;
//   - loop (loop.go): the configuration and the one goroutine that reads
//     the hardware and Nomad, steps the partition machine and publishes;
//   - tenancy (package dynamic): dynamic fractions and the node-level
//     scheduler, which the loop, Reserve and the monitor goroutine drive.
//
// The plugin verbs follow Nomad's device plugin interface, one file each:
// Fingerprint (fingerprint.go), Reserve (reserve.go), Stats (stats.go).
type Plugin struct {
	logger hclog.Logger
	// ctx ends with Shutdown; every goroutine of the plugin watches it.
	ctx    context.Context
	cancel context.CancelFunc
	// newLib makes the nvml.Interface of the nvml backend (tests replace it).
	newLib func() nvml.Interface
	now    func() time.Time
	// reserveWait bounds Reserve's wait for the first read (ReserveWait;
	// tests shorten it).
	reserveWait time.Duration

	hw       hardware
	holdings holdings
	pub      publication
	loop     loopControl
	tenancy  *dynamic.Tenancy
	// disabled is set by a configuration with enabled = false: every verb
	// answers dev.ErrPluginDisabled.
	disabled atomic.Bool
	// sharesPerGPU is the configured shares_per_gpu, for Stats.
	sharesPerGPU atomic.Int64
}

// New returns an unconfigured plugin.
func New(logger hclog.Logger) *Plugin {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	logger = logger.Named(PluginName)
	ctx, cancel := context.WithCancel(context.Background())
	p := &Plugin{
		logger:      logger,
		ctx:         ctx,
		cancel:      cancel,
		newLib:      func() nvml.Interface { return nvml.New() },
		now:         time.Now,
		reserveWait: ReserveWait,
	}
	p.hw.logger = logger
	p.hw.changed = make(chan struct{}, 1)
	p.pub.reset()
	p.holdings.reset()
	p.tenancy = dynamic.New(logger, tenancyNode{p})
	return p
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
			return fmt.Errorf("gpushare plugin config: cannot decode: %w", err)
		}
	}
	return p.configure(cfg)
}

// configure applies a decoded configuration. A loop already running is
// stopped, and waited for, before anything is replaced; it is then started
// again on the new configuration, so the open streams follow it.
func (p *Plugin) configure(c Config) error {
	s, err := c.validate()
	if err != nil {
		return err
	}
	if !s.Enabled {
		return p.disable()
	}
	p.sharesPerGPU.Store(int64(s.SharesPerGPU))
	lib, sim, err := p.backend(s)
	if err != nil {
		return err
	}
	tr, err := alloctrack.New(alloctrack.Config{Address: s.NomadAddress, Token: s.NomadToken, NodeID: s.NodeID, NodeName: s.NodeName,
		Demand: true, Published: alloctrack.PublishedConfig{Prefix: s.DemandVar, Namespace: s.DemandNamespace},
		Logger: p.logger.Named("demand")})
	if err != nil {
		return &FieldError{"nomad_address", err.Error(), `use a URL such as "http://127.0.0.1:4646"`}
	}
	st := &loopState{cfg: s, tracker: tr, demandErr: "-", hidden: "-", machine: partition.New(partition.Policy{
		MinIdleShareGPUs: s.MinIdleShareGPUs, ShareHeadroom: s.ShareHeadroom, SettlePeriod: s.settlePeriod,
		DemandHold: demandHold(s.pollPeriod),
	})}

	p.tenancy.Configure(p.ctx, s.dynamic, tr)

	p.loop.mu.Lock()
	defer p.loop.mu.Unlock()
	wasRunning := p.loop.running
	if err := p.stopLoopLocked(); err != nil {
		return fmt.Errorf("gpushare plugin: not reconfigured: %w", err)
	}
	p.hw.reset(hwConfig{src: gpu.NewSource(lib), sim: sim, ignored: s.ignored, critical: s.xidCritical})
	p.pub.reset()
	p.holdings.reset()
	p.loop.state = st
	p.disabled.Store(false)
	if wasRunning {
		p.startLoopLocked()
	}
	p.logger.Info("configured", "backend", s.Backend, "nomad", tr.Address(), "min_idle_share_gpus", s.MinIdleShareGPUs,
		"share_headroom", s.ShareHeadroom, "switch_settle_period", s.settlePeriod, "mps", s.MPSEnabled)
	return nil
}

// disable stops the plugin's work and releases NVML: the configuration
// says enabled = false.
func (p *Plugin) disable() error {
	p.loop.mu.Lock()
	defer p.loop.mu.Unlock()
	if err := p.stopLoopLocked(); err != nil {
		return fmt.Errorf("gpushare plugin: not disabled: %w", err)
	}
	p.disabled.Store(true)
	p.hw.reset(hwConfig{})
	p.pub.reset()
	p.loop.state = nil
	p.tenancy.Stop()
	p.logger.Info("disabled by the configuration (enabled = false): offering no device")
	return nil
}

// backend makes the nvml.Interface the settings name: real NVML, or a
// simulated machine (returned too, for tests that break its GPUs).
func (p *Plugin) backend(s settings) (nvml.Interface, *gpu.Simulated, error) {
	if s.Backend != BackendSimulated {
		return p.newLib(), nil, nil
	}
	sim, err := gpu.NewSimulated(gpu.SimOptions{
		Preset: s.SimulatedPreset, Count: s.SimulatedCount, Model: s.SimulatedModel,
		MemoryMiB: uint64(s.SimulatedMemoryMiB), Seed: s.SimulatedSeed, ProcessDir: s.SimulatedProcessDir,
	})
	if err != nil {
		return nil, nil, &FieldError{"simulated_preset", err.Error(), "fix the simulated_* settings"}
	}
	return sim, sim, nil
}

// Shutdown stops the plugin's goroutines and waits for its loop to exit
// (tests; the process exit does it in production).
func (p *Plugin) Shutdown() {
	p.cancel()
	p.loop.mu.Lock()
	if err := p.stopLoopLocked(); err != nil {
		p.logger.Warn("shutdown", "error", err)
	}
	p.loop.mu.Unlock()
	p.tenancy.Stop()
	p.hw.close()
}

// tenancyNode is the plugin as package dynamic reads it: the hardware,
// the GPUs published whole, and what Nomad holds whole.
type tenancyNode struct{ p *Plugin }

func (n tenancyNode) GPUs() []dynamic.GPU {
	hw := n.p.hw.view()
	offered := offeredWhole(n.p.pub.current())
	out := make([]dynamic.GPU, 0, len(hw.gpus))
	for _, g := range hw.gpus {
		out = append(out, dynamic.GPU{UUID: g.UUID, Index: g.Index, Model: g.Model, MemoryMiB: g.MemoryMiB,
			Healthy: g.healthy, OfferedWhole: offered[g.UUID]})
	}
	return out
}

func (n tenancyNode) HeldWhole(uuid string) bool { return n.p.holdings.wholeHeld(uuid) }

func (n tenancyNode) Processes(lastSample map[string]uint64) (map[string][]gpu.Process, map[string]error, error) {
	return n.p.hw.processes(lastSample)
}

// demandHold is how long demand that is no longer seen keeps GPUs in the
// family it needs: an evaluation that Nomad retries is not blocked for a
// moment, and one poll may fall in that moment.
func demandHold(poll time.Duration) time.Duration {
	return max(3*poll, 3*time.Second)
}

// shareGroupName is the name of a GPU's share device group.
func shareGroupName(g gpu.GPU) string {
	return fmt.Sprintf("%s-%s", g.Model, vocab.ShortUUID(g.UUID))
}
