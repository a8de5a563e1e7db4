package device

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/device/gpu/simproc"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

func TestMonitorKillsTheBorrowerNeverTheOwner(t *testing.T) {
	f := newFakeNomad(t)
	p, dir := newDynamicPlugin(t, f, func(c *Config) { c.Spread = false })
	u := uuids(p)
	// A100 40 GiB: the borrower asks 0.25 (10240 MiB) with limit 1.0, the
	// owner 0.5 (20480 MiB); reclaim_headroom 0.1 is 4096 MiB.
	f.placeTenant(allocA, "borrower", "1.0", "gpu-share", shares(u[3], 0, 25)...)
	f.placeTenant(allocB, "owner", "", "gpu-share", shares(u[3], 25, 50)...)
	cycle(p, f)
	borrower := startSim(t, dir, allocA, u[3], 25000)
	owner := startSim(t, dir, allocB, u[3], 5000)
	monitorNow(p)
	if !borrower.alive() || !owner.alive() {
		t.Fatal("a tenant was killed while the owner has its headroom free (40960 - 25000 - 5000 >= 4096)")
	}
	// The owner grows within its request: 40960 - 25000 - 12000 < 4096.
	simproc.Write(dir, simproc.State{PID: owner.cmd.Process.Pid, StartTicks: mustStart(t, owner), GPU: u[3], UsedMiB: 12000})
	monitorNow(p)
	if !borrower.killed(t) {
		t.Fatal("the borrower was not killed")
	}
	if !owner.alive() {
		t.Fatal("the owner was killed")
	}
	r := p.tenancy.report.Load()
	if len(r.Kills) != 1 || r.Kills[0].AllocID != allocA || r.Kills[0].Reason != "reclaim" || r.Kills[0].GPU != u[3] || r.Kills[0].UsedMiB != 25000 || !r.Kills[0].Enforced {
		t.Errorf("kills recorded: %+v", r.Kills)
	}
}

func TestMonitorKillsATenantAboveItsLimit(t *testing.T) {
	f := newFakeNomad(t)
	p, dir := newDynamicPlugin(t, f, nil)
	u := uuids(p)
	f.placeTenant(allocA, "capped", "0.5", "gpu-share", shares(u[3], 0, 25)...)
	f.placeTenant(allocB, "static", "", "gpu-share", shares(u[3], 25, 25)...)
	cycle(p, f)
	capped := startSim(t, dir, allocA, u[3], 20000) // limit 20480 MiB
	static := startSim(t, dir, allocB, u[3], 10240) // limit = request = 10240 MiB
	monitorNow(p)
	if !capped.alive() || !static.alive() {
		t.Fatal("a tenant within its limit was killed")
	}
	simproc.Write(dir, simproc.State{PID: capped.cmd.Process.Pid, StartTicks: mustStart(t, capped), GPU: u[3], UsedMiB: 21000})
	monitorNow(p)
	if !capped.killed(t) {
		t.Fatal("the tenant above its limit was not killed")
	}
	if !static.alive() {
		t.Fatal("the other tenant was killed")
	}
	if k := p.tenancy.report.Load().Kills; len(k) != 1 || k[0].Reason != "limit" || !strings.Contains(k[0].Detail, "above its limit of 20480 MiB") {
		t.Errorf("kills: %+v", k)
	}
}

func TestReportModeKillsNothing(t *testing.T) {
	f := newFakeNomad(t)
	p, dir := newDynamicPlugin(t, f, func(c *Config) { c.MemoryEnforcement = EnforceReport })
	u := uuids(p)
	f.placeTenant(allocA, "capped", "0.5", "gpu-share", shares(u[3], 0, 25)...)
	cycle(p, f)
	capped := startSim(t, dir, allocA, u[3], 30000)
	monitorNow(p)
	monitorNow(p)
	if !capped.alive() {
		t.Fatal("killed with memory_enforcement = report")
	}
	if k := p.tenancy.report.Load().Kills; len(k) != 1 || k[0].Enforced {
		t.Errorf("kills recorded: %+v, want one, not enforced", k)
	}
}

func TestUsageEndpointReportsTenantsAndOutsideProcesses(t *testing.T) {
	f := newFakeNomad(t)
	p, dir := newDynamicPlugin(t, f, func(c *Config) { c.UsageListen = "127.0.0.1:0"; c.Spread = false })
	u := uuids(p)
	f.placeTenant(allocA, "nb", "0.5", "gpu-share", shares(u[3], 0, 25)...)
	f.placeTenant(allocB, "train", "", "gpu", u[1])
	cycle(p, f)
	startSim(t, dir, allocA, u[3], 15000)
	startSim(t, dir, allocB, u[1], 30000)
	stranger := startSim(t, dir, "", u[2], 700)
	startSim(t, dir, allocA, u[0], 100) // on a GPU its task was not given
	monitorNow(p)

	base := "http://" + p.usageAPI.Addr()
	r, err := nodeusage.Fetch(t.Context(), http.DefaultClient, base)
	if err != nil {
		t.Fatal(err)
	}
	byAlloc := map[string]nodeusage.Tenant{}
	for _, tn := range r.Tenants {
		byAlloc[tn.AllocID] = tn
	}
	if a := byAlloc[allocA]; a.Job != "nb" || a.GPU != u[3] || a.UsedMiB != 15000 || a.RequestMiB != 10240 || a.LimitMiB != 20480 || a.Request != 0.25 || a.Limit != 0.5 {
		t.Errorf("share tenant: %+v", a)
	}
	if b := byAlloc[allocB]; !b.Whole || b.GPU != u[1] || b.UsedMiB != 30000 || b.RequestMiB != 40960 {
		t.Errorf("whole tenant: %+v", b)
	}
	why := map[int]string{}
	for _, o := range r.Outside {
		why[o.PID] = o.Why
	}
	if len(r.Outside) != 2 || why[stranger.cmd.Process.Pid] != "belongs to no Nomad allocation" {
		t.Errorf("outside processes: %+v", r.Outside)
	}

	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`gpushare_tenant_memory_used_mib{alloc_id="` + allocA + `",gpu="` + u[3] + `",group="main",home_gpu="` + u[3] + `",job="nb",namespace="default",task="main"} 15000`,
		`gpushare_outside_processes{gpu="` + u[2] + `"} 1`,
		`gpushare_outside_memory_used_mib{gpu="` + u[2] + `"} 700`,
		"gpushare_monitor_cycle_seconds_count 1",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	var raw map[string]any
	resp, _ = http.Get(base + nodeusage.Path)
	json.NewDecoder(resp.Body).Decode(&raw)
	resp.Body.Close()
	if raw["node_id"] != fakeNodeID {
		t.Errorf("report node: %v", raw["node_id"])
	}
}

// monitorNow runs one monitor cycle on what the simulated processes use
// now.
func monitorNow(p *Plugin) {
	p.hw.simulated().ReadProcessesAgain()
	p.monitorCycle(p.ctx)
}

func TestABusyUsageAddressIsTriedAgain(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()
	f := newFakeNomad(t)
	p, _ := newDynamicPlugin(t, f, func(c *Config) { c.UsageListen = addr })
	if got := p.usageAPI.Addr(); got != "" {
		t.Fatalf("listening on %s while the address is busy", got)
	}
	if fams := families(p); fams[0] == "none" {
		t.Fatalf("the GPUs are not offered while the usage address is busy: %v", fams)
	}
	busy.Close()
	testcluster.Eventually(t, 3*usageRetry, func() error {
		if p.usageAPI.Addr() != addr {
			return fmt.Errorf("not listening on %s yet", addr)
		}
		return nil
	})
}
