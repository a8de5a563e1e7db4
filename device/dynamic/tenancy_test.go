package dynamic

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/device/tenants"
	"github.com/gpushare/nomad-gpushare/vocab"
	hclog "github.com/hashicorp/go-hclog"
)

// The node of the tests: four A100 40GB, the first three published whole,
// the last one shared.
const (
	nodeID = "11111111-2222-3333-4444-555555555555"
	gpuMiB = 40960
)

var gpuIDs = []string{
	"GPU-00000000-0000-4000-8000-000000000000", "GPU-11111111-0000-4000-8000-000000000001",
	"GPU-22222222-0000-4000-8000-000000000002", "GPU-33333333-0000-4000-8000-000000000003",
}

// Allocation IDs of the tests (the environment parser wants UUIDs).
const (
	allocA = "aaaaaaaa-0000-4000-8000-000000000001"
	allocB = "bbbbbbbb-0000-4000-8000-000000000002"
	allocC = "cccccccc-0000-4000-8000-000000000003"
)

// fakeNode is the plugin as the tests make it: its GPU processes are set
// by run and use, and their /proc entries (stat, environ) are written
// under root, which the tenancy's resolver reads. Their PIDs are above
// the kernel's largest, so that no kill can reach a real process.
type fakeNode struct {
	root string

	mu      sync.Mutex
	procs   map[string][]gpu.Process
	nextPID int
}

func (n *fakeNode) GPUs() []GPU {
	out := make([]GPU, len(gpuIDs))
	for i, u := range gpuIDs {
		out[i] = GPU{UUID: u, Index: i, Model: "NVIDIA A100-SXM4-40GB", MemoryMiB: gpuMiB, Healthy: true, OfferedWhole: i < 3}
	}
	return out
}

func (n *fakeNode) HeldWhole(string) bool { return false }

func (n *fakeNode) Processes(map[string]uint64) (map[string][]gpu.Process, map[string]error, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string][]gpu.Process, len(n.procs))
	for u, ps := range n.procs {
		out[u] = slices.Clone(ps)
	}
	return out, nil, nil
}

// run adds a GPU process on GPU g using mib, of task "main" of allocID (of
// no allocation when ""), and returns its PID.
func (n *fakeNode) run(t *testing.T, allocID, g string, mib uint64) int {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.nextPID++
	pid := n.nextPID
	dir := filepath.Join(n.root, fmt.Sprint(pid))
	env := "HOME=/\x00"
	if allocID != "" {
		env = "NOMAD_ALLOC_ID=" + allocID + "\x00NOMAD_TASK_NAME=main\x00NOMAD_NAMESPACE=default\x00"
	}
	stat := fmt.Sprintf("%d (python3) S%s 4242 20", pid, strings.Repeat(" 0", 18))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	n.procs[g] = append(n.procs[g], gpu.Process{PID: pid, UsedMiB: mib, MemKnown: true})
	return pid
}

// use sets the memory process pid uses.
func (n *fakeNode) use(pid int, mib uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ps := range n.procs {
		for i := range ps {
			if ps[i].PID == pid {
				ps[i].UsedMiB = mib
			}
		}
	}
}

// newTenancy configures a tenancy on the fake node with the plugin's
// defaults, adjusted by mod, and no Nomad tracker (no read at Reserve, no
// guest moved).
func newTenancy(t *testing.T, mod func(*Settings)) (*Tenancy, *fakeNode) {
	t.Helper()
	n := &fakeNode{root: t.TempDir(), procs: map[string][]gpu.Process{}, nextPID: 1 << 23}
	tn := New(hclog.NewNullLogger(), n)
	tn.resolver = tenants.NewResolver(n.root)
	s := Settings{MonitorPeriod: 500 * time.Millisecond, MemoryEnforcement: EnforceKill, Headroom: 0.1, Spread: true, GuestMoveTimeout: 30 * time.Second}
	if mod != nil {
		mod(&s)
	}
	tn.Configure(t.Context(), s, nil)
	t.Cleanup(tn.Stop)
	return tn, n
}

// share is a tenant of job whose task "main" holds n shares of GPU home
// from share from, with limit as its gpushare_limit ("" unset).
func share(allocID, job, limit, home string, from, n int) alloctrack.Tenant {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = vocab.Share(home, from+i)
	}
	return alloctrack.Tenant{AllocID: allocID, Namespace: "default", Job: job, Group: "main", Task: "main",
		Created: time.Now(), ShareGPU: home, ShareIDs: ids, Limit: limit, LimitFrom: "task"}
}

func TestBindSharePlacesABurstableTenantAsAGuest(t *testing.T) {
	tn, _ := newTenancy(t, nil)
	home := gpuIDs[3]
	a, b := share(allocA, "nb-a", "1.0", home, 0, 50), share(allocB, "nb-b", "1.0", home, 50, 50)
	tn.Update(nodeID, []alloctrack.Tenant{a, b}, time.Now())
	// Both are listed on the share GPU: the first bound goes to the lowest
	// idle whole GPU, the second is then alone at home.
	sb, err := tn.BindShare(t.Context(), home, a.ShareIDs)
	if want := (ShareBinding{Home: home, GPU: gpuIDs[0], Request: 50, Limit: 100, Guest: true}); err != nil || sb != want {
		t.Fatalf("first binding %+v, %v; want %+v", sb, err, want)
	}
	sb, err = tn.BindShare(t.Context(), home, b.ShareIDs)
	if want := (ShareBinding{Home: home, GPU: home, Request: 50, Limit: 100}); err != nil || sb != want {
		t.Fatalf("second binding %+v, %v; want %+v", sb, err, want)
	}
	if g := tn.GuestsByHost(); !maps.Equal(g, map[string]int{gpuIDs[0]: 1}) {
		t.Errorf("guests by host %v", g)
	}
	// Shares no listed task holds are bound static at home.
	ids := []string{vocab.Share(gpuIDs[2], 0), vocab.Share(gpuIDs[2], 1)}
	if sb, err := tn.BindShare(t.Context(), gpuIDs[2], ids); err != nil || sb != (ShareBinding{Home: gpuIDs[2], GPU: gpuIDs[2], Request: 2, Limit: 2}) {
		t.Errorf("unknown shares bound %+v, %v", sb, err)
	}
}

func TestWholeBindingFailsWhenTheGPUStaysBusy(t *testing.T) {
	tn, n := newTenancy(t, func(s *Settings) { s.GuestMoveTimeout = 400 * time.Millisecond })
	// A process of an allocation that stays on the GPU however often it
	// is killed.
	n.run(t, allocC, gpuIDs[1], 1000)
	err := tn.ClearForWhole(t.Context(), []string{gpuIDs[1]})
	if err == nil || !strings.Contains(err.Error(), "refusing whole GPU "+gpuIDs[1]+": processes of other allocations are still on it after 400ms") ||
		!strings.Contains(err.Error(), allocC) {
		t.Fatalf("ClearForWhole: %v", err)
	}
	if err := tn.ClearForWhole(t.Context(), []string{gpuIDs[0]}); err != nil {
		t.Errorf("ClearForWhole of a free GPU: %v", err)
	}
}
