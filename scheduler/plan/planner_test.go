package plan

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// TestPlannerPlansAsPlan: a Planner's plan of every snapshot of a run is
// the plan Plan makes of it alone, whether the running cluster stayed the
// same (the same lists, or equal copies of them) and only the pending
// work changed, or the cluster changed too; what the Planner keeps is
// never changed by the plans made from it.
func TestPlannerPlansAsPlan(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		snap := decorated(cluster.Synthetic(cluster.SyntheticSpec{Nodes: 30, GPUsPerNode: 8, Allocations: 400,
			Projects: 6, Pending: 40, Seed: seed}), rng)
		var p Planner
		reusedPlans := 0
		for step := range 25 {
			kept, keptIndex := p.last, p.index
			next, runningChanged := nextSnapshot(snap, rng, step)
			opts := Options{MaxMoves: 2}
			if seed%2 == 0 {
				pol, err := PolicyByName("gpushare", 1, next)
				if err != nil {
					t.Fatal(err)
				}
				opts.Policy = pol
			}
			got, err := p.Plan(next, opts)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			want, err := Plan(next, opts)
			if err != nil {
				t.Fatalf("seed %d step %d: Plan: %v", seed, step, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d step %d (running cluster changed: %t): the Planner's plan differs from Plan's:\n%v\n%v",
					seed, step, runningChanged, got.Actions, want.Actions)
			}
			if kept != nil && sharesTables(p.index, keptIndex) {
				reusedPlans++
				if runningChanged {
					t.Fatalf("seed %d step %d: the running cluster changed and the Planner kept its tables", seed, step)
				}
			}
			checkKept(t, &p)
			snap = next
		}
		if reusedPlans == 0 {
			t.Fatalf("seed %d: no plan reused the running cluster's tables", seed)
		}
	}
}

// sharesTables reports whether two Indexes share their tables of the
// running cluster (IndexAfter reused them).
func sharesTables(a, b *cluster.Index) bool {
	return len(a.FreeShares) > 0 && len(b.FreeShares) > 0 && &a.FreeShares[0] == &b.FreeShares[0]
}

// checkKept fails unless the Planner's tables are what its snapshot
// gives afresh: the plans made from them changed nothing.
func checkKept(t *testing.T, p *Planner) {
	t.Helper()
	x, err := p.last.Index()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(x, p.index) {
		t.Fatal("the Planner's Index was changed by a plan")
	}
	if fresh := newRunningJobs(p.last, x); !reflect.DeepEqual(fresh, p.running) {
		t.Fatal("the Planner's running jobs were changed by a plan")
	}
}

// decorated gives a synthetic snapshot the work the plan treats apart:
// elastic and gang jobs, movable and young allocations, work that opted
// out of suspension or is never a victim, pending work bound to nodes,
// gangs and suspended work.
func decorated(snap *cluster.Snapshot, rng *rand.Rand) *cluster.Snapshot {
	instance := map[string]int{}
	for i := range snap.Allocations {
		a := &snap.Allocations[i]
		switch rng.IntN(8) {
		case 0:
			a.MinCount = 1
		case 1:
			a.Movable = true
		case 2:
			a.InMinRuntime = true
		case 3:
			a.Preemptible = false
		case 4:
			a.Gang = true
		}
		if rng.IntN(40) == 0 {
			a.NeverVictim = "checkpointing"
		}
		a.Instance = instance[a.Job]
		instance[a.Job]++
	}
	for i := range snap.Pending {
		w := &snap.Pending[i]
		switch rng.IntN(6) {
		case 0:
			w.Gang, w.MinCount = true, w.Count
		case 1:
			w.Suspended = true
		case 2:
			w.Nodes = []string{snap.Nodes[rng.IntN(len(snap.Nodes))].Name, snap.Nodes[rng.IntN(len(snap.Nodes))].Name}
		}
	}
	return snap
}

// nextSnapshot is snap after one random step: usually new pending work on
// the same running cluster (its lists shared, or equal copies), sometimes
// a change of the running cluster (an allocation gone, a node
// unavailable, a guarantee moved).
func nextSnapshot(snap *cluster.Snapshot, rng *rand.Rand, step int) (*cluster.Snapshot, bool) {
	next := *snap
	next.Pending = slices.Clone(snap.Pending)
	if len(next.Pending) > 0 {
		k := rng.IntN(len(next.Pending))
		next.Pending = slices.Delete(next.Pending, k, k+1)
	}
	if len(snap.Pending) > 0 {
		w := snap.Pending[rng.IntN(len(snap.Pending))]
		w.Job = fmt.Sprintf("%s-%d", w.Job, step)
		w.Count = 1 + rng.IntN(3)
		if w.Gang {
			w.MinCount = w.Count
		}
		next.Pending = append(next.Pending, w)
	}
	switch rng.IntN(5) {
	case 0:
		next.Allocations = slices.Clone(snap.Allocations)
		next.Nodes = slices.Clone(snap.Nodes)
		return &next, false
	case 1:
		k := rng.IntN(len(snap.Allocations))
		next.Allocations = slices.Delete(slices.Clone(snap.Allocations), k, k+1)
	case 2:
		next.Nodes = slices.Clone(snap.Nodes)
		n := &next.Nodes[rng.IntN(len(next.Nodes))]
		if n.Unavailable == "" {
			n.Unavailable = "draining"
		} else {
			n.Unavailable = ""
		}
	case 3:
		next.Projects = slices.Clone(snap.Projects)
		p := &next.Projects[rng.IntN(len(next.Projects))]
		p.Guaranteed += cluster.Shares(1+rng.IntN(2)) * cluster.SharesPerGPU
		if p.HasLimit && p.Limit < p.Guaranteed {
			p.Limit = p.Guaranteed
		}
	default:
		return &next, false
	}
	return &next, true
}
