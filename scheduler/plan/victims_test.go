package plan

import (
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

func TestCompareVictims(t *testing.T) {
	// key builds a victim from the fields the order reads.
	key := func(projectPriority int, overDeserved cluster.Shares, jobPriority int, start int64, job string) victim {
		return victim{
			project: &projectState{priority: projectPriority, held: overDeserved},
			job:     &jobState{priority: jobPriority, newest: start, name: job},
		}
	}
	base := key(1, 100, 5, 10, "j")
	tests := []struct {
		name  string
		first victim // suspended before base
	}{
		{"an instance above an elastic group's minimum before any whole job", func() victim {
			v := key(9, -500, 99, 0, "z")
			v.job.shrink = true
			return v
		}()},
		{"lower project priority first", key(0, -500, 99, 0, "z")},
		{"then most over its fair share", key(1, 101, 99, 0, "z")},
		{"then lowest job priority", key(1, 100, 4, 0, "z")},
		{"then newest", key(1, 100, 5, 11, "z")},
		{"then job name", key(1, 100, 5, 10, "a")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if compareVictims(tt.first, base) >= 0 || compareVictims(base, tt.first) <= 0 {
				t.Errorf("%+v %+v should come before %+v %+v", *tt.first.project, *tt.first.job, *base.project, *base.job)
			}
		})
	}
	if compareVictims(base, base) != 0 {
		t.Error("a key must compare equal to itself")
	}
}

// TestVictimQueueFollowsCompareVictims checks that the planner's fast
// victim walk (one heap over per-project sources) yields exactly the order
// of sorting all jobs and shrink units by compareVictims (docs/design.md,
// Victim order), on random clusters with ties in every field.
func TestVictimQueueFollowsCompareVictims(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewSource(seed))
		snap := &cluster.Snapshot{Nodes: []cluster.Node{node("n1", 8)}}
		nprojects := 1 + rng.Intn(5)
		for p := range nprojects {
			snap.Projects = append(snap.Projects, cluster.Project{Name: fmt.Sprintf("p%d", p), Priority: rng.Intn(3)})
		}
		for gpu := range 8 {
			if rng.Intn(4) == 0 {
				continue
			}
			a := running(fmt.Sprintf("j%d", gpu), fmt.Sprintf("p%d", rng.Intn(nprojects)), rng.Intn(3), int64(rng.Intn(3)), "n1", gpu)
			if rng.Intn(3) == 0 {
				// An instance of the project's elastic job: those above
				// its minimum are shrink units, walked before whole jobs.
				a.Job, a.Priority, a.MinCount = "e-"+a.Project, 1, 1
			}
			snap.Allocations = append(snap.Allocations, a)
		}
		s, err := newState(snap, Options{})
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		var all, projects []int32
		for i := range s.projects {
			p := &s.projects[i]
			p.deserved = cluster.Shares(rng.Intn(4) * 100)
			all = append(all, p.jobs...)
			all = append(all, p.shrinks...)
			projects = append(projects, int32(i))
		}
		q := s.newVictimQueue(projects, false, nil)
		var got []string
		for j := q.next(); j >= 0; j = q.next() {
			got = append(got, fmt.Sprintf("%s/%d", s.jobs[j].name, s.jobs[j].rank))
		}
		slices.SortFunc(all, func(a, b int32) int { return compareVictims(s.victim(a), s.victim(b)) })
		var want []string
		for _, j := range all {
			want = append(want, fmt.Sprintf("%s/%d", s.jobs[j].name, s.jobs[j].rank))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: victim walk %v, compareVictims order %v", seed, got, want)
		}
	}
}
