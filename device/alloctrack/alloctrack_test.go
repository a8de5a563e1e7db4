package alloctrack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/device/aclview"
	"github.com/hashicorp/nomad/api"
)

func alloc(id, status string, devs ...*api.AllocatedDeviceResource) *api.Allocation {
	return &api.Allocation{ID: id, ClientStatus: status, AllocatedResources: &api.AllocatedResources{
		Tasks: map[string]*api.AllocatedTaskResources{"t": {Devices: devs}},
	}}
}

func devs(typ string, ids ...string) *api.AllocatedDeviceResource {
	return &api.AllocatedDeviceResource{Vendor: "nvidia", Type: typ, Name: "any", DeviceIDs: ids}
}

func TestAddAllocations(t *testing.T) {
	tests := []struct {
		name   string
		allocs []*api.Allocation
		want   map[string]GPUHolding
	}{
		{name: "nothing", want: map[string]GPUHolding{}},
		{
			name: "whole and shares of different GPUs",
			allocs: []*api.Allocation{
				alloc("a", "running", devs("gpu", "GPU-1")),
				alloc("b", "pending", devs("gpu-share", "GPU-2-s00", "GPU-2-s01")),
				alloc("c", "running", devs("gpu-share", "GPU-2-s02")),
			},
			want: map[string]GPUHolding{
				"GPU-1": {WholeAllocs: []string{"a"}},
				"GPU-2": {ShareUnits: 3, ShareAllocs: []string{"b", "c"}},
			},
		},
		{
			name: "terminal allocations hold nothing; unknown (disconnected) ones still do",
			allocs: []*api.Allocation{
				alloc("done", "complete", devs("gpu", "GPU-1")),
				alloc("failed", "failed", devs("gpu-share", "GPU-2-s00")),
				alloc("lost", "lost", devs("gpu", "GPU-3")),
				alloc("unknown", "unknown", devs("gpu", "GPU-4")),
			},
			want: map[string]GPUHolding{"GPU-4": {WholeAllocs: []string{"unknown"}}},
		},
		{
			name: "other vendors, types and malformed IDs are ignored",
			allocs: []*api.Allocation{
				alloc("x", "running",
					&api.AllocatedDeviceResource{Vendor: "amd", Type: "gpu", DeviceIDs: []string{"GPU-1"}},
					devs("fpga", "GPU-1"),
					devs("gpu", "GPU-1-s03"), // a share ID under the whole type
					devs("gpu-share", "GPU-1"),
					devs("gpu", "bad id")),
				{ID: "noresources", ClientStatus: "running"},
				nil,
			},
			want: map[string]GPUHolding{},
		},
		{
			name: "several tasks of one allocation",
			allocs: []*api.Allocation{{ID: "m", ClientStatus: "running", AllocatedResources: &api.AllocatedResources{
				Tasks: map[string]*api.AllocatedTaskResources{
					"a": {Devices: []*api.AllocatedDeviceResource{devs("gpu-share", "GPU-9-s10")}},
					"b": {Devices: []*api.AllocatedDeviceResource{devs("gpu-share", "GPU-9-s11", "GPU-9-s12")}},
				}}}},
			want: map[string]GPUHolding{"GPU-9": {ShareUnits: 3, ShareAllocs: []string{"m"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := map[string]*GPUHolding{}
			addAllocations(m, tt.allocs)
			got := map[string]GPUHolding{}
			for u, g := range m {
				sort.Strings(g.ShareAllocs)
				got[u] = *g
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestRead covers the HTTP path against a fake of the three endpoints used;
// the real agent is covered by the device package's integration test.
func TestRead(t *testing.T) {
	whole, share := "whole", "share"
	node := &api.Node{ID: "n1", Name: "host-a", NodeResources: &api.NodeResources{Devices: []*api.NodeDeviceResource{
		{Vendor: "nvidia", Type: "gpu", Name: "A100", Instances: []*api.NodeDevice{{ID: "GPU-1", Healthy: true}, {ID: "GPU-2", Healthy: false}},
			Attributes: map[string]*api.Attribute{"sharing": {StringVal: &whole}}},
		{Vendor: "nvidia", Type: "gpu-share", Name: "A100-2", Instances: []*api.NodeDevice{{ID: "GPU-2-s00", Healthy: true}},
			Attributes: map[string]*api.Attribute{"sharing": {StringVal: &share}}},
		// HashiCorp's nvidia plugin, loaded beside: no sharing attribute.
		{Vendor: "nvidia", Type: "gpu", Name: "A100", Instances: []*api.NodeDevice{{ID: "GPU-1", Healthy: true}}},
	}}}
	allocs := []*api.Allocation{alloc("a", "running", devs("gpu-share", "GPU-2-s00"))}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/agent/self":
			json.NewEncoder(w).Encode(map[string]any{"stats": map[string]map[string]string{"client": {"node_id": "n1"}}})
		case "/v1/nodes":
			json.NewEncoder(w).Encode([]*api.NodeListStub{{ID: "n1", Name: "host-a"}, {ID: "n2", Name: "host-b"}})
		case "/v1/node/n1":
			json.NewEncoder(w).Encode(node)
		case "/v1/node/n1/allocations":
			json.NewEncoder(w).Encode(allocs)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	for _, cfg := range []Config{{Address: srv.URL}, {Address: srv.URL, NodeName: "host-a"}, {Address: srv.URL, NodeID: "n1"}} {
		tr, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := tr.Read(context.Background(), ReadOptions{})
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		g1, g2 := snap.GPUs["GPU-1"], snap.GPUs["GPU-2"]
		if snap.NodeID != "n1" || !g1.ServerWhole || g1.ServerShare || g2.ServerWhole || !g2.ServerShare || g2.ShareUnits != 1 {
			t.Fatalf("%+v: snapshot %s", cfg, snap)
		}
		if strings.Join(snap.Foreign, ",") != "nvidia/gpu/A100" {
			t.Errorf("another plugin's groups: %v", snap.Foreign)
		}
		// The fake answers no ACL endpoint: the list cannot be proven
		// complete.
		if !strings.Contains(snap.Hidden, "cannot check what the Nomad token may read") {
			t.Errorf("Hidden = %q", snap.Hidden)
		}
	}
	tr, _ := New(Config{Address: srv.URL, NodeName: "nope"})
	if _, err := tr.Read(context.Background(), ReadOptions{}); err == nil || !strings.Contains(err.Error(), `no node named "nope"`) {
		t.Fatalf("unknown node name: %v", err)
	}
	srv.Close()
	tr, _ = New(Config{Address: srv.URL, NodeID: "n1"})
	if _, err := tr.Read(context.Background(), ReadOptions{}); err == nil || !strings.Contains(err.Error(), srv.URL) {
		t.Fatalf("unreachable Nomad: %v", err)
	}
}

// TestNodeIDKeepsTheAgentError: when the local agent refuses to say which
// node it is (an ACL token without agent:read) and no node is named like
// the host, the error says both; when one is, it is used.
func TestNodeIDKeepsTheAgentError(t *testing.T) {
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		nodes   []*api.NodeListStub
		wantID  string
		wantErr []string
	}{
		{"no node named like the host", []*api.NodeListStub{{ID: "n2", Name: "other"}}, "",
			[]string{"403", "Permission denied", "/v1/agent/self", "no node named " + strconv.Quote(host)}},
		{"a node named like the host", []*api.NodeListStub{{ID: "n1", Name: host}, {ID: "n2", Name: "other"}}, "n1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/v1/agent/self":
					http.Error(w, "Permission denied", http.StatusForbidden)
				case "/v1/nodes":
					json.NewEncoder(w).Encode(tt.nodes)
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			tr, err := New(Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			id, err := tr.NodeID(context.Background())
			if tt.wantErr == nil {
				if err != nil || id != tt.wantID {
					t.Fatalf("NodeID = %q, %v; want %q", id, err, tt.wantID)
				}
				return
			}
			if !errors.Is(err, ErrNodeNotFound) {
				t.Fatalf("NodeID error %v is not ErrNodeNotFound", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("NodeID error %q lacks %q", err, w)
				}
			}
		})
	}
}

// serversOfN1 is a fake Nomad API for node n1, ACLs off: answer gives
// the index of a request (stale: a follower may answer) to the node or
// its allocation list (path), and the list. It returns a Tracker of n1
// on it.
func serversOfN1(t *testing.T, answer func(stale bool, path string) (uint64, []*api.Allocation)) *Tracker {
	t.Helper()
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		_, stale := r.URL.Query()["stale"]
		idx, allocs := answer(stale, r.URL.Path)
		mu.Unlock()
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
		switch r.URL.Path {
		case "/v1/node/n1":
			json.NewEncoder(w).Encode(&api.Node{ID: "n1", ModifyIndex: idx})
		case "/v1/node/n1/allocations":
			json.NewEncoder(w).Encode(allocs)
		case "/v1/acl/token/self":
			json.NewEncoder(w).Encode(&api.ACLToken{AccessorID: "acls-disabled"})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	tr, err := New(Config{Address: srv.URL, NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestReadRefusesStaleAnswers: a server that lags behind what was already
// read is not believed; the node is read again from the leader, whose
// answer stands even when its index went down (an allocation collected).
func TestReadRefusesStaleAnswers(t *testing.T) {
	var mu sync.Mutex
	leader, follower := uint64(10), uint64(10) // allocation list indexes
	leaderAllocs := []*api.Allocation{alloc("new", "running", devs("gpu", "GPU-1"))}
	var consistentReads int
	tr := serversOfN1(t, func(stale bool, path string) (uint64, []*api.Allocation) {
		mu.Lock()
		defer mu.Unlock()
		if stale {
			return follower, nil // the follower has not seen "new"
		}
		if path == "/v1/node/n1/allocations" {
			consistentReads++
		}
		return leader, leaderAllocs
	})
	read := func(o ReadOptions) Snapshot {
		t.Helper()
		snap, err := tr.Read(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	steps := []struct {
		name                string
		leader, follower    uint64
		opts                ReadOptions
		wantHeld, wantConsi bool
	}{
		{"the first read is the leader's, whatever the options", 20, 10, ReadOptions{}, true, true},
		{"a consistent read sees the new allocation", 20, 10, ReadOptions{Consistent: true}, true, true},
		{"a lagging server is refused: read again from the leader", 20, 10, ReadOptions{}, true, true},
		{"a server that caught up is believed", 20, 20, ReadOptions{}, false, false},
		{"the leader's index went down (garbage collection): it stands", 15, 15, ReadOptions{Consistent: true}, true, true},
		{"and later stale reads compare with it", 15, 15, ReadOptions{}, false, false},
	}
	for _, s := range steps {
		mu.Lock()
		leader, follower = s.leader, s.follower
		mu.Unlock()
		snap := read(s.opts)
		if held := snap.GPUs["GPU-1"] != nil; held != s.wantHeld || snap.Consistent != s.wantConsi {
			t.Fatalf("%s: GPU-1 held %v, consistent %v; want %v, %v", s.name, held, snap.Consistent, s.wantHeld, s.wantConsi)
		}
	}
	if consistentReads != 4 {
		t.Errorf("%d consistent reads, want 4", consistentReads)
	}
}

// TestWatchTakesItsFirstAnswerFromTheLeader: a Nomad server restarting
// with the plugin answers stale reads from a state it has not restored
// yet (an empty allocation list at index 1 was seen in the soak). The
// watches' first answers come from the leader, whose list holds the
// allocation, and the watches come live on it (a first attempt left them
// dead, and the plugin read the node itself every poll) once the
// restarted server caught up.
func TestWatchTakesItsFirstAnswerFromTheLeader(t *testing.T) {
	leaderAllocs := []*api.Allocation{alloc("held", "running", devs("gpu", "GPU-1"))}
	restoring := map[string]bool{"/v1/node/n1": true, "/v1/node/n1/allocations": true}
	tr := serversOfN1(t, func(stale bool, path string) (uint64, []*api.Allocation) {
		if stale && restoring[path] {
			restoring[path] = false
			return 1, nil // restoring: nothing yet; caught up at the next request
		}
		return 20, leaderAllocs
	})
	ctx := context.Background()
	for i, watch := range []func(context.Context, string, bool, WatchOptions) error{tr.watchAllocs, tr.watchNode, tr.watchNode} {
		if err := watch(ctx, "n1", true, WatchOptions{Wait: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		tr.mu.Lock()
		held := len(tr.view.allocs)
		tr.mu.Unlock()
		if held != 1 {
			t.Fatalf("after watch answer %d the view holds %d allocations, want the leader's 1: a restoring server's empty list was taken", i+1, held)
		}
	}
	snap, err := tr.Read(ctx, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if snap.GPUs["GPU-1"] == nil {
		t.Fatalf("GPU-1 held by a running allocation reads idle: the watch took the restoring server's empty list (%s)", snap)
	}
	if !snap.Watched {
		t.Error("the watches did not come live on the leader's answers: every poll reads the node itself")
	}
}

// TestReadCatchesATokenNarrowedDuringTheRead: the token is checked before
// an active read and narrowed before the read's request (Nomad resolves a
// token when a request begins): the allocation list may lack allocations,
// so the snapshot says so, and Hidden clears once the token checks
// complete on both sides of a read.
func TestReadCatchesATokenNarrowedDuringTheRead(t *testing.T) {
	var mu sync.Mutex
	narrowAfter := 1 // token checks answered "management" before it narrows
	checks := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Nomad-Index", "10")
		switch r.URL.Path {
		case "/v1/node/n1":
			json.NewEncoder(w).Encode(&api.Node{ID: "n1"})
		case "/v1/node/n1/allocations":
			json.NewEncoder(w).Encode([]*api.Allocation{})
		case "/v1/acl/token/self":
			mu.Lock()
			checks++
			narrowed := checks > narrowAfter
			mu.Unlock()
			if narrowed {
				json.NewEncoder(w).Encode(&api.ACLToken{AccessorID: "a", Type: "client", Policies: []string{"default-only"}})
				return
			}
			json.NewEncoder(w).Encode(&api.ACLToken{AccessorID: "a", Type: "management"})
		default:
			http.NotFound(w, r) // the narrowed token's policies cannot be listed
		}
	}))
	defer srv.Close()
	tr, err := New(Config{Address: srv.URL, NodeID: "n1"})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := tr.Read(context.Background(), ReadOptions{Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Hidden == "" {
		t.Fatalf("the token narrowed between its check and the read, yet the snapshot claims a complete allocation list")
	}
	mu.Lock()
	narrowAfter = 1 << 30
	mu.Unlock()
	if snap, err = tr.Read(context.Background(), ReadOptions{Fresh: true}); err != nil || snap.Hidden != "" {
		t.Fatalf("a read with the token complete before and after: hidden %q, %v", snap.Hidden, err)
	}
}

// TestCombine: a blocking query's answer is complete only when the token
// was complete before it was sent and after it came back.
func TestCombine(t *testing.T) {
	full, narrow := aclview.Verdict{Complete: true}, aclview.Verdict{Reason: "no namespace \"*\" rule"}
	tests := []struct {
		name          string
		before, after aclview.Verdict
		want          string // a substring; "" for complete
	}{
		{"complete throughout", full, full, ""},
		{"narrowed while waiting", full, narrow, "no namespace"},
		{"widened while waiting: the answer may lack allocations", narrow, full, "changed while the node was read"},
		{"narrow throughout", narrow, narrow, "no namespace"},
	}
	for _, tt := range tests {
		got := combine(tt.before, tt.after)
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
