package device

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device/dynamic"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	"github.com/hashicorp/nomad/plugins/shared/hclspec"
)

// Backends.
const (
	BackendNVML      = "nvml"
	BackendSimulated = "simulated"
)

// Config is the plugin configuration (the `config` block of the plugin's
// `plugin "nomad-device-gpushare"` stanza in the Nomad client config).
type Config struct {
	// Enabled: false turns the plugin off (it offers nothing and reads
	// neither NVML nor Nomad), as HashiCorp's nvidia plugin's enabled.
	// Default true.
	Enabled bool `codec:"enabled"`
	// Backend: "nvml" (real GPUs through libnvidia-ml) or "simulated"
	// (go-nvml mock machines). Default "nvml".
	Backend string `codec:"backend"`
	// SimulatedPreset: "h100" (8 x H100 80GB, mock/dgxh100), "a100"
	// (8 x A100 40GB, mock/dgxa100) or "custom". Default "h100".
	SimulatedPreset string `codec:"simulated_preset"`
	// SimulatedCount: GPUs of the simulated machine (0: the preset's 8;
	// required for custom).
	SimulatedCount int `codec:"simulated_count"`
	// SimulatedModel and SimulatedMemoryMiB: the custom preset's GPUs.
	SimulatedModel     string `codec:"simulated_model"`
	SimulatedMemoryMiB int    `codec:"simulated_memory_mib"`
	// SimulatedSeed derives the simulated GPUs' UUIDs (stable across
	// restarts). Default "gpushare".
	SimulatedSeed string `codec:"simulated_seed"`
	// FingerprintPeriod: how often NVML is read. Default "5s".
	FingerprintPeriod string `codec:"fingerprint_period"`
	// IgnoredGPUIDs: GPU UUIDs never offered.
	IgnoredGPUIDs []string `codec:"ignored_gpu_ids"`
	// MinIdleShareGPUs: idle GPUs kept in share mode as a landing place
	// while in-use share GPUs lack room. Default 1.
	MinIdleShareGPUs int `codec:"min_idle_share_gpus"`
	// SharesPerGPU: share instances published per GPU, each standing for
	// 100/SharesPerGPU hundredths of it; a job asks for a fraction f with
	// nvidia/gpu-share count f*SharesPerGPU. A divisor of 100 from 2 to 100
	// (default 100; 0 means the default). Fewer instances make the node's JSON in Nomad smaller
	// and fractions coarser.
	SharesPerGPU int `codec:"shares_per_gpu"`
	// ShareHeadroom: free shares on an in-use share GPU that count as room
	// (then no idle GPU is kept in share mode); 0 always keeps them.
	// Default 50.
	ShareHeadroom int `codec:"share_headroom"`
	// SwitchSettlePeriod: how long at most a withdrawn GPU waits, once the
	// servers see it withdrawn, for placements in flight; it waits less
	// when the plugin proves that none is left (docs/design.md, Partition
	// protocol, rule 4). Default "10s".
	SwitchSettlePeriod string `codec:"switch_settle_period"`
	// NomadAddress and NomadToken: the Nomad HTTP API. Empty: NOMAD_ADDR
	// (else http://127.0.0.1:4646) and NOMAD_TOKEN from the environment the
	// plugin inherits from the Nomad client.
	NomadAddress string `codec:"nomad_address"`
	NomadToken   string `codec:"nomad_token"`
	// NomadPollPeriod: how often the loop steps the partition machine
	// with the last view of the node, read fresh only when a decision
	// needs it (docs/design.md, "The plugin's reads of Nomad"); also the
	// least interval between two requests of one blocking query. Default
	// "2s".
	NomadPollPeriod string `codec:"nomad_poll_period"`
	// NodeID or NodeName pick this plugin's node; empty: the local agent's
	// node (/v1/agent/self), else the node named like the hostname.
	NodeID   string `codec:"node_id"`
	NodeName string `codec:"node_name"`
	// DemandVar is the path prefix of the demand the quota service's
	// leader publishes per node (Nomad Variables <prefix>/leader and
	// <prefix>/nodes/<node ID>, package vocab/nodedemand): while it is
	// fresh the plugin reads it instead of listing blocked evaluations.
	// Default "gpushare/demand"; empty: always list the evaluations.
	DemandVar string `codec:"demand_var"`
	// DemandNamespace is the namespace of those variables. Default
	// "default".
	DemandNamespace string `codec:"demand_namespace"`
	// MPSEnabled: shares get CUDA MPS limits and the pipe directory mount.
	MPSEnabled bool `codec:"mps_enabled"`
	// MPSPipeDirectory: the MPS control daemon's pipe directory. Default
	// "/tmp/nvidia-mps".
	MPSPipeDirectory string `codec:"mps_pipe_directory"`
	// XidCritical: the Xid errors that mark a GPU unhealthy until the
	// plugin restarts. Default 48, 62, 63, 64, 74, 79; empty watches none.
	XidCritical []int `codec:"xid_critical"`
	// The settings of dynamic fractions and the node-level scheduler
	// (docs/design.md, "Dynamic fractions and the node-level scheduler").
	Dynamic
}

// Dynamic are the settings of per-tenant accounting, the borrowing rule and
// the node-level scheduler.
type Dynamic struct {
	// MonitorPeriod: how often GPU processes are read, charged to tenants
	// and checked against the borrowing rule. Default "500ms".
	MonitorPeriod string `codec:"monitor_period"`
	// MemoryEnforcement: "kill" (the borrowing rule kills) or "report" (it
	// only logs and counts what it would kill). Default "kill".
	MemoryEnforcement string `codec:"memory_enforcement"`
	// ReclaimHeadroom: the fraction of a GPU's memory that every tenant
	// below its request may grow by at once; borrowers above their request
	// are killed to keep it free (package borrow). "1.0": borrowers use
	// only memory nobody requested. Default "0.1".
	ReclaimHeadroom string `codec:"reclaim_headroom"`
	// Spread: burstable share tenants may run as guests on idle whole
	// GPUs (the node-level scheduler). Default true.
	Spread bool `codec:"spread"`
	// GuestMoveTimeout bounds how long a whole-GPU binding waits for the
	// guests of its GPU to be gone before it fails. Default "30s".
	GuestMoveTimeout string `codec:"guest_move_timeout"`
	// UsageListen: address of the HTTP endpoint serving /v1/usage (JSON,
	// read by the quota service) and /metrics (Prometheus). Empty: off.
	UsageListen string `codec:"usage_listen"`
	// SimulatedProcessDir: the simulated backend reports the simulated
	// GPU processes (gpushare-simload) whose state files are there.
	SimulatedProcessDir string `codec:"simulated_process_dir"`
}

func attr(name, typ, def string) *hclspec.Spec {
	a := hclspec.NewAttr(name, typ, false)
	if def == "" {
		return a
	}
	return hclspec.NewDefault(a, hclspec.NewLiteral(def))
}

// configSpec is the HCL schema with its defaults.
var configSpec = hclspec.NewObject(map[string]*hclspec.Spec{
	"enabled":              attr("enabled", "bool", `true`),
	"backend":              attr("backend", "string", `"nvml"`),
	"simulated_preset":     attr("simulated_preset", "string", `"h100"`),
	"simulated_count":      attr("simulated_count", "number", `0`),
	"simulated_model":      attr("simulated_model", "string", ""),
	"simulated_memory_mib": attr("simulated_memory_mib", "number", `0`),
	"simulated_seed":       attr("simulated_seed", "string", ""),
	"fingerprint_period":   attr("fingerprint_period", "string", `"5s"`),
	"ignored_gpu_ids":      attr("ignored_gpu_ids", "list(string)", `[]`),
	"min_idle_share_gpus":  attr("min_idle_share_gpus", "number", `1`),
	"shares_per_gpu":       attr("shares_per_gpu", "number", `100`),
	"share_headroom":       attr("share_headroom", "number", `50`),
	"switch_settle_period": attr("switch_settle_period", "string", `"10s"`),
	"nomad_address":        attr("nomad_address", "string", ""),
	"nomad_token":          attr("nomad_token", "string", ""),
	"nomad_poll_period":    attr("nomad_poll_period", "string", `"2s"`),
	"node_id":              attr("node_id", "string", ""),
	"node_name":            attr("node_name", "string", ""),
	"demand_var":           attr("demand_var", "string", `"gpushare/demand"`),
	"demand_namespace":     attr("demand_namespace", "string", `"default"`),
	"mps_enabled":          attr("mps_enabled", "bool", `false`),
	"mps_pipe_directory":   attr("mps_pipe_directory", "string", `"/tmp/nvidia-mps"`),
	// Dynamic fractions and the node-level scheduler.
	"monitor_period":        attr("monitor_period", "string", `"500ms"`),
	"memory_enforcement":    attr("memory_enforcement", "string", `"kill"`),
	"reclaim_headroom":      attr("reclaim_headroom", "string", `"0.1"`),
	"spread":                attr("spread", "bool", `true`),
	"guest_move_timeout":    attr("guest_move_timeout", "string", `"30s"`),
	"usage_listen":          attr("usage_listen", "string", ""),
	"simulated_process_dir": attr("simulated_process_dir", "string", ""),
	"xid_critical":          attr("xid_critical", "list(number)", `[48, 62, 63, 64, 74, 79]`),
})

// DefaultXidCritical are the Xid errors that mark a GPU unhealthy by
// default: 48 double-bit ECC error, 62 internal micro-controller halt, 63
// and 64 ECC page retirement or row remapping event and failure, 74
// NVLink error, 79 GPU has fallen off the bus.
var DefaultXidCritical = []int{48, 62, 63, 64, 74, 79}

// DefaultConfig is the configuration an empty config block gives.
func DefaultConfig() Config {
	return Config{
		Enabled:            true,
		Backend:            BackendNVML,
		SimulatedPreset:    gpu.PresetH100,
		FingerprintPeriod:  "5s",
		MinIdleShareGPUs:   vocab.DefaultMinIdleShareGPUs,
		SharesPerGPU:       vocab.DefaultSharesPerGPU,
		ShareHeadroom:      vocab.DefaultShareHeadroom,
		SwitchSettlePeriod: "10s",
		NomadPollPeriod:    "2s",
		DemandVar:          nodedemand.DefaultPrefix,
		DemandNamespace:    nodedemand.DefaultNamespace,
		MPSPipeDirectory:   "/tmp/nvidia-mps",
		Dynamic: Dynamic{MonitorPeriod: "500ms", MemoryEnforcement: dynamic.EnforceKill, ReclaimHeadroom: "0.1", Spread: true,
			GuestMoveTimeout: "30s"},
		XidCritical: append([]int(nil), DefaultXidCritical...),
	}
}

// settings is a validated Config.
type settings struct {
	Config
	fingerprintPeriod time.Duration
	settlePeriod      time.Duration
	pollPeriod        time.Duration
	ignored           map[string]bool
	dynamic           dynamic.Settings
	xidCritical       map[uint64]bool
}

// FieldError names the config field at fault and how to fix it.
type FieldError struct {
	Field, Problem, Fix string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("gpushare plugin config: %s: %s; %s", e.Field, e.Problem, e.Fix)
}

func period(field, v string, min time.Duration) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, &FieldError{field, fmt.Sprintf("%q is not a duration", v), `use a Go duration such as "5s" or "1m"`}
	}
	if d < min {
		return 0, &FieldError{field, fmt.Sprintf("%s is too short", d), fmt.Sprintf("use at least %s", min)}
	}
	return d, nil
}

// validate checks a Config and returns its settings; errors name the field
// and the fix.
func (c Config) validate() (settings, error) {
	s := settings{Config: c, ignored: map[string]bool{}, xidCritical: map[uint64]bool{}}
	var err error
	switch c.Backend {
	case BackendNVML:
	case BackendSimulated:
		switch c.SimulatedPreset {
		case gpu.PresetH100, gpu.PresetA100:
			if c.SimulatedCount < 0 || c.SimulatedCount > 64 {
				return s, &FieldError{"simulated_count", fmt.Sprintf("%d is out of range", c.SimulatedCount), "use 0 (the preset's 8 GPUs) to 64"}
			}
		case gpu.PresetCustom:
			if c.SimulatedCount < 1 || c.SimulatedCount > 64 {
				return s, &FieldError{"simulated_count", fmt.Sprintf("%d is out of range for the custom preset", c.SimulatedCount), "use 1 to 64"}
			}
			if strings.TrimSpace(c.SimulatedModel) == "" {
				return s, &FieldError{"simulated_model", "empty", `name the model, e.g. "NVIDIA L4"`}
			}
			if c.SimulatedMemoryMiB < 1024 || c.SimulatedMemoryMiB > 1<<22 {
				return s, &FieldError{"simulated_memory_mib", fmt.Sprintf("%d is out of range", c.SimulatedMemoryMiB), "give the GPU memory in MiB, e.g. 40960"}
			}
		default:
			return s, &FieldError{"simulated_preset", fmt.Sprintf("unknown preset %q", c.SimulatedPreset), `use "h100" (8 x H100 80GB), "a100" (8 x A100 40GB) or "custom" (with simulated_count, simulated_model, simulated_memory_mib)`}
		}
	default:
		return s, &FieldError{"backend", fmt.Sprintf("unknown backend %q", c.Backend), `use "nvml" (real GPUs) or "simulated" (go-nvml mock machines)`}
	}
	if s.fingerprintPeriod, err = period("fingerprint_period", c.FingerprintPeriod, 100*time.Millisecond); err != nil {
		return s, err
	}
	if s.pollPeriod, err = period("nomad_poll_period", c.NomadPollPeriod, 100*time.Millisecond); err != nil {
		return s, err
	}
	if s.settlePeriod, err = period("switch_settle_period", c.SwitchSettlePeriod, 0); err != nil {
		return s, err
	}
	if c.MinIdleShareGPUs < 0 || c.MinIdleShareGPUs > 64 {
		return s, &FieldError{"min_idle_share_gpus", fmt.Sprintf("%d is out of range", c.MinIdleShareGPUs), "use 0 (no share landing place) to 64"}
	}
	if s.SharesPerGPU == 0 {
		s.SharesPerGPU = vocab.DefaultSharesPerGPU
	}
	if !vocab.ValidSharesPerGPU(s.SharesPerGPU) {
		return s, &FieldError{"shares_per_gpu", fmt.Sprintf("%d does not divide a GPU's 100 units into equal shares", c.SharesPerGPU),
			"use a divisor of 100 from 2 to 100: 2, 4, 5, 10, 20, 25, 50 or 100 (the default)"}
	}
	if c.ShareHeadroom < 0 || c.ShareHeadroom > 100 {
		return s, &FieldError{"share_headroom", fmt.Sprintf("%d is out of range", c.ShareHeadroom), "give free shares (0 to 100) on an in-use share GPU that count as room; 0 always keeps the idle share GPUs"}
	}
	for i, id := range c.IgnoredGPUIDs {
		if strings.TrimSpace(id) == "" || strings.ContainsAny(id, " \t\n,") {
			return s, &FieldError{fmt.Sprintf("ignored_gpu_ids[%d]", i), fmt.Sprintf("%q is not a GPU UUID", id), `list GPU UUIDs such as "GPU-8f3a2c1e-...", one per string`}
		}
		s.ignored[id] = true
	}
	if c.NomadAddress != "" && !strings.HasPrefix(c.NomadAddress, "http://") && !strings.HasPrefix(c.NomadAddress, "https://") {
		return s, &FieldError{"nomad_address", fmt.Sprintf("%q has no scheme", c.NomadAddress), `use a URL such as "http://127.0.0.1:4646"`}
	}
	for i, x := range c.XidCritical {
		if x <= 0 || x > 1<<16 {
			return s, &FieldError{fmt.Sprintf("xid_critical[%d]", i), fmt.Sprintf("%d is not an Xid", x), "list Xid error numbers such as 48 or 79"}
		}
		s.xidCritical[uint64(x)] = true
	}
	if c.MPSEnabled && !filepath.IsAbs(c.MPSPipeDirectory) {
		return s, &FieldError{"mps_pipe_directory", fmt.Sprintf("%q is not an absolute path", c.MPSPipeDirectory), `use the MPS control daemon's CUDA_MPS_PIPE_DIRECTORY, e.g. "/tmp/nvidia-mps"`}
	}
	s.dynamic, err = c.Dynamic.validate(c.Backend)
	return s, err
}

// validate checks the Dynamic settings; errors name the field and the fix.
func (d Dynamic) validate(backend string) (dynamic.Settings, error) {
	s := dynamic.Settings{MemoryEnforcement: d.MemoryEnforcement, Spread: d.Spread, UsageListen: d.UsageListen}
	var err error
	if s.MonitorPeriod, err = period("monitor_period", d.MonitorPeriod, 50*time.Millisecond); err != nil {
		return s, err
	}
	if s.MonitorPeriod > 10*time.Second {
		return s, &FieldError{"monitor_period", fmt.Sprintf("%s is too long: a borrower would keep an owner's memory that long", s.MonitorPeriod), "use at most 10s (default 500ms)"}
	}
	if s.GuestMoveTimeout, err = period("guest_move_timeout", d.GuestMoveTimeout, time.Second); err != nil {
		return s, err
	}
	h, err := strconv.ParseFloat(strings.TrimSpace(d.ReclaimHeadroom), 64)
	if err != nil || h <= 0 || h > 1 {
		return s, &FieldError{"reclaim_headroom", fmt.Sprintf("%q is not a fraction of a GPU above 0 and at most 1", d.ReclaimHeadroom), `use e.g. "0.1" (every tenant below its request may grow by a tenth of the GPU at once) or "1.0" (borrowers use only memory nobody requested)`}
	}
	s.Headroom = h
	switch d.MemoryEnforcement {
	case dynamic.EnforceKill, dynamic.EnforceReport:
	default:
		return s, &FieldError{"memory_enforcement", fmt.Sprintf("unknown mode %q", d.MemoryEnforcement), `use "kill" (tenants above their limit, or borrowing memory another tenant's request needs, are killed) or "report" (only logged and counted)`}
	}
	if d.UsageListen != "" {
		if _, _, err := net.SplitHostPort(d.UsageListen); err != nil {
			return s, &FieldError{"usage_listen", fmt.Sprintf("%q is not host:port", d.UsageListen), `use an address such as ":9410" or "127.0.0.1:9410"`}
		}
	}
	if d.SimulatedProcessDir != "" && (backend != BackendSimulated || !filepath.IsAbs(d.SimulatedProcessDir)) {
		return s, &FieldError{"simulated_process_dir", fmt.Sprintf("%q is not an absolute path used with backend \"simulated\"", d.SimulatedProcessDir), "give an absolute directory, with backend = \"simulated\", that gpushare-simload tasks write to (-state-dir)"}
	}
	return s, nil
}
