package device

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gpushare/nomad-gpushare/device/ids"
	"github.com/hashicorp/nomad/api"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// fakeNomad serves the two endpoints the plugin reads,
// /v1/node/:id and /v1/node/:id/allocations, for unit tests; the real agent
// is covered by the integration tests.
type fakeNomad struct {
	*httptest.Server
	mu     sync.Mutex
	allocs []*api.Allocation
	view   []*api.NodeDeviceResource
	down   bool
}

const fakeNodeID = "11111111-2222-3333-4444-555555555555"

func newFakeNomad(t testing.TB) *fakeNomad {
	f := &fakeNomad{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-Nomad-Index", "1")
		switch r.URL.Path {
		case "/v1/node/" + fakeNodeID:
			json.NewEncoder(w).Encode(&api.Node{ID: fakeNodeID, NodeResources: &api.NodeResources{Devices: f.view}})
		case "/v1/node/" + fakeNodeID + "/allocations":
			json.NewEncoder(w).Encode(f.allocs)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// setDown makes every request fail (Nomad unreachable).
func (f *fakeNomad) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// place adds a running allocation holding the given device IDs.
func (f *fakeNomad) place(allocID, typ string, deviceIDs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocs = append(f.allocs, &api.Allocation{
		ID: allocID, ClientStatus: api.AllocClientStatusRunning,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"main": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: typ, Name: "x", DeviceIDs: deviceIDs}}},
		}},
	})
}

// finish marks an allocation complete.
func (f *fakeNomad) finish(allocID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.allocs {
		if a.ID == allocID {
			a.ClientStatus = api.AllocClientStatusComplete
		}
	}
}

// sync makes the servers' view of the node what the plugin publishes, as
// the Nomad client would after a fingerprint.
func (f *fakeNomad) sync(groups []*dev.DeviceGroup) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.view = nil
	for _, g := range groups {
		r := &api.NodeDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name}
		for _, d := range g.Devices {
			r.Instances = append(r.Instances, &api.NodeDevice{ID: d.ID, Healthy: d.Healthy, HealthDescription: d.HealthDesc})
		}
		f.view = append(f.view, r)
	}
}

func shares(uuid string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = ids.Share(uuid, from+i)
	}
	return out
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
