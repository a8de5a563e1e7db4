package service

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	wire "github.com/gpushare/nomad-gpushare/vocab/nodedemand"
)

// TestDemandFollowsThePlan: the node demand is computed again for every
// new plan and for a plan whose actions the cycle changed, and published
// unless the last Publish of the same epoch wrote that very demand in
// full (a Publish that deferred nodes or failed is made again, and a new
// epoch, a new leadership, publishes everything).
func TestDemandFollowsThePlan(t *testing.T) {
	var d demand
	computed := 0
	compute := func(*cluster.Snapshot, plan.Result) map[string]wire.Node {
		computed++
		return map[string]wire.Node{"n": {}}
	}
	place := []plan.Action{{Kind: plan.Place, Job: "j", Node: "n"}}
	cycle := func(gen uint64, actions []plan.Action) *cycleData {
		return &cycleData{view: &nomadwatch.View{Snapshot: &cluster.Snapshot{}}, res: plan.Result{Actions: actions}, planGen: gen}
	}
	for i, step := range []struct {
		name          string
		c             *cycleData
		epoch         string
		settled       bool // what the Publish (if any) did
		compute, post bool
	}{
		{"the first plan", cycle(1, place), "e1", true, true, true},
		{"the same plan, published in full", cycle(1, place), "e1", true, false, false},
		{"the same plan with other actions (a gang's hold)", cycle(1, nil), "e1", false, true, true},
		{"the same, after a Publish that deferred nodes", cycle(1, nil), "e1", true, false, true},
		{"the same, published in full since", cycle(1, nil), "e1", true, false, false},
		{"a new leadership", cycle(1, nil), "e2", true, false, true},
		{"a new plan", cycle(2, nil), "e2", true, true, true},
	} {
		before := computed
		want, post := d.wanted(step.c, step.epoch, compute)
		if (computed > before) != step.compute || post != step.post || want == nil {
			t.Fatalf("step %d (%s): computed %v, publish %v; want %v, %v", i, step.name, computed > before, post, step.compute, step.post)
		}
		if post {
			d.settled, d.epoch = step.settled, step.epoch
		}
	}
}
