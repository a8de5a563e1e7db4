package nomadstandin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/device"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestServiceReadsTheStandIn: the quota service's own Nomad reader
// (nomadwatch.Builder) assembles the stand-in's cluster: every GPU of
// every node, every allocation (over several pages of the listing in the
// largest case) and the pending groups, and sees the event stream's
// frames.
func TestServiceReadsTheStandIn(t *testing.T) {
	for _, tt := range []struct{ nodes, per int }{{20, 100}, {20, 4}, {230, 100}} {
		nodes, per := tt.nodes, tt.per
		t.Run(fmt.Sprintf("nodes=%d,shares_per_gpu=%d", nodes, per), func(t *testing.T) {
			s, err := New(Config{Nodes: nodes, Allocations: 20 * nodes, Projects: 5, Pending: 7, SharesPerGPU: per})
			if err != nil {
				t.Fatal(err)
			}
			hs := httptest.NewServer(s)
			defer hs.Close()
			client, err := nomadapi.NewClient(&nomadapi.Config{Address: hs.URL})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			v, err := nomadwatch.NewBuilder(client, hclog.NewNullLogger(), nomadwatch.Options{}).Build(ctx, quota.Set{}, state.Records{})
			if err != nil {
				t.Fatal(err)
			}
			gpus, used := 0, 0
			for _, n := range v.Snapshot.Nodes {
				gpus += len(n.GPUs)
			}
			for _, a := range v.Snapshot.Allocations {
				used += int(a.Ask.Shares) + 100*a.Ask.WholeGPUs
			}
			if len(v.Snapshot.Nodes) != nodes || gpus != 8*nodes || len(v.Snapshot.Allocations) != 20*nodes || len(v.Snapshot.Pending) != 7 {
				t.Fatalf("nodes %d, GPUs %d, allocations %d, pending %d; want %d, %d, %d, 7",
					len(v.Snapshot.Nodes), gpus, len(v.Snapshot.Allocations), len(v.Snapshot.Pending), nodes, 8*nodes, 20*nodes)
			}
			// 4 whole GPUs and 16 share allocations of 10% per node (one
			// 25% instance at 4 shares per GPU).
			if want := nodes * (4*100 + 16*max(10, 100/per)); used != want {
				t.Errorf("allocations hold %d shares, want %d", used, want)
			}
			ch, err := client.EventStream().Stream(ctx, map[nomadapi.Topic][]string{nomadapi.TopicAll: {"*"}}, 0, &nomadapi.QueryOptions{Namespace: "*"})
			if err != nil {
				t.Fatal(err)
			}
			go s.Probe(1)
			for evs := range ch {
				if evs.Err != nil {
					t.Fatal(evs.Err)
				}
				if len(evs.Events) == 1 && evs.Events[0].Key == "probe-00001" && evs.Events[0].Type == "JobRegistered" {
					job, err := evs.Events[0].Job()
					if err != nil || job == nil || *job.ID != "probe-00001" {
						t.Fatalf("probe event's job = %v, %v", job, err)
					}
					return
				}
			}
		})
	}
}

// TestNodeMetadata: a node's dynamic metadata, as the ranking publisher
// writes and reads it, comes back from /v1/client/metadata and in the node,
// at a new modify index.
func TestNodeMetadata(t *testing.T) {
	s, client := serveStandIn(t, Config{Nodes: 2, Allocations: 4, Projects: 1})
	stubs, _, err := client.Nodes().List(nil)
	if err != nil || len(stubs) != 2 {
		t.Fatalf("nodes %v, %v", stubs, err)
	}
	id := stubs[1].ID
	if _, err := client.Nodes().Meta().Apply(&nomadapi.NodeMetaApplyRequest{NodeID: id, Meta: map[string]*string{"gpushare.rank.x": ptr("1")}}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := client.Nodes().Meta().Read(id, nil)
	if err != nil || got.Dynamic["gpushare.rank.x"] == nil || *got.Dynamic["gpushare.rank.x"] != "1" {
		t.Fatalf("dynamic metadata %+v, %v; want gpushare.rank.x = 1", got, err)
	}
	n, _, err := client.Nodes().Info(id, nil)
	if err != nil || n.Meta["gpushare.rank.x"] != "1" || n.ModifyIndex <= stubs[1].ModifyIndex {
		t.Fatalf("node meta %v at index %d (was %d), %v", n.Meta, n.ModifyIndex, stubs[1].ModifyIndex, err)
	}
	if n.NodeResources == nil || len(n.NodeResources.Devices) == 0 {
		t.Fatal("the node lost its devices with the metadata change")
	}
	if s.Requests()["POST client/metadata"] != 1 {
		t.Errorf("requests %v", s.Requests())
	}
}

// TestStopAndResume: the service's stop (a registration with Stop set,
// enforcing the job modify index) stops the job's allocations and its
// resume runs them again, each at a new version; a registration at a
// stale index is refused, as Nomad refuses it.
func TestStopAndResume(t *testing.T) {
	s, client := serveStandIn(t, Config{Nodes: 2, Allocations: 20, Projects: 1})
	stubs, _, err := client.Jobs().List(&nomadapi.QueryOptions{Namespace: "*"})
	if err != nil || len(stubs) == 0 {
		t.Fatalf("jobs %v, %v", stubs, err)
	}
	q := &nomadapi.QueryOptions{Namespace: stubs[0].Namespace}
	running := func() (n int) {
		allocs, _, err := client.Jobs().Allocations(stubs[0].ID, false, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range allocs {
			if a.ClientStatus == "running" {
				n++
			}
		}
		return n
	}
	before := running()
	job, _, err := client.Jobs().Info(stubs[0].ID, q)
	if err != nil {
		t.Fatal(err)
	}
	wq := &nomadapi.WriteOptions{Namespace: *job.Namespace}
	stale := *job.JobModifyIndex - 1
	job.Stop = ptr(true)
	if _, _, err := client.Jobs().EnforceRegister(job, stale, wq); err == nil {
		t.Fatal("a stop at a stale job modify index was applied")
	}
	resp, _, err := client.Jobs().EnforceRegister(job, *job.JobModifyIndex, wq)
	if err != nil {
		t.Fatal(err)
	}
	stopped, _, err := client.Jobs().Info(stubs[0].ID, q)
	if err != nil || !*stopped.Stop || *stopped.JobModifyIndex != resp.JobModifyIndex || *stopped.Version != *job.Version+1 {
		t.Fatalf("after the stop: %+v, %v", stopped, err)
	}
	if before == 0 || running() != 0 {
		t.Fatalf("running allocations %d before the stop, %d after; want some, then none", before, running())
	}
	if _, err := client.Jobs().TagVersion(*job.ID, *stopped.Version, "suspended", "by the test", wq); err != nil {
		t.Fatal(err)
	}
	if v, _, err := client.Jobs().VersionByTag(*job.ID, "suspended", q); err != nil || *v.Version != *stopped.Version {
		t.Fatalf("the tagged version: %+v, %v", v, err)
	}
	if _, err := client.Jobs().UntagVersion(*job.ID, "suspended", wq); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Jobs().UntagVersion(*job.ID, "suspended", wq); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("removing a tag no version carries: %v, want not found", err)
	}
	stopped.Stop = ptr(false)
	if _, _, err := client.Jobs().EnforceRegister(stopped, *stopped.JobModifyIndex, wq); err != nil {
		t.Fatal(err)
	}
	if running() != before {
		t.Errorf("running allocations after the resume %d, want %d", running(), before)
	}
	if regs := s.Registrations(); len(regs) != 2 || !regs[0].Stop || regs[1].Stop {
		t.Errorf("registrations %+v, want a stop then a resume", regs)
	}
}

// TestVariables: the service's node demand goes to Nomad Variables; the
// stand-in keeps them, lists them by prefix and refuses a write or delete
// at a stale index (check-and-set), as Nomad does.
func TestVariables(t *testing.T) {
	_, client := serveStandIn(t, Config{Nodes: 1, Allocations: 1, Projects: 1})
	vars := client.Variables()
	v, _, err := vars.CheckedCreate(&nomadapi.Variable{Path: "gpushare/demand/nodes/a", Items: nomadapi.VariableItems{"whole": "1"}}, nil)
	if err != nil || v.ModifyIndex == 0 {
		t.Fatalf("created %+v, %v", v, err)
	}
	if _, _, err := vars.CheckedCreate(&nomadapi.Variable{Path: "gpushare/demand/nodes/a"}, nil); err == nil {
		t.Fatal("created a variable twice")
	}
	if _, _, err := vars.Update(&nomadapi.Variable{Path: "gpushare/demand/leader", Items: nomadapi.VariableItems{"beat": "1"}}, nil); err != nil {
		t.Fatal(err)
	}
	metas, _, err := vars.PrefixList("gpushare/demand/nodes/", nil)
	if err != nil || len(metas) != 1 || metas[0].Path != "gpushare/demand/nodes/a" {
		t.Fatalf("listed %+v, %v; want the one node", metas, err)
	}
	if _, err := vars.CheckedDelete("gpushare/demand/nodes/a", v.ModifyIndex+100, nil); err == nil {
		t.Fatal("deleted at a stale index")
	}
	if _, err := vars.CheckedDelete("gpushare/demand/nodes/a", v.ModifyIndex, nil); err != nil {
		t.Fatal(err)
	}
	if got, _, err := vars.Peek("gpushare/demand/nodes/a", nil); err != nil || got != nil {
		t.Fatalf("after the delete: %+v, %v", got, err)
	}
}

// BenchmarkNodeJSONSize reports the bytes of one 8 x H100 node's JSON in
// Nomad's API (api.Node, as /v1/node/:id answers; the list stub with
// resources is about the same) in the plugin's real layout (4 GPUs in
// the share family, 4 whole), for each shares_per_gpu.
func BenchmarkNodeJSONSize(b *testing.B) {
	for _, per := range []int{100, 50, 20, 10, 4} {
		b.Run(fmt.Sprintf("shares_per_gpu=%d", per), func(b *testing.B) {
			var size, instances int
			for b.Loop() {
				groups, err := device.SimulatedLayout(gpu.SimOptions{Preset: gpu.PresetH100}, per, 4)
				if err != nil {
					b.Fatal(err)
				}
				n := newNode(0, device.NodeDevices(groups))
				raw, err := json.Marshal(n)
				if err != nil {
					b.Fatal(err)
				}
				size, instances = len(raw), 0
				for _, g := range n.NodeResources.Devices {
					instances += len(g.Instances)
				}
			}
			b.ReportMetric(float64(size), "node-bytes")
			b.ReportMetric(float64(size*5000)/(1<<20), "MiB-at-5000-nodes")
			b.ReportMetric(float64(instances), "instances")
		})
	}
}

// BenchmarkCycleParts splits one polling cycle of the quota service at
// 1,000 nodes x 8 GPUs and 20,000 allocations into its reads of Nomad
// (the listings and the job and node reads; cached after the first) and
// Assemble, then the plan with the default policy.
func BenchmarkCycleParts(b *testing.B) {
	_, client := serveStandIn(b, Config{Nodes: 1000, Allocations: 20000, Projects: 100, Pending: 200})
	builder := nomadwatch.NewBuilder(client, hclog.NewNullLogger(), nomadwatch.Options{})
	ctx := context.Background()
	if _, err := builder.Build(ctx, quota.Set{}, state.Records{}); err != nil { // warm the caches
		b.Fatal(err)
	}
	measureCycles(b, builder)
}

// serveStandIn serves a stand-in of cluster c over HTTP for the rest of
// the test and returns it with a Nomad API client of it.
func serveStandIn(tb testing.TB, c Config) (*Server, *nomadapi.Client) {
	tb.Helper()
	s, err := New(c)
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(s)
	tb.Cleanup(hs.Close)
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: hs.URL})
	if err != nil {
		tb.Fatal(err)
	}
	return s, client
}

// measureCycles times Build and plan of each benchmark iteration and
// reports both per op.
func measureCycles(b *testing.B, builder *nomadwatch.Builder) {
	ctx := context.Background()
	var build, planning, assembling time.Duration
	var segments int
	var planner plan.Planner // as the service plans
	for b.Loop() {
		t0 := time.Now()
		v, err := builder.Build(ctx, quota.Set{}, state.Records{})
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		times := builder.LastTimes()
		assembling, segments = assembling+times.Assembling, segments+times.Segments
		pol, err := plan.PolicyByName("gpushare", 1, v.Snapshot)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := planner.Plan(v.Snapshot, plan.Options{Policy: pol}); err != nil {
			b.Fatal(err)
		}
		build, planning = build+t1.Sub(t0), planning+time.Since(t1)
	}
	b.ReportMetric(float64(build.Milliseconds())/float64(b.N), "build-ms/op")
	b.ReportMetric(float64(planning.Milliseconds())/float64(b.N), "plan-ms/op")
	b.ReportMetric(float64(assembling.Microseconds())/1000/float64(b.N), "assemble-ms/op")
	b.ReportMetric(float64(segments)/float64(b.N), "segments/op")
}
