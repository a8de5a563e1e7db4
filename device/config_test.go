package device

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpushare/nomad-gpushare/device/dynamic"
	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
	"github.com/hashicorp/nomad/plugins/base"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// parse decodes a plugin config block the way the Nomad client does
// (schema defaults included) and passes it through SetConfig's msgpack path.
func parse(t *testing.T, hcl string) *base.Config {
	t.Helper()
	var c Config
	hclutils.NewConfigParser(configSpec).ParseHCL(t, hcl, &c)
	var buf []byte
	if err := base.MsgPackEncode(&buf, &c); err != nil {
		t.Fatal(err)
	}
	return &base.Config{PluginConfig: buf}
}

func TestConfigDefaults(t *testing.T) {
	var c Config
	hclutils.NewConfigParser(configSpec).ParseHCL(t, `config {}`, &c)
	d := DefaultConfig()
	if c.Backend != d.Backend || c.FingerprintPeriod != d.FingerprintPeriod || c.MinIdleShareGPUs != d.MinIdleShareGPUs ||
		c.ShareHeadroom != d.ShareHeadroom || c.SwitchSettlePeriod != d.SwitchSettlePeriod || c.NomadPollPeriod != d.NomadPollPeriod ||
		c.MPSPipeDirectory != d.MPSPipeDirectory || c.SimulatedPreset != d.SimulatedPreset || c.MPSEnabled || !c.Enabled ||
		fmt.Sprint(c.XidCritical) != fmt.Sprint(d.XidCritical) {
		t.Fatalf("schema defaults %+v differ from DefaultConfig %+v", c, d)
	}
}

func TestSetConfig(t *testing.T) {
	tests := []struct {
		name    string
		hcl     string
		wantErr []string // substrings: the field and the fix
	}{
		{name: "simulated 4 GPU test node", hcl: `config {
  backend = "simulated"
  simulated_preset = "a100"
  simulated_count = 4
  fingerprint_period = "1s"
  nomad_poll_period = "1s"
  switch_settle_period = "5s"
  min_idle_share_gpus = 1
}`},
		{name: "custom model", hcl: `config {
  backend = "simulated"
  simulated_preset = "custom"
  simulated_count = 2
  simulated_model = "NVIDIA L4"
  simulated_memory_mib = 23034
  ignored_gpu_ids = ["GPU-1"]
  mps_enabled = true
  mps_pipe_directory = "/run/mps"
  nomad_address = "https://nomad.example:4646"
}`},
		{name: "nvml backend", hcl: `config { backend = "nvml" }`},
		{name: "bad backend", hcl: `config { backend = "cuda" }`, wantErr: []string{"backend", `use "nvml"`}},
		{name: "bad preset", hcl: `config {
  backend = "simulated"
  simulated_preset = "v100"
}`, wantErr: []string{"simulated_preset", `"h100"`}},
		{name: "custom without model", hcl: `config {
  backend = "simulated"
  simulated_preset = "custom"
  simulated_count = 2
  simulated_memory_mib = 4096
}`, wantErr: []string{"simulated_model", "name the model"}},
		{name: "custom without memory", hcl: `config {
  backend = "simulated"
  simulated_preset = "custom"
  simulated_count = 2
  simulated_model = "x"
}`, wantErr: []string{"simulated_memory_mib", "MiB"}},
		{name: "too many GPUs", hcl: `config {
  backend = "simulated"
  simulated_count = 1000
}`, wantErr: []string{"simulated_count", "64"}},
		{name: "bad period", hcl: `config { fingerprint_period = "often" }`, wantErr: []string{"fingerprint_period", "Go duration"}},
		{name: "too short period", hcl: `config { nomad_poll_period = "1ms" }`, wantErr: []string{"nomad_poll_period", "at least"}},
		{name: "bad settle", hcl: `config { switch_settle_period = "-1s" }`, wantErr: []string{"switch_settle_period"}},
		{name: "negative landing places", hcl: `config { min_idle_share_gpus = -1 }`, wantErr: []string{"min_idle_share_gpus", "0"}},
		{name: "coarse shares", hcl: `config { shares_per_gpu = 4 }`},
		{name: "shares not dividing a GPU", hcl: `config { shares_per_gpu = 30 }`, wantErr: []string{"shares_per_gpu", "divisor of 100", "2, 4, 5, 10, 20, 25, 50 or 100"}},
		{name: "one share per GPU", hcl: `config { shares_per_gpu = 1 }`, wantErr: []string{"shares_per_gpu", "divisor of 100"}},
		{name: "more shares than units", hcl: `config { shares_per_gpu = 200 }`, wantErr: []string{"shares_per_gpu"}},
		{name: "headroom over 100", hcl: `config { share_headroom = 101 }`, wantErr: []string{"share_headroom", "0 to 100"}},
		{name: "empty ignored id", hcl: `config { ignored_gpu_ids = ["GPU-1", ""] }`, wantErr: []string{"ignored_gpu_ids[1]", "UUID"}},
		{name: "address without scheme", hcl: `config { nomad_address = "127.0.0.1:4646" }`, wantErr: []string{"nomad_address", "http://"}},
		{name: "Xids", hcl: `config { xid_critical = [79, 48] }`},
		{name: "no Xid watched", hcl: `config { xid_critical = [] }`},
		{name: "bad Xid", hcl: `config { xid_critical = [79, 0] }`, wantErr: []string{"xid_critical[1]", "Xid error numbers"}},
		{name: "relative MPS dir", hcl: `config {
  mps_enabled = true
  mps_pipe_directory = "mps"
}`, wantErr: []string{"mps_pipe_directory", "absolute"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New(nil)
			defer p.Shutdown()
			err := p.SetConfig(parse(t, tt.hcl))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestDisabled: enabled = false turns the plugin off as HashiCorp's
// nvidia plugin's does: every verb answers ErrPluginDisabled (Nomad's
// client then leaves the plugin be) and NVML is not touched; enabled
// again, it works.
func TestDisabled(t *testing.T) {
	f := newFakeNomad(t)
	p := New(nil)
	defer p.Shutdown()
	p.newLib = func() nvml.Interface { t.Fatal("NVML loaded by a disabled plugin"); return nil }
	if err := p.SetConfig(parse(t, `config { enabled = false }`)); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Fingerprint(ctx); err != dev.ErrPluginDisabled {
		t.Errorf("Fingerprint: %v", err)
	}
	if _, err := p.Stats(ctx, time.Second); err != dev.ErrPluginDisabled {
		t.Errorf("Stats: %v", err)
	}
	if _, err := p.Reserve([]string{"GPU-1"}); err != dev.ErrPluginDisabled {
		t.Errorf("Reserve: %v", err)
	}
	if err := p.SetConfig(parse(t, fmt.Sprintf(`config {
  backend = "simulated"
  nomad_address = %q
  node_id = %q
}`, f.URL, fakeNodeID))); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Fingerprint(ctx); err != nil {
		t.Errorf("Fingerprint once enabled: %v", err)
	}
}

// TestShippedConfigs: the plugin blocks in jobspecs parse and validate,
// every attribute they set is in the schema.
func TestShippedConfigs(t *testing.T) {
	for _, path := range []string{"../jobspecs/plugin.hcl", "../jobspecs/demo/plugin.hcl"} {
		t.Run(path, func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			block := configBlock(t, string(raw))
			p := New(nil)
			defer p.Shutdown()
			if err := p.SetConfig(parse(t, block)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// configBlock returns the `config { ... }` block of a plugin stanza,
// comments left out.
func configBlock(t *testing.T, hcl string) string {
	t.Helper()
	var b strings.Builder
	depth := 0
	for _, line := range strings.Split(hcl, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if depth == 0 && trimmed == "config {" || depth > 0 {
			b.WriteString(line + "\n")
			depth += strings.Count(line, "{") - strings.Count(line, "}")
			if depth == 0 {
				return b.String()
			}
		}
	}
	t.Fatal("no config block")
	return ""
}

func TestSetConfigEmpty(t *testing.T) {
	p := New(nil)
	defer p.Shutdown()
	if err := p.SetConfig(&base.Config{}); err != nil {
		t.Fatal(err)
	}
	if b := loopStateOf(p).cfg.Backend; b != BackendNVML {
		t.Fatalf("backend %q", b)
	}
}

func FuzzConfigValidate(f *testing.F) {
	f.Add("simulated", "custom", 4, "m", 40960, "5s", "10s", "2s", 1, 50, "GPU-1", "http://x", true, "/tmp/mps", 79, 4)
	f.Add("nvml", "", 0, "", 0, "", "", "", -1, 200, "", "", false, "", -1, 30)
	f.Fuzz(func(t *testing.T, backend, preset string, count int, model string, mem int, fp, settle, poll string,
		idle, headroom int, ignored, addr string, mps bool, mpsDir string, xid, perGPU int) {
		c := Config{Backend: backend, SimulatedPreset: preset, SimulatedCount: count, SimulatedModel: model,
			SimulatedMemoryMiB: mem, FingerprintPeriod: fp, SwitchSettlePeriod: settle, NomadPollPeriod: poll,
			MinIdleShareGPUs: idle, ShareHeadroom: headroom, IgnoredGPUIDs: []string{ignored}, NomadAddress: addr,
			MPSEnabled: mps, MPSPipeDirectory: mpsDir, XidCritical: []int{xid}, SharesPerGPU: perGPU}
		s, err := c.validate()
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gpushare plugin config: ") {
				t.Fatalf("error without the field: %v", err)
			}
			return
		}
		if s.fingerprintPeriod <= 0 || s.pollPeriod <= 0 || s.settlePeriod < 0 || s.MinIdleShareGPUs < 0 || xid <= 0 ||
			100%s.SharesPerGPU != 0 || s.SharesPerGPU < 2 {
			t.Fatalf("accepted invalid settings %+v", s)
		}
	})
}

func TestDynamicConfigDefaultsAndDecoding(t *testing.T) {
	var c Config
	hclutils.NewConfigParser(configSpec).ParseHCL(t, `config {}`, &c)
	if c.Dynamic != DefaultConfig().Dynamic {
		t.Fatalf("schema defaults %+v differ from DefaultConfig %+v", c.Dynamic, DefaultConfig().Dynamic)
	}
	p := New(nil)
	defer p.Shutdown()
	err := p.SetConfig(parse(t, `config {
  backend = "simulated"
  monitor_period = "250ms"
  memory_enforcement = "report"
  spread = false
  guest_move_timeout = "12s"
  usage_listen = "127.0.0.1:0"
  simulated_process_dir = "/tmp/gpushare-sim"
}`))
	if err != nil {
		t.Fatal(err)
	}
	s := p.loop.state.cfg
	if d := s.dynamic; d.MonitorPeriod != 250*time.Millisecond || d.MemoryEnforcement != dynamic.EnforceReport || d.Spread || d.GuestMoveTimeout != 12*time.Second ||
		d.Headroom != 0.1 || d.UsageListen != "127.0.0.1:0" || s.SimulatedProcessDir != "/tmp/gpushare-sim" {
		t.Errorf("decoded %+v, simulated_process_dir %q", d, s.SimulatedProcessDir)
	}
}

func TestDynamicConfigErrorsNameFieldAndFix(t *testing.T) {
	for _, c := range []struct{ hcl, want string }{
		{`monitor_period = "1h"`, "monitor_period: 1h0m0s is too long"},
		{`monitor_period = "10ms"`, "monitor_period: 10ms is too short; use at least 50ms"},
		{`memory_enforcement = "warn"`, `memory_enforcement: unknown mode "warn"; use "kill"`},
		{`guest_move_timeout = "soon"`, "guest_move_timeout"},
		{`reclaim_headroom = "1.5"`, `reclaim_headroom: "1.5" is not a fraction of a GPU above 0 and at most 1; use e.g. "0.1"`},
		{`usage_listen = "9410"`, `usage_listen: "9410" is not host:port; use an address such as ":9410"`},
		{`simulated_process_dir = "relative"`, "simulated_process_dir"},
	} {
		p := New(nil)
		err := p.SetConfig(parse(t, "config {\n backend = \"simulated\"\n "+c.hcl+"\n}"))
		p.Shutdown()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.hcl, err, c.want)
		}
	}
}
