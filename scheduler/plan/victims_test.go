package plan

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// victimKey builds job j's key for compareVictims.
func (s *state) victimKey(j int32) victimKey {
	job := &s.jobs[j]
	p := &s.projects[job.project]
	return victimKey{
		projectPriority: p.priority,
		overDeserved:    p.usage - p.deserved,
		jobPriority:     job.priority,
		start:           job.newest,
		job:             job.name,
	}
}

// TestVictimQueueFollowsCompareVictims checks that the planner's fast
// victim walk (one heap over per-project sources) yields exactly the order
// of compareVictims, the rule of BACKGROUND section 2, on random clusters
// with ties in every field.
func TestVictimQueueFollowsCompareVictims(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		snap := &model.Snapshot{Nodes: []model.Node{node("n1", 8)}}
		nprojects := 1 + rng.Intn(5)
		for p := range nprojects {
			snap.Projects = append(snap.Projects, model.Project{Name: fmt.Sprintf("p%d", p), Priority: rng.Intn(3)})
		}
		for gpu := range 8 {
			if rng.Intn(4) == 0 {
				continue
			}
			a := running(fmt.Sprintf("j%d", gpu), fmt.Sprintf("p%d", rng.Intn(nprojects)), rng.Intn(3), int64(rng.Intn(3)), "n1", gpu)
			snap.Allocations = append(snap.Allocations, a)
		}
		s, err := newState(snap, Options{})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		var all []int32
		q := victimQueue{s: s}
		for i := range s.projects {
			p := &s.projects[i]
			p.deserved = model.Shares(rng.Intn(4) * 100)
			all = append(all, p.jobs...)
			if len(p.jobs) > 0 {
				q.sources = append(q.sources, victimSource{priority: p.priority, over: p.usage - p.deserved, jobs: p.jobs})
			}
		}
		q.init()
		var got []string
		for j := q.next(); j >= 0; j = q.next() {
			got = append(got, s.jobs[j].name)
		}
		slices.SortFunc(all, func(a, b int32) int { return compareVictims(s.victimKey(a), s.victimKey(b)) })
		var want []string
		for _, j := range all {
			want = append(want, s.jobs[j].name)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: victim walk %v, compareVictims order %v", seed, got, want)
		}
	}
}
