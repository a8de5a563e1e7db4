package alloctrack

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	"github.com/hashicorp/nomad/api"
)

// TestPublishedDemand: which demand Read takes from the quota service's
// variables, by the state of the heartbeat and of the node's value.
func TestPublishedDemand(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	beat := 10 * time.Second
	leader := nodedemand.Leader{Epoch: "e1", Beat: beat, Seq: 3}
	one := &nodedemand.Node{Epoch: "e1", Requests: []nodedemand.Request{{Whole: 2}, {Shares: 25}}}
	live := func(p published) published { p.leaderLive, p.nodeLive = true, true; return p }
	tests := []struct {
		name       string
		pub        published
		now        time.Time
		allocsIdx  uint64
		allocsAt   time.Time
		wantFresh  bool
		wantDemand []Demand
		wantWhy    string
	}{
		{name: "fresh: the node's requests in order", pub: live(published{leader: leader, leaderSeen: t0, node: one, nodeIndex: 50}), now: t0.Add(beat),
			wantFresh: true, wantDemand: []Demand{{Key: "service/e1/00000", Whole: 2}, {Key: "service/e1/00001", Shares: 25}}},
		{name: "fresh, no variable for the node: no demand", pub: live(published{leader: leader, leaderSeen: t0}), now: t0, wantFresh: true},
		{name: "fresh, value of an earlier leader: no demand", pub: live(published{leader: leader, leaderSeen: t0, node: &nodedemand.Node{Epoch: "e0", Requests: one.Requests}}),
			now: t0, wantFresh: true},
		{name: "stale: no heartbeat for 3 beats", pub: live(published{leader: leader, leaderSeen: t0, node: one}), now: t0.Add(3*beat + time.Second),
			wantWhy: "no heartbeat for 31s"},
		{name: "absent: the service does not publish", pub: live(published{leaderErr: errors.New("no heartbeat at gpushare/demand/leader")}), now: t0,
			wantWhy: "no heartbeat at"},
		{name: "nonsense value: the plugin reads Nomad itself", pub: live(published{leader: leader, leaderSeen: t0, nodeErr: errors.New("published demand of this node: bad")}),
			now: t0, wantWhy: "published demand of this node"},
		{name: "variables not read yet", pub: published{leader: leader, leaderSeen: t0, node: one}, now: t0, wantWhy: "cannot be read"},
		{name: "value older than the newest placement on the node: held only, within the grace", pub: live(published{leader: leader, leaderSeen: t0, node: one, nodeIndex: 50}),
			now: t0.Add(time.Second), allocsIdx: 60, allocsAt: t0, wantFresh: true},
		{name: "value older than a placement, past the grace: taken", pub: live(published{leader: leader, leaderSeen: t0, node: one, nodeIndex: 50}),
			now: t0.Add(DefaultPublishedGrace + time.Second), allocsIdx: 60, allocsAt: t0, wantFresh: true,
			wantDemand: []Demand{{Key: "service/e1/00000", Whole: 2}, {Key: "service/e1/00001", Shares: 25}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &Tracker{cfg: Config{Demand: true, Published: PublishedConfig{Prefix: nodedemand.DefaultPrefix}}}
			tr.view.pub = tt.pub
			got, st := tr.publishedDemand(tt.now, tt.allocsIdx, tt.allocsAt)
			if st.Fresh != tt.wantFresh || !strings.Contains(st.Why, tt.wantWhy) {
				t.Fatalf("state %+v, want fresh %v and a reason with %q", st, tt.wantFresh, tt.wantWhy)
			}
			if !reflect.DeepEqual(got, tt.wantDemand) {
				t.Fatalf("demand %v, want %v", got, tt.wantDemand)
			}
		})
	}
	tr := &Tracker{cfg: Config{Demand: true}}
	if _, st := tr.publishedDemand(t0, 0, t0); st.Fresh {
		t.Fatal("taken without demand_var")
	}
}

// fakePublishing is a fake Nomad API with one node, no allocations, one
// blocked evaluation, and the quota service's variables as set.
type fakePublishing struct {
	mu    sync.Mutex
	vars  map[string]*api.Variable
	index uint64
	evals int
}

func (f *fakePublishing) set(path string, items map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index++
	if items == nil {
		delete(f.vars, path)
		return
	}
	f.vars[path] = &api.Variable{Namespace: "default", Path: path, Items: items, ModifyIndex: f.index}
}

func (f *fakePublishing) listings() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.evals
}

func (f *fakePublishing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("X-Nomad-Index", "7")
	switch {
	case r.URL.Path == "/v1/node/n1":
		json.NewEncoder(w).Encode(&api.Node{ID: "n1", ModifyIndex: 7})
	case r.URL.Path == "/v1/node/n1/allocations":
		json.NewEncoder(w).Encode([]*api.Allocation{})
	case r.URL.Path == "/v1/evaluations":
		f.evals++
		json.NewEncoder(w).Encode([]*api.Evaluation{})
	case strings.HasPrefix(r.URL.Path, "/v1/var/"):
		v := f.vars[strings.TrimPrefix(r.URL.Path, "/v1/var/")]
		if v == nil || r.URL.Query().Get("namespace") != "default" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(v)
	default:
		http.NotFound(w, r)
	}
}

// TestReadTakesPublishedDemand: while the heartbeat is fresh, Read takes
// the node's published demand and lists no blocked evaluation; a nonsense
// value, or no heartbeat, makes it list them again.
func TestReadTakesPublishedDemand(t *testing.T) {
	f := &fakePublishing{vars: map[string]*api.Variable{}, index: 10}
	srv := httptest.NewServer(f)
	defer srv.Close()
	prefix := nodedemand.DefaultPrefix
	f.set(nodedemand.LeaderPath(prefix), nodedemand.Leader{Epoch: "e1", Beat: time.Minute, Seq: 1}.Items())
	f.set(nodedemand.NodePath(prefix, "n1"), nodedemand.Node{Epoch: "e1", Requests: []nodedemand.Request{{Whole: 4}}}.Items())
	tr, err := New(Config{Address: srv.URL, NodeID: "n1", Demand: true, Published: PublishedConfig{Prefix: prefix}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o := WatchOptions{MinInterval: time.Millisecond}
	follow := func() {
		t.Helper()
		for _, step := range []func(context.Context, string, bool, WatchOptions) error{tr.watchLeader, tr.watchPublishedNode} {
			if err := step(ctx, "n1", false, o); err != nil {
				t.Fatal(err)
			}
		}
	}
	follow()
	snap, err := tr.Read(ctx, ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !snap.FromService || len(snap.Demand) != 1 || snap.Demand[0].Whole != 4 || f.listings() != 0 {
		t.Fatalf("fresh: from service %v, demand %v, %d evaluation listings", snap.FromService, snap.Demand, f.listings())
	}

	for _, tt := range []struct {
		name   string
		leader map[string]string
		node   map[string]string
		why    string
	}{
		{"nonsense node value", nodedemand.Leader{Epoch: "e1", Beat: time.Minute, Seq: 2}.Items(), map[string]string{"epoch": "e1", "demand": `[{"whole":-3}]`}, "neither"},
		{"nonsense heartbeat", map[string]string{"epoch": "e1", "beat": "1ns", "seq": "3"}, nodedemand.Node{Epoch: "e1"}.Items(), "heartbeat period"},
		{"no heartbeat", nil, nodedemand.Node{Epoch: "e1"}.Items(), "does not publish"},
	} {
		f.set(nodedemand.LeaderPath(prefix), tt.leader)
		f.set(nodedemand.NodePath(prefix, "n1"), tt.node)
		follow()
		before := f.listings()
		snap, err := tr.Read(ctx, ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if snap.FromService || f.listings() != before+1 || !strings.Contains(snap.Published.Why, tt.why) {
			t.Fatalf("%s: from service %v (%q), %d evaluation listings", tt.name, snap.FromService, snap.Published.Why, f.listings()-before)
		}
	}
}
