package nomadwatch

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestFullNodesReadOncePerModifyIndex: a full node (attributes, meta,
// device inventory) is read once per node modify index and reused while
// the listing shows the same index; a stale answer older than the listing
// is read again from the leader.
func TestFullNodesReadOncePerModifyIndex(t *testing.T) {
	var mu sync.Mutex
	reads := map[string]int{}
	current := map[string]uint64{}
	lagging := map[string]bool{} // stale reads answer one index behind
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/v1/node/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		reads[id]++
		index := current[id]
		if lagging[id] && r.URL.Query().Has("stale") {
			index--
		}
		mu.Unlock()
		json.NewEncoder(w).Encode(&nomadapi.Node{ID: id, ModifyIndex: index, Meta: map[string]string{"rack": "r-" + id}})
	}))
	defer srv.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(client, hclog.NewNullLogger(), Options{})
	stub := func(id string, index uint64) *nomadapi.NodeListStub {
		return &nomadapi.NodeListStub{ID: id, ModifyIndex: index}
	}
	steps := []struct {
		stubs     []*nomadapi.NodeListStub
		lagging   string
		wantReads map[string]int // cumulative
	}{
		{stubs: []*nomadapi.NodeListStub{stub("n1", 5), stub("n2", 7)}, wantReads: map[string]int{"n1": 1, "n2": 1}},
		{stubs: []*nomadapi.NodeListStub{stub("n1", 5), stub("n2", 7)}, wantReads: map[string]int{"n1": 1, "n2": 1}},
		{stubs: []*nomadapi.NodeListStub{stub("n1", 6), stub("n2", 7)}, wantReads: map[string]int{"n1": 2, "n2": 1}},
		{stubs: []*nomadapi.NodeListStub{stub("n1", 6)}, wantReads: map[string]int{"n1": 2, "n2": 1}},
		{stubs: []*nomadapi.NodeListStub{stub("n1", 6), stub("n2", 8)}, lagging: "n2", wantReads: map[string]int{"n1": 2, "n2": 3}},
	}
	var cached map[string]nodeEntry
	for i, st := range steps {
		mu.Lock()
		for _, n := range st.stubs {
			current[n.ID] = n.ModifyIndex
		}
		lagging = map[string]bool{st.lagging: true}
		mu.Unlock()
		got, err := b.fullNodes(context.Background(), st.stubs, cached)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for _, n := range st.stubs {
			e := got[n.ID]
			if e.full == nil || e.full.Meta["rack"] != "r-"+n.ID || e.full.ModifyIndex != n.ModifyIndex || e.stub.ModifyIndex != n.ModifyIndex {
				t.Errorf("step %d: node %s = %+v, want its meta at index %d", i, n.ID, e.full, n.ModifyIndex)
			}
		}
		mu.Lock()
		for id, want := range st.wantReads {
			if reads[id] != want {
				t.Errorf("step %d: node %s read %d times, want %d", i, id, reads[id], want)
			}
		}
		mu.Unlock()
		cached = got
	}
}
