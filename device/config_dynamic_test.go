package device

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/helper/pluginutils/hclutils"
)

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
	d := p.loop.state.cfg.dynamic
	if d.monitorPeriod != 250*time.Millisecond || d.MemoryEnforcement != EnforceReport || d.Spread || d.guestMoveTimeout != 12*time.Second ||
		d.UsageListen != "127.0.0.1:0" || d.SimulatedProcessDir != "/tmp/gpushare-sim" {
		t.Errorf("decoded %+v", d)
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
