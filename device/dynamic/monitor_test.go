package dynamic

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
)

func TestMonitorKillsTheBorrowerNeverTheOwner(t *testing.T) {
	tn, n := newTenancy(t, nil)
	u := gpuIDs[3]
	// A100 40 GiB: the borrower asks 0.25 (10240 MiB) with limit 1.0, the
	// owner 0.5 (20480 MiB); reclaim_headroom 0.1 is 4096 MiB.
	tn.Update(nodeID, []alloctrack.Tenant{share(allocA, "borrower", "1.0", u, 0, 25), share(allocB, "owner", "", u, 25, 50)}, time.Now())
	borrower := n.run(t, allocA, u, 25000)
	owner := n.run(t, allocB, u, 5000)
	tn.Cycle(t.Context())
	if k := tn.Report().Kills; len(k) != 0 {
		t.Fatalf("killed %+v while the owner has its headroom free (40960 - 25000 - 5000 >= 4096)", k)
	}
	// The owner grows within its request: 40960 - 25000 - 12000 < 4096.
	n.use(owner, 12000)
	tn.Cycle(t.Context())
	// The borrower's memory counts as freed while NVML still lists it:
	// one violation, one kill.
	tn.Cycle(t.Context())
	r := tn.Report()
	if len(r.Kills) != 1 || r.Kills[0].AllocID != allocA || r.Kills[0].Reason != "reclaim" || r.Kills[0].GPU != u || r.Kills[0].UsedMiB != 25000 ||
		!r.Kills[0].Enforced || !slices.Equal(r.Kills[0].PIDs, []int{borrower}) {
		t.Errorf("kills recorded: %+v", r.Kills)
	}
	if r.Totals.Kills["reclaim"] != 1 {
		t.Errorf("totals %+v", r.Totals)
	}
}

func TestMonitorKillsATenantAboveItsLimit(t *testing.T) {
	tn, n := newTenancy(t, nil)
	u := gpuIDs[3]
	tn.Update(nodeID, []alloctrack.Tenant{share(allocA, "capped", "0.5", u, 0, 25), share(allocB, "static", "", u, 25, 25)}, time.Now())
	capped := n.run(t, allocA, u, 20000) // limit 20480 MiB
	n.run(t, allocB, u, 10240)           // limit = request = 10240 MiB
	tn.Cycle(t.Context())
	if k := tn.Report().Kills; len(k) != 0 {
		t.Fatalf("tenants within their limit killed: %+v", k)
	}
	n.use(capped, 21000)
	tn.Cycle(t.Context())
	if k := tn.Report().Kills; len(k) != 1 || k[0].AllocID != allocA || k[0].Reason != "limit" || !strings.Contains(k[0].Detail, "above its limit of 20480 MiB") {
		t.Errorf("kills: %+v", k)
	}
}

func TestReportModeKillsNothing(t *testing.T) {
	tn, n := newTenancy(t, func(s *Settings) { s.MemoryEnforcement = EnforceReport })
	u := gpuIDs[3]
	tn.Update(nodeID, []alloctrack.Tenant{share(allocA, "capped", "0.5", u, 0, 25)}, time.Now())
	n.run(t, allocA, u, 30000)
	tn.Cycle(t.Context())
	tn.Cycle(t.Context())
	r := tn.Report()
	if len(r.Kills) != 1 || r.Kills[0].Enforced || r.Enforcement != EnforceReport || r.Totals.Kills["limit"] != 0 {
		t.Errorf("kills recorded: %+v (totals %+v), want one, not enforced nor counted", r.Kills, r.Totals)
	}
	// The process lives on: its memory stays charged to its tenant, not
	// counted as freed by a kill that never happened.
	if len(r.Tenants) != 1 || r.Tenants[0].UsedMiB != 30000 {
		t.Errorf("tenants %+v, want the capped tenant still charged 30000 MiB", r.Tenants)
	}
}

func TestAGuestIsFoundAgainAfterAPluginRestart(t *testing.T) {
	tn, n := newTenancy(t, nil)
	home, host := gpuIDs[3], gpuIDs[0]
	// Placed by a previous plugin: it runs on host, its home is home.
	tn.Update(nodeID, []alloctrack.Tenant{share(allocA, "nb-a", "1.0", home, 0, 50)}, time.Now())
	n.run(t, allocA, host, 30000)
	tn.Cycle(t.Context())
	r := tn.Report()
	if len(r.Tenants) != 1 || !r.Tenants[0].Guest || r.Tenants[0].GPU != host || r.Tenants[0].UsedMiB != 30000 || len(r.Outside) != 0 {
		t.Fatalf("report: tenants %+v, outside %+v", r.Tenants, r.Outside)
	}
	tn.mu.Lock()
	guests := tn.guestsOnLocked([]string{host})
	tn.mu.Unlock()
	if len(guests) != 1 || guests[0].AllocID != allocA {
		t.Fatalf("guests on %s: %+v", host, guests)
	}
	if g := tn.GuestsByHost(); !maps.Equal(g, map[string]int{host: 1}) {
		t.Errorf("guests by host %v", g)
	}
}

func TestUsageEndpointReportsTenantsAndOutsideProcesses(t *testing.T) {
	tn, n := newTenancy(t, func(s *Settings) { s.UsageListen = "127.0.0.1:0" })
	u := gpuIDs
	whole := alloctrack.Tenant{AllocID: allocB, Namespace: "default", Job: "train", Group: "main", Task: "main", Created: time.Now(), Whole: []string{u[1]}}
	tn.Update(nodeID, []alloctrack.Tenant{share(allocA, "nb", "0.5", u[3], 0, 25), whole}, time.Now())
	n.run(t, allocA, u[3], 15000)
	n.run(t, allocB, u[1], 30000)
	stranger := n.run(t, "", u[2], 700)
	n.run(t, allocA, u[0], 100) // on a GPU its task was not given
	tn.Cycle(t.Context())

	base := "http://" + tn.api.listenAddr()
	r, err := nodeusage.Fetch(t.Context(), http.DefaultClient, base)
	if err != nil {
		t.Fatal(err)
	}
	byAlloc := map[string]nodeusage.Tenant{}
	for _, x := range r.Tenants {
		byAlloc[x.AllocID] = x
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
	if len(r.Outside) != 2 || why[stranger] != "belongs to no Nomad allocation" {
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
	if raw["node_id"] != nodeID {
		t.Errorf("report node: %v", raw["node_id"])
	}
}

func TestABusyUsageAddressIsTriedAgain(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()
	tn, _ := newTenancy(t, func(s *Settings) { s.UsageListen = addr })
	if got := tn.api.listenAddr(); got != "" {
		t.Fatalf("listening on %s while the address is busy", got)
	}
	busy.Close()
	testcluster.Eventually(t, 3*usageRetry, func() error {
		if tn.api.listenAddr() != addr {
			return fmt.Errorf("not listening on %s yet", addr)
		}
		return nil
	})
}
