package nomadwatch

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
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

// TestAllocationsListedByPage: the allocation listing follows Nomad's
// next tokens to the last page, asks every page for the same allocations
// (desired to run, with resources, without task states), and is at the
// oldest index any page was answered at.
func TestAllocationsListedByPage(t *testing.T) {
	pages := []struct {
		index uint64
		ids   []string
	}{{index: 12, ids: []string{"a1", "a2"}}, {index: 10, ids: []string{"a3", "a4"}}, {index: 14, ids: []string{"a5"}}}
	var mu sync.Mutex
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		mu.Lock()
		queries = append(queries, q.Get("filter")+" "+q.Get("resources")+" "+q.Get("task_states")+" "+q.Get("namespace"))
		mu.Unlock()
		page := 0
		if tok := q.Get("next_token"); tok != "" {
			page = int(tok[0] - '0')
		}
		p := pages[page]
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(p.index, 10))
		w.Header().Set("X-Nomad-LastContact", "0")
		if page+1 < len(pages) {
			w.Header().Set("X-Nomad-NextToken", strconv.Itoa(page+1))
		}
		var out []*nomadapi.AllocationListStub
		for _, id := range p.ids {
			out = append(out, &nomadapi.AllocationListStub{ID: id, DesiredStatus: "run", ModifyIndex: 5})
		}
		json.NewEncoder(w).Encode(out)
	}))
	defer srv.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	allocs, at, err := NewBuilder(client, hclog.NewNullLogger(), Options{}).listAllocs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(maps.Keys(allocs)); !slices.Equal(got, []string{"a1", "a2", "a3", "a4", "a5"}) {
		t.Errorf("listed %v, want a1 to a5", got)
	}
	if at != 10 {
		t.Errorf("listing index %d, want 10 (the oldest page's)", at)
	}
	want := `DesiredStatus == "run" true false *`
	if len(queries) != len(pages) || slices.ContainsFunc(queries, func(q string) bool { return q != want }) {
		t.Errorf("queries %q, want %d of %q", queries, len(pages), want)
	}
}
