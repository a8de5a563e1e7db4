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

// TestNodeInfoReadsOncePerModifyIndex: full nodes are read once per node
// modify index, only for nodes that publish GPUs, and forgotten when the
// node leaves the list.
func TestNodeInfoReadsOncePerModifyIndex(t *testing.T) {
	var mu sync.Mutex
	reads := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := strings.CutPrefix(r.URL.Path, "/v1/node/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		reads[id]++
		mu.Unlock()
		json.NewEncoder(w).Encode(&nomadapi.Node{ID: id, Meta: map[string]string{"rack": "r-" + id}})
	}))
	defer srv.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(client, hclog.NewNullLogger())
	stub := func(id string, index uint64) *nomadapi.NodeListStub {
		n := node()
		n.ID, n.ModifyIndex = id, index
		return n
	}
	cpuOnly := &nomadapi.NodeListStub{ID: "cpu", ModifyIndex: 1, NodeResources: &nomadapi.NodeResources{}}
	steps := []struct {
		stubs     []*nomadapi.NodeListStub
		wantReads map[string]int // cumulative
	}{
		{[]*nomadapi.NodeListStub{stub("n1", 5), stub("n2", 7), cpuOnly}, map[string]int{"n1": 1, "n2": 1}},
		{[]*nomadapi.NodeListStub{stub("n1", 5), stub("n2", 7), cpuOnly}, map[string]int{"n1": 1, "n2": 1}},
		{[]*nomadapi.NodeListStub{stub("n1", 6), stub("n2", 7)}, map[string]int{"n1": 2, "n2": 1}},
		{[]*nomadapi.NodeListStub{stub("n1", 6)}, map[string]int{"n1": 2, "n2": 1}},
		{[]*nomadapi.NodeListStub{stub("n1", 6), stub("n2", 7)}, map[string]int{"n1": 2, "n2": 2}},
	}
	for i, st := range steps {
		info, err := b.nodeInfo(context.Background(), st.stubs)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		for _, n := range st.stubs {
			if n.ID != "cpu" && (info[n.ID] == nil || info[n.ID].Meta["rack"] != "r-"+n.ID) {
				t.Errorf("step %d: node %s = %+v, want its meta", i, n.ID, info[n.ID])
			}
		}
		mu.Lock()
		for id, want := range st.wantReads {
			if reads[id] != want {
				t.Errorf("step %d: node %s read %d times, want %d", i, id, reads[id], want)
			}
		}
		if reads["cpu"] != 0 {
			t.Errorf("step %d: a node without GPUs was read", i)
		}
		mu.Unlock()
	}
}
