package service

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// gangSnapshot: gang a/train runs 2 of its 4 instances (al1 in two shapes),
// b/solo (no gang) runs one and waits for one, a/whole is a gang that runs
// all of itself.
func gangSnapshot() *cluster.Snapshot {
	whole := cluster.Ask{WholeGPUs: 1}
	return &cluster.Snapshot{
		Allocations: []cluster.Allocation{
			{ID: "al1", Project: "a", Job: "a/train", Group: "w", Gang: true, Node: "n1", GPUs: []int{0}, Ask: whole},
			{ID: "al1", Project: "a", Job: "a/train", Group: "w", Gang: true, Node: "n1", GPUs: []int{1}, Ask: cluster.Ask{Shares: 10}},
			{ID: "al2", Project: "a", Job: "a/train", Group: "w", Gang: true, Node: "n1", GPUs: []int{2}, Ask: whole},
			{ID: "al3", Project: "b", Job: "b/solo", Group: "g", Node: "n1", GPUs: []int{3}, Ask: whole},
			{ID: "al4", Project: "a", Job: "a/whole", Group: "g", Gang: true, Node: "n2", GPUs: []int{0}, Ask: whole},
		},
		Pending: []cluster.Pending{
			{Project: "b", Job: "b/solo", Group: "g", Ask: whole, Count: 1},
			{Project: "a", Job: "a/train", Group: "w", Ask: whole, Count: 2, Gang: true},
			{Project: "a", Job: "a/train", Group: "w", Ask: whole, Count: 1, Gang: true, Shrunk: true},
		},
	}
}

func TestPartialGangs(t *testing.T) {
	snap := gangSnapshot()
	got := partialGangs(snap, runningGangsOf(snap.Allocations, nil))
	if len(got) != 1 {
		t.Fatalf("partial gangs %+v: want only a/train", got)
	}
	g := got[0]
	if g.job != "a/train" || g.placed != 2 || g.wanted != 4 || strings.Join(g.allocations, ",") != "al1,al2" || len(g.waiting) != 1 || g.waiting[0] != 1 {
		t.Errorf("a/train: %+v; want 2 of 4 placed, allocations al1,al2, waiting part Pending[1]", g)
	}
}

// TestRunningGangsFollowTheAllocations: a cycle whose snapshot shares
// the last one's allocation list takes the gangs read from it; a new
// list (an instance of a/train ended) is read again.
func TestRunningGangsFollowTheAllocations(t *testing.T) {
	snap := gangSnapshot()
	last := runningGangsOf(snap.Allocations, nil)
	if runningGangsOf(snap.Allocations, last) != last {
		t.Error("the same allocation list was read again")
	}
	snap.Allocations = slices.Delete(slices.Clone(snap.Allocations), 2, 3) // al2 ended
	got := partialGangs(snap, runningGangsOf(snap.Allocations, last))
	if len(got) != 1 || got[0].placed != 1 || got[0].wanted != 3 || strings.Join(got[0].allocations, ",") != "al1" {
		t.Errorf("partial gangs after al2 ended: %+v; want a/train with al1 alone, 1 of 3 placed", got)
	}
}

// TestBoundPartialGangs: a gang the plan would complete but that runs in
// part past the hold is suspended whole, the plan's placements for its
// waiting part dropped; before the hold, or when the plan suspends it
// anyway, nothing is added; the clock ends when the gang no longer runs in
// part.
func TestBoundPartialGangs(t *testing.T) {
	hold := time.Minute
	s := &Service{cfg: Config{GangPartialHold: hold}, partialSince: map[string]time.Time{}}
	t0 := time.Unix(1000, 0)
	cycle := func(at time.Time, actions ...plan.Action) *cycleData {
		c := &cycleData{view: &nomadwatch.View{Snapshot: gangSnapshot()}, res: plan.Result{Actions: actions}}
		s.boundPartialGangs(c, at)
		return c
	}
	placeRest := plan.Action{Kind: plan.Place, Project: "a", Job: "a/train", Group: "w", Workload: 1, Node: "n2", GPUs: []int{1}}
	victim := plan.Action{Kind: plan.Suspend, Project: "b", Job: "b/other", Workload: 1, Reason: "reclaim"}
	placeSolo := plan.Action{Kind: plan.Place, Project: "b", Job: "b/solo", Group: "g", Workload: 0, Node: "n2", GPUs: []int{2}}

	if c := cycle(t0, victim, placeRest, placeSolo); len(c.res.Actions) != 3 || len(c.res.GangsWaiting) != 0 {
		t.Fatalf("first sight: actions %v, gangs waiting %v; want the plan unchanged", c.res.Actions, c.res.GangsWaiting)
	}
	if c := cycle(t0.Add(hold-time.Second), victim, placeRest, placeSolo); len(c.res.Actions) != 3 {
		t.Fatalf("within the hold: actions %v; want the plan unchanged", c.res.Actions)
	}
	c := cycle(t0.Add(hold), victim, placeRest, placeSolo)
	if len(c.res.Actions) != 2 || c.res.Actions[0].Job != "b/solo" {
		t.Fatalf("past the hold: actions %v; want b/solo's placement, then a/train suspended", c.res.Actions)
	}
	sus := c.res.Actions[1]
	if sus.Kind != plan.Suspend || sus.Job != "a/train" || sus.Workload != -1 || strings.Join(sus.Allocations, ",") != "al1,al2" ||
		!strings.HasPrefix(sus.Reason, plan.GangReason) || !strings.Contains(sus.Reason, "2 of its 4") || !strings.Contains(sus.Reason, "1m0s") {
		t.Errorf("suspension %+v; want a/train whole (al1, al2), for no workload, the reason naming the gang and the hold", sus)
	}
	if len(c.res.GangsWaiting) != 1 || c.res.GangsWaiting[0].Job != "a/train" || c.res.GangsWaiting[0].Reason != sus.Reason {
		t.Errorf("gangs waiting %+v; want a/train with the suspension's reason", c.res.GangsWaiting)
	}
	views := s.gangViews(c)
	if len(views) != 1 || views[0].Namespace != "a" || views[0].Job != "train" || views[0].WaitsFor != sus.Reason || !views[0].Since.Equal(t0) {
		t.Errorf("status %+v; want a/train since %s waiting whole", views, t0)
	}

	planned := plan.Action{Kind: plan.Suspend, Project: "a", Job: "a/train", Workload: -1, Reason: plan.GangReason + ": it does not fit"}
	if c := cycle(t0.Add(2*hold), planned); len(c.res.Actions) != 1 {
		t.Errorf("the plan suspends it already: actions %v; want only the plan's", c.res.Actions)
	}

	c = &cycleData{view: &nomadwatch.View{Snapshot: &cluster.Snapshot{}}}
	s.boundPartialGangs(c, t0.Add(3*hold))
	if len(s.partialSince) != 0 {
		t.Errorf("clocks %v after the gang left: want none", s.partialSince)
	}
	if c := cycle(t0.Add(3*hold), placeRest); len(c.res.Actions) != 1 {
		t.Errorf("in part again: actions %v; want a new clock, the plan unchanged", c.res.Actions)
	}
}
