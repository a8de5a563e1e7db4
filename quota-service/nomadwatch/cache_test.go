package nomadwatch

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// wire turns an API object into an event payload as the stream delivers it
// (JSON decoded into maps).
func wire(t testing.TB, field string, obj any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(map[string]any{field: obj})
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// step is one thing that happens to a cache: a listing adopted or an
// event applied.
type step struct {
	list *listing
	ev   func(t *testing.T) *nomadapi.Event
}

func nodeEv(id string, index uint64, typ string) func(t *testing.T) *nomadapi.Event {
	return func(t *testing.T) *nomadapi.Event {
		n := &nomadapi.Node{ID: id, ModifyIndex: index, Status: "ready"}
		return &nomadapi.Event{Topic: nomadapi.TopicNode, Type: typ, Key: id, Index: index, Payload: wire(t, "Node", n)}
	}
}

func allocEv(id, job string, index, placed uint64, desired, client string) func(t *testing.T) *nomadapi.Event {
	return func(t *testing.T) *nomadapi.Event {
		a := &nomadapi.Allocation{ID: id, Namespace: "default", JobID: job, TaskGroup: "g", NodeID: "n1", DesiredStatus: desired,
			ClientStatus: client, CreateIndex: placed, ModifyIndex: index, AllocModifyIndex: placed,
			TaskStates: map[string]*nomadapi.TaskState{"t": {State: "running"}}}
		return &nomadapi.Event{Topic: nomadapi.TopicAllocation, Type: "AllocationUpdated", Key: id, Index: index, Payload: wire(t, "Allocation", a)}
	}
}

func jobEv(id string, index uint64, stop, deleted bool) func(t *testing.T) *nomadapi.Event {
	return func(t *testing.T) *nomadapi.Event {
		j := &nomadapi.Job{ID: ptr(id), Namespace: ptr("default"), Type: ptr("batch"), Status: ptr("running"), Stop: ptr(stop),
			Priority: ptr(50), ModifyIndex: ptr(index), JobModifyIndex: ptr(index), Meta: map[string]string{"team": "a"}}
		p := wire(t, "Job", j)
		typ := "JobRegistered"
		if deleted {
			p["Deleted"], typ = true, "JobDeregistered"
		}
		return &nomadapi.Event{Topic: nomadapi.TopicJob, Type: typ, Key: id, Index: index, Payload: p}
	}
}

// listed is a listing of all kinds at index at.
func listed(at uint64, nodes map[string]uint64, allocs map[string]uint64, jobs map[string]uint64) *listing {
	l := &listing{kinds: allKinds, index: [numKinds]uint64{at, at, at},
		nodes: map[string]nodeEntry{}, allocs: map[string]allocEntry{}, jobs: map[string]*nomadapi.JobListStub{}}
	for id, i := range nodes {
		n := &nomadapi.Node{ID: id, ModifyIndex: i, Status: "ready"}
		l.nodes[id] = newNodeEntry(n)
	}
	for id, i := range allocs {
		l.allocs[id] = allocEntry{stub: &nomadapi.AllocationListStub{ID: id, Namespace: "default", JobID: "j1", TaskGroup: "g",
			NodeID: "n1", DesiredStatus: "run", ClientStatus: "running", ModifyIndex: i, JobVersion: 3}, versionKnown: true}
	}
	for id, i := range jobs {
		l.jobs[Key("default", id)] = &nomadapi.JobListStub{ID: id, Namespace: "default", Type: "batch", Status: "running", ModifyIndex: i}
	}
	return l
}

// contents describes a cache: "kind id@index" per object, allocations
// with "?" when their job version is unknown and "stop" for stopped jobs.
func contents(c *cache) []string {
	var out []string
	for id, n := range c.nodes {
		out = append(out, fmt.Sprintf("node %s@%d", id, n.full.ModifyIndex))
	}
	for id, a := range c.allocs {
		v := ""
		if !a.versionKnown {
			v = "?"
		}
		if a.stub.TaskStates != nil {
			v += " with task states"
		}
		out = append(out, fmt.Sprintf("alloc %s@%d%s", id, a.stub.ModifyIndex, v))
	}
	for key, j := range c.jobs {
		s := ""
		if j.Stop {
			s = " stop"
		}
		out = append(out, fmt.Sprintf("job %s@%d%s", key, j.ModifyIndex, s))
	}
	sort.Strings(out)
	return out
}

// TestCacheApply: event sequences, with and around listings, leave the
// cache holding what Nomad holds.
func TestCacheApply(t *testing.T) {
	base := listed(100, map[string]uint64{"n1": 90}, map[string]uint64{"a1": 95}, map[string]uint64{"j1": 80})
	tests := []struct {
		name  string
		steps []step
		want  []string
	}{
		{"a new allocation is added, its job version unknown", []step{{list: base}, {ev: allocEv("a2", "j1", 101, 101, "run", "pending")}},
			[]string{"alloc a1@95", "alloc a2@101?", "job default/j1@80", "node n1@90"}},
		{"a client update keeps the listed job version and drops task states", []step{{list: base}, {ev: allocEv("a1", "j1", 102, 60, "run", "complete")}},
			[]string{"alloc a1@102", "job default/j1@80", "node n1@90"}},
		{"an in-place update after the listing makes the version unknown", []step{{list: base}, {ev: allocEv("a1", "j1", 102, 102, "run", "running")}},
			[]string{"alloc a1@102?", "job default/j1@80", "node n1@90"}},
		{"an allocation told to stop leaves", []step{{list: base}, {ev: allocEv("a1", "j1", 103, 60, "stop", "running")}},
			[]string{"job default/j1@80", "node n1@90"}},
		{"an event older than the listing is ignored", []step{{list: base}, {ev: allocEv("a1", "j1", 94, 60, "run", "pending")},
			{ev: allocEv("a0", "j1", 99, 60, "run", "running")}, {ev: nodeEv("n1", 89, "NodeRegistration")}},
			[]string{"alloc a1@95", "job default/j1@80", "node n1@90"}},
		{"a stopped job is updated, a purged one leaves with its allocations", []step{{list: base}, {ev: jobEv("j1", 104, true, false)},
			{ev: jobEv("j1", 105, true, true)}},
			[]string{"node n1@90"}},
		{"a deregistered node leaves", []step{{list: base}, {ev: nodeEv("n1", 106, "NodeDeregistration")}, {ev: nodeEv("n2", 107, "NodeRegistration")}},
			[]string{"alloc a1@95", "job default/j1@80", "node n2@107"}},
		{"a listing older than an event keeps the event's object and deletion", []step{{list: base},
			{ev: jobEv("j1", 120, true, false)}, {ev: nodeEv("n1", 121, "NodeDeregistration")}, {ev: allocEv("a3", "j1", 122, 122, "run", "pending")},
			{list: listed(110, map[string]uint64{"n1": 90}, map[string]uint64{"a1": 95}, map[string]uint64{"j1": 80})}},
			[]string{"alloc a1@95", "alloc a3@122?", "job default/j1@120 stop"}},
		{"a deletion replayed after the object came back deletes nothing", []step{{list: base},
			{ev: jobEv("j1", 75, false, true)}, {ev: nodeEv("n1", 85, "NodeDeregistration")}, {ev: allocEv("a1", "j1", 93, 60, "stop", "running")}},
			[]string{"alloc a1@95", "job default/j1@80", "node n1@90"}},
		{"the last of two changes in one transaction wins", []step{{list: base},
			{ev: jobEv("j2", 110, false, false)}, {ev: jobEv("j2", 110, true, false)}},
			[]string{"alloc a1@95", "job default/j1@80", "job default/j2@110 stop", "node n1@90"}},
		{"a newer listing replaces and removes", []step{{list: base}, {ev: allocEv("a2", "j1", 101, 101, "run", "pending")},
			{list: listed(130, map[string]uint64{"n1": 125}, map[string]uint64{"a1": 95}, map[string]uint64{"j1": 80, "j2": 128})}},
			[]string{"alloc a1@95", "job default/j1@80", "job default/j2@128", "node n1@125"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache()
			for i, st := range tt.steps {
				if st.list != nil {
					c.adopt(st.list)
					continue
				}
				if err := c.apply(st.ev(t)); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
			}
			if got := contents(c); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("cache = %q, want %q", got, tt.want)
			}
			checkOrder(t, c)
			checkUnversioned(t, c)
		})
	}
}

// checkUnversioned checks that readVersions would look at every cached
// allocation whose job version is unknown.
func checkUnversioned(t *testing.T, c *cache) {
	t.Helper()
	for id, e := range c.allocs {
		if !e.versionKnown && !c.unversioned[id] {
			t.Errorf("allocation %s's job version is unknown, but it is not among those readVersions looks at (%v)", id, c.unversioned)
		}
	}
}

// checkOrder checks that the cache's allocation order holds every cached
// allocation once, sorted by node and ID.
func checkOrder(t *testing.T, c *cache) {
	t.Helper()
	var want []allocRef
	for _, e := range c.allocs {
		want = append(want, refOf(e.stub))
	}
	slices.SortFunc(want, compareAllocRefs)
	if !slices.Equal(c.order, want) {
		t.Errorf("allocation order %v, want %v", c.order, want)
	}
}

// TestCacheKeepsAllocationOrder: allocations that come and go through
// events, on several nodes, keep the order Assemble reads them in.
func TestCacheKeepsAllocationOrder(t *testing.T) {
	c := newCache()
	c.adopt(listed(10, nil, map[string]uint64{"a5": 5}, nil))
	index := uint64(10)
	for _, a := range []struct {
		id, node, desired string
	}{{"a3", "n2", "run"}, {"a1", "n9", "run"}, {"a4", "n1", "run"}, {"a2", "n2", "run"}, {"a1", "n9", "stop"}, {"a0", "n2", "run"}, {"a5", "n1", "stop"}} {
		index++
		al := &nomadapi.Allocation{ID: a.id, Namespace: "default", JobID: "j", TaskGroup: "g", NodeID: a.node, DesiredStatus: a.desired,
			ClientStatus: "running", CreateIndex: index, ModifyIndex: index, AllocModifyIndex: index}
		if err := c.apply(&nomadapi.Event{Topic: nomadapi.TopicAllocation, Type: "AllocationUpdated", Key: a.id, Index: index, Payload: wire(t, "Allocation", al)}); err != nil {
			t.Fatal(err)
		}
		checkOrder(t, c)
	}
	want := []allocRef{{"n1", "a4"}, {"n2", "a0"}, {"n2", "a2"}, {"n2", "a3"}}
	if !slices.Equal(c.order, want) {
		t.Errorf("order %v, want %v", c.order, want)
	}
}

// TestCacheAdoptCounts: adopting a listing counts what the cache had
// wrong, and nothing for what events brought after the listing.
func TestCacheAdoptCounts(t *testing.T) {
	c := newCache()
	c.adopt(listed(100, map[string]uint64{"n1": 90, "n2": 91}, map[string]uint64{"a1": 95, "a2": 96}, map[string]uint64{"j1": 80}))
	// Events lost: a3 placed at 110, a2 stopped at 111, j1 updated at 112.
	// Event applied: a4 placed at 140 (after the next listing).
	if err := c.apply(allocEv("a4", "j1", 140, 140, "run", "pending")(t)); err != nil {
		t.Fatal(err)
	}
	got := c.adopt(listed(130, map[string]uint64{"n1": 90, "n2": 91}, map[string]uint64{"a1": 95, "a3": 110}, map[string]uint64{"j1": 112}))
	want := []Change{{Kind: "node"}, {Kind: "allocation", Added: 1, Removed: 1}, {Kind: "job", Changed: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("changes = %+v, want %+v", got, want)
	}
	if _, ok := c.allocs["a4"]; !ok {
		t.Errorf("the allocation placed after the listing was dropped")
	}
}

// TestCacheSkipsUnchangedNode: a node event whose modify index the cache
// holds is not decoded (its device inventory is large).
func TestCacheSkipsUnchangedNode(t *testing.T) {
	c := newCache()
	c.adopt(listed(100, map[string]uint64{"n1": 90}, nil, nil))
	ev := &nomadapi.Event{Topic: nomadapi.TopicNode, Type: "NodeEvent", Key: "n1", Index: 101,
		Payload: map[string]any{"Node": map[string]any{"ID": "n1", "ModifyIndex": float64(90), "Attributes": "not a map"}}}
	if err := c.apply(ev); err != nil {
		t.Errorf("an unchanged node was decoded: %v", err)
	}
	ev.Payload["Node"].(map[string]any)["ModifyIndex"] = float64(101)
	if err := c.apply(ev); err == nil {
		t.Errorf("a changed node that does not decode was accepted")
	}
}
