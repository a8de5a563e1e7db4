package nomadwatch

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	nomadapi "github.com/hashicorp/nomad/api"
)

// constrainedCluster is three GPU nodes of the default node pool: n1 in
// dc1 (rack r1, A100 80 GiB), n2 in dc1 (rack r2, A100 80 GiB), n3 in dc2
// (no rack, H100 40 GiB, kernel 6.1). Each share group has a uuid
// attribute of its own: node ID, colon, group name.
func constrainedCluster() ([]*nomadapi.NodeListStub, map[string]*nomadapi.Node) {
	mk := func(id, dc, pool, model string, mem int64, attrs, meta map[string]string) (*nomadapi.NodeListStub, *nomadapi.Node) {
		stub := node()
		stub.ID, stub.Datacenter, stub.NodePool = id, dc, pool
		for _, g := range stub.NodeResources.Devices {
			g.Name = strings.Replace(g.Name, "A100", model, 1)
			g.Attributes = map[string]*nomadapi.Attribute{"memory": {IntVal: ptr(mem), Unit: "MiB"}, "model": {StringVal: ptr(model)}}
			if g.Type == "gpu-share" {
				g.Attributes["uuid"] = &nomadapi.Attribute{StringVal: ptr(id + ":" + g.Name)}
			}
		}
		full := &nomadapi.Node{ID: id, Name: id + "-name", Status: "ready", Datacenter: dc, NodePool: pool, Attributes: attrs, Meta: meta, NodeResources: stub.NodeResources}
		return stub, full
	}
	var stubs []*nomadapi.NodeListStub
	info := map[string]*nomadapi.Node{}
	for _, n := range []struct {
		id, dc, pool, model string
		mem                 int64
		attrs, meta         map[string]string
	}{
		{"n1", "dc1", "default", "A100", 81920, map[string]string{"kernel.version": "5.15.0", "cpu.arch": "amd64"}, map[string]string{"rack": "r1", "tags": "ssd,fast"}},
		{"n2", "dc1", "default", "A100", 81920, map[string]string{"kernel.version": "5.4.0", "cpu.arch": "amd64"}, map[string]string{"rack": "r2", "tags": "hdd"}},
		{"n3", "dc2", "", "H100", 40960, map[string]string{"kernel.version": "6.1.0", "cpu.arch": "arm64"}, nil},
	} {
		s, f := mk(n.id, n.dc, n.pool, n.model, n.mem, n.attrs, n.meta)
		stubs = append(stubs, s)
		info[n.id] = f
	}
	return stubs, info
}

func TestConstrainPending(t *testing.T) {
	tests := []struct {
		name   string
		tweak  func(j *nomadapi.Job)
		want   []string // admitted nodes; nil: every node
		reason string   // in NodesReason
		models []string
	}{
		{name: "no constraint", tweak: func(*nomadapi.Job) {}},
		{name: "datacenter", tweak: func(j *nomadapi.Job) { j.Datacenters = []string{"dc2"} }, want: []string{"n3"}, reason: "datacenters [dc2] filtered 2"},
		{name: "datacenter glob", tweak: func(j *nomadapi.Job) { j.Datacenters = []string{"dc*"} }},
		{name: "node pool", tweak: func(j *nomadapi.Job) { j.NodePool = ptr("gpu-b") }, want: []string{}, reason: `node pool "gpu-b" filtered 3`},
		{name: "node pool all", tweak: func(j *nomadapi.Job) { j.NodePool = ptr("all") }},
		{name: "meta equals", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${meta.rack}", "=", "r1")) }, want: []string{"n1"}, reason: "constraint ${meta.rack} = r1 filtered 2"},
		{name: "not equal, missing counts as different", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${meta.rack}", "!=", "r1")) }, want: []string{"n2", "n3"}},
		{name: "is_set", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${meta.rack}", "is_set", "")) }, want: []string{"n1", "n2"}},
		{name: "is_not_set", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${meta.rack}", "is_not_set", "")) }, want: []string{"n3"}},
		{name: "regexp on attribute", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${attr.cpu.arch}", "regexp", "^arm")) }, want: []string{"n3"}},
		{name: "version", tweak: func(j *nomadapi.Job) {
			j.Constrain(nomadapi.NewConstraint("${attr.kernel.version}", "version", ">= 5.10"))
		}, want: []string{"n1", "n3"}},
		{name: "semver", tweak: func(j *nomadapi.Job) {
			j.Constrain(nomadapi.NewConstraint("${attr.kernel.version}", "semver", "< 6.0.0"))
		}, want: []string{"n1", "n2"}},
		{name: "set_contains", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${meta.tags}", "set_contains", "fast,ssd")) }, want: []string{"n1"}},
		{name: "set_contains_any", tweak: func(j *nomadapi.Job) {
			j.Constrain(nomadapi.NewConstraint("${meta.tags}", "set_contains_any", "hdd,nvme"))
		}, want: []string{"n2"}},
		{name: "lexical order", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${node.unique.name}", ">", "n2")) }, want: []string{"n2", "n3"}},
		{name: "node fields", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${node.datacenter}", "=", "dc1")) }, want: []string{"n1", "n2"}},
		{name: "distinct_hosts is not a feasibility check", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("", "distinct_hosts", "true")) }},
		{name: "group constraint", tweak: func(j *nomadapi.Job) { j.TaskGroups[0].Constrain(nomadapi.NewConstraint("${meta.rack}", "=", "r2")) }, want: []string{"n2"}},
		{name: "device memory with units", tweak: func(j *nomadapi.Job) {
			d := j.TaskGroups[0].Tasks[0].Resources.Devices[0]
			d.Constraints = append(d.Constraints, nomadapi.NewConstraint("${device.attr.memory}", ">=", "64 GiB"))
		}, want: []string{"n1", "n2"}, reason: `device "nvidia/gpu" filtered 1`, models: []string{"A100"}},
		{name: "device model", tweak: func(j *nomadapi.Job) {
			d := j.TaskGroups[0].Tasks[0].Resources.Devices[0]
			d.Constraints = append(d.Constraints, nomadapi.NewConstraint("${device.model}", "=", "H100"))
		}, want: []string{"n3"}, models: []string{"H100"}},
		{name: "device ids of a share group", tweak: func(j *nomadapi.Job) {
			d := j.TaskGroups[0].Tasks[0].Resources.Devices[0]
			d.Name, d.Count = "nvidia/gpu-share", ptr(uint64(10))
			d.Constraints = append(d.Constraints, nomadapi.NewConstraint("${device.ids}", "set_contains", "GPU-d-s42"))
		}, models: []string{"A100", "H100"}},
		{name: "device uuid of one share group", tweak: func(j *nomadapi.Job) {
			d := j.TaskGroups[0].Tasks[0].Resources.Devices[0]
			d.Name, d.Count = "nvidia/gpu-share", ptr(uint64(10))
			d.Constraints = append(d.Constraints, nomadapi.NewConstraint("${device.attr.uuid}", "=", "n2:A100-GPU-d"))
		}, want: []string{"n2"}, reason: `device "nvidia/gpu-share" filtered 2`, models: []string{"A100"}},
		{name: "device ids that no group has", tweak: func(j *nomadapi.Job) {
			d := j.TaskGroups[0].Tasks[0].Resources.Devices[0]
			d.Constraints = append(d.Constraints, nomadapi.NewConstraint("${device.ids}", "set_contains", "GPU-a,GPU-c"))
		}, want: []string{}, reason: `device "nvidia/gpu" filtered 3`},
		{name: "nothing admits", tweak: func(j *nomadapi.Job) { j.Constrain(nomadapi.NewConstraint("${meta.rack}", "=", "r9")) }, want: []string{}, reason: "filtered 3"},
	}
	for _, tt := range tests {
		for _, reading := range []string{"listed", "cached"} {
			t.Run(tt.name+"/"+reading, func(t *testing.T) {
				sp := spec("a", "queued", "nvidia/gpu", 1)
				tt.tweak(sp)
				in := constrainedInputs(reading == "cached")
				in.Jobs, in.Specs = []*nomadapi.JobListStub{jobStub("a", "queued", 1, false, nil)}, map[string]*nomadapi.Job{"a/queued": sp}
				checkAdmission(t, Assemble(in), tt.want, tt.reason, tt.models)
			})
		}
	}
}

// constrainedInputs are constrainedCluster's nodes as a listing gives
// them, or as the cache keeps them (device groups without their
// instances, read once).
func constrainedInputs(cached bool) Inputs {
	stubs, info := constrainedCluster()
	in := Inputs{Nodes: stubs, NodeInfo: info, Now: time.Unix(100, 0)}
	if !cached {
		return in
	}
	in = Inputs{NodeInfo: map[string]*nomadapi.Node{}, Devices: map[string]*nodeDevices{}, Now: in.Now}
	for _, s := range stubs {
		e := newNodeEntry(info[s.ID])
		in.Nodes, in.NodeInfo[s.ID], in.Devices[s.ID] = append(in.Nodes, e.stub), e.full, e.dev
	}
	return in
}

// checkAdmission checks where the view's one pending group may run and
// that the plan keeps it there.
func checkAdmission(t *testing.T, v *View, want []string, reason string, models []string) {
	t.Helper()
	if len(v.Snapshot.Pending) != 1 {
		t.Fatalf("pending %+v, want one group", v.Snapshot.Pending)
	}
	w := v.Snapshot.Pending[0]
	if (w.Nodes == nil) != (want == nil) || !slices.Equal(w.Nodes, want) {
		t.Errorf("nodes %q, want %q (reason %q)", w.Nodes, want, w.NodesReason)
	}
	if !strings.Contains(w.NodesReason, reason) {
		t.Errorf("reason %q, want it to say %q", w.NodesReason, reason)
	}
	if !slices.Equal(w.Ask.Models, models) {
		t.Errorf("models %q, want %q", w.Ask.Models, models)
	}
	res, err := plan.Plan(v.Snapshot, plan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if unplaceable := len(res.Unplaceable) == 1; unplaceable != (want != nil && len(want) == 0) {
		t.Errorf("unplaceable %+v", res.Unplaceable)
	}
	for _, a := range res.Actions {
		if a.Kind == plan.Place && want != nil && !slices.Contains(want, a.Node) {
			t.Errorf("placed on %s, which its constraints refuse", a.Node)
		}
	}
}
