package nodedemand

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	wire "github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	nomadapi "github.com/hashicorp/nomad/api"
)

// fakeVars is Nomad's variables API in memory, counting the writes.
type fakeVars struct {
	mu      sync.Mutex
	vars    map[string]*nomadapi.Variable
	index   uint64
	puts    int
	deletes int
}

func (f *fakeVars) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path == "/v1/vars" {
		var out []*nomadapi.VariableMetadata
		for _, p := range slices.Sorted(maps.Keys(f.vars)) {
			if strings.HasPrefix(p, r.URL.Query().Get("prefix")) {
				out = append(out, &nomadapi.VariableMetadata{Path: p, Namespace: "default", ModifyIndex: f.vars[p].ModifyIndex})
			}
		}
		json.NewEncoder(w).Encode(out)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/v1/var/")
	switch r.Method {
	case http.MethodPut:
		var v nomadapi.Variable
		json.NewDecoder(r.Body).Decode(&v)
		f.index++
		f.puts++
		v.ModifyIndex = f.index
		f.vars[path] = &v
		json.NewEncoder(w).Encode(&v)
	case http.MethodDelete:
		if cas := r.URL.Query().Get("cas"); cas != "" {
			if v := f.vars[path]; v == nil || strconv.FormatUint(v.ModifyIndex, 10) != cas {
				w.WriteHeader(http.StatusConflict)
				json.NewEncoder(w).Encode(f.vars[path])
				return
			}
		}
		f.deletes++
		delete(f.vars, path)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

// serveFakeVars serves an empty fakeVars for the rest of the test and
// returns it with a Nomad API client of it.
func serveFakeVars(t *testing.T) (*fakeVars, *nomadapi.Client) {
	t.Helper()
	f := &fakeVars{vars: map[string]*nomadapi.Variable{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return f, client
}

func (f *fakeVars) counts() (puts, deletes int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.puts, f.deletes
}

// TestPublishOncePerChange: a node's variable is written when its demand
// changes, not every cycle; a new leader rewrites an earlier leader's
// values and deletes those of nodes gone; it deletes its own heartbeat
// when it stops, never a successor's.
func TestPublishOncePerChange(t *testing.T) {
	f, client := serveFakeVars(t)
	ctx := context.Background()
	prefix := wire.DefaultPrefix
	// An earlier leader left values for n1 and a node now gone.
	f.vars[wire.NodePath(prefix, "n1")] = &nomadapi.Variable{Items: wire.Node{Epoch: "old"}.Items()}
	f.vars[wire.NodePath(prefix, "gone")] = &nomadapi.Variable{Items: wire.Node{Epoch: "old"}.Items()}

	p := NewPublisher(client, "i1", nil)
	p.Start("e1")
	if err := p.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	four := map[string]wire.Node{"n1": {Requests: []wire.Request{{Whole: 4}}}, "n2": {}}
	steps := []struct {
		name          string
		want          map[string]wire.Node
		wrote, delete []string
	}{
		{"first cycle: every node, the gone one deleted", four, []string{"n1", "n2"}, []string{"gone"}},
		{"same demand: nothing written", four, nil, nil},
		{"n1's job placed", map[string]wire.Node{"n1": {}, "n2": {}}, []string{"n1"}, nil},
		{"n2 leaves", map[string]wire.Node{"n1": {}}, nil, []string{"n2"}},
		{"n1 still empty: nothing written", map[string]wire.Node{"n1": {}}, nil, nil},
	}
	for _, st := range steps {
		rep, err := p.Publish(ctx, st.want)
		if err != nil || len(rep.Errors) > 0 {
			t.Fatalf("%s: %v %v", st.name, err, rep.Errors)
		}
		if !reflect.DeepEqual(rep.Written, st.wrote) || !reflect.DeepEqual(rep.Deleted, st.delete) {
			t.Fatalf("%s: wrote %v deleted %v, want %v and %v", st.name, rep.Written, rep.Deleted, st.wrote, st.delete)
		}
	}
	// One heartbeat, n1 twice (its four GPUs, then none), n2 once; the
	// gone node and n2 deleted.
	if puts, deletes := f.counts(); puts != 1+2+1 || deletes != 2 {
		t.Fatalf("%d writes and %d deletions, want 4 and 2", puts, deletes)
	}
	got, err := wire.DecodeNode(f.vars[wire.NodePath(prefix, "n1")].Items)
	if err != nil || got.Epoch != "e1" || !got.Empty() {
		t.Fatalf("n1's value: %+v %v", got, err)
	}
	l, err := wire.DecodeLeader(f.vars[wire.LeaderPath(prefix)].Items)
	if err != nil || l.Epoch != "e1" || l.Beat != wire.DefaultBeat || l.Seq != 1 {
		t.Fatalf("heartbeat: %+v %v", l, err)
	}

	// A successor beats; the first leader's Stop leaves its heartbeat.
	q := NewPublisher(client, "i2", nil)
	q.Start("e2")
	if err := q.Heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if f.vars[wire.LeaderPath(prefix)] == nil {
		t.Fatal("a stepping-down leader deleted its successor's heartbeat")
	}
	if rep, err := p.Publish(ctx, four); err != nil || len(rep.Written) > 0 {
		t.Fatalf("published after Stop: %+v %v", rep, err)
	}
	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if f.vars[wire.LeaderPath(prefix)] != nil {
		t.Fatal("the leader's heartbeat outlived its Stop")
	}
}

// TestVerifyRepairsWhatOthersChanged: a node variable deleted or written
// by someone else since the leader wrote it is written again with the
// leader's value, one the leader never wrote is deleted, and the others
// are left alone; a second Verify finds nothing to do, and Verify does
// nothing before the epoch's first Publish or after Stop.
func TestVerifyRepairsWhatOthersChanged(t *testing.T) {
	f, client := serveFakeVars(t)
	ctx := context.Background()
	prefix := wire.DefaultPrefix
	p := NewPublisher(client, "i1", nil)
	p.Start("e1")
	if rep, err := p.Verify(ctx); err != nil || len(rep.Written)+len(rep.Deleted) > 0 {
		t.Fatalf("Verify before the first Publish: %+v %v", rep, err)
	}
	want := map[string]wire.Node{"a": {Requests: []wire.Request{{Whole: 2}}}, "b": {Requests: []wire.Request{{Shares: 25}}}, "c": {}}
	if _, err := p.Publish(ctx, want); err != nil {
		t.Fatal(err)
	}
	if rep, err := p.Verify(ctx); err != nil || len(rep.Written)+len(rep.Deleted) > 0 {
		t.Fatalf("Verify of what the leader wrote: %+v %v", rep, err)
	}

	f.mu.Lock()
	delete(f.vars, wire.NodePath(prefix, "a"))
	f.index++
	f.vars[wire.NodePath(prefix, "b")] = &nomadapi.Variable{Items: wire.Node{Epoch: "e1"}.Items(), ModifyIndex: f.index}
	f.index++
	f.vars[wire.NodePath(prefix, "stranger")] = &nomadapi.Variable{Items: wire.Node{Epoch: "e1", Requests: []wire.Request{{Whole: 8}}}.Items(), ModifyIndex: f.index}
	f.mu.Unlock()

	rep, err := p.Verify(ctx)
	if err != nil || len(rep.Errors) > 0 {
		t.Fatalf("Verify: %v %v", err, rep.Errors)
	}
	if !reflect.DeepEqual(rep.Written, []string{"a", "b"}) || !reflect.DeepEqual(rep.Deleted, []string{"stranger"}) {
		t.Fatalf("Verify wrote %v and deleted %v, want [a b] written again and [stranger] deleted", rep.Written, rep.Deleted)
	}
	for _, id := range []string{"a", "b"} {
		got, err := wire.DecodeNode(f.vars[wire.NodePath(prefix, id)].Items)
		if w := want[id]; err != nil || got.Epoch != "e1" || !got.Same(wire.Node{Epoch: "e1", Requests: w.Requests}) {
			t.Fatalf("%s's value after Verify: %+v %v, want the leader's %+v", id, got, err, w)
		}
	}
	if rep, err := p.Verify(ctx); err != nil || len(rep.Written)+len(rep.Deleted) > 0 {
		t.Fatalf("a second Verify: %+v %v, want nothing to do", rep, err)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	delete(f.vars, wire.NodePath(prefix, "c"))
	if rep, err := p.Verify(ctx); err != nil || len(rep.Written)+len(rep.Deleted) > 0 {
		t.Fatalf("Verify after Stop: %+v %v", rep, err)
	}
}
