package plan

import (
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// gangPart is one running allocation of a gang.
func gangPart(id, job, project string, start int64, nodeName string, gpu int) cluster.Allocation {
	a := running(id, project, 0, start, nodeName, gpu)
	a.Job, a.Gang = job, true
	return a
}

// gangRest is the waiting part of a gang.
func gangRest(job, project string, count int, submit int64) cluster.Pending {
	return cluster.Pending{Project: project, Job: job, Group: "main", Preemptible: true, Ask: cluster.Ask{WholeGPUs: 1},
		Count: count, Submit: submit, Gang: true}
}

// TestPartialGangs checks what the plan reports for gangs that run in
// part: the gangs that wait whole, the workload their suspension is made
// for (-1: none, the gang could not complete; the earlier gang's waiting
// workload: it gave way), and that a gang that completes is placed.
func TestPartialGangs(t *testing.T) {
	projects := []cluster.Project{{Name: "a", Guaranteed: cluster.GPUs(2)}, {Name: "b", Guaranteed: cluster.GPUs(2)}}
	tests := []struct {
		name    string
		snap    cluster.Snapshot
		waiting []string
		// forWorkload is, per suspended job, Action.Workload.
		forWorkload map[string]int
		placed      []string
	}{
		{
			name: "completes on idle capacity",
			snap: cluster.Snapshot{
				Nodes:       []cluster.Node{node("n1", 2)},
				Allocations: []cluster.Allocation{gangPart("g/0", "g", "a", 1, "n1", 0)},
				Pending:     []cluster.Pending{gangRest("g", "a", 1, 1)},
			},
			placed: []string{"g"},
		},
		{
			name: "cannot complete: waits whole for no workload",
			snap: cluster.Snapshot{
				Nodes:       []cluster.Node{node("n1", 2)},
				Allocations: []cluster.Allocation{gangPart("g/0", "g", "a", 1, "n1", 0), running("x", "a", 0, 2, "n1", 1)},
				Pending:     []cluster.Pending{gangRest("g", "a", 1, 1)},
			},
			waiting:     []string{"g"},
			forWorkload: map[string]int{"g": -1},
		},
		{
			name: "the later of two partial gangs gives way to the earlier",
			snap: cluster.Snapshot{
				Nodes: []cluster.Node{node("n1", 2)},
				Allocations: []cluster.Allocation{
					gangPart("late/0", "late", "b", 2, "n1", 1),
					gangPart("early/0", "early", "a", 1, "n1", 0),
				},
				Pending: []cluster.Pending{gangRest("late", "b", 1, 2), gangRest("early", "a", 1, 1)},
			},
			waiting:     []string{"late"},
			forWorkload: map[string]int{"late": 1},
			placed:      []string{"early"},
		},
		{
			name: "a gang whose waiting part fits nowhere waits whole",
			snap: cluster.Snapshot{
				Nodes:       []cluster.Node{node("n1", 2)},
				Allocations: []cluster.Allocation{gangPart("g/0", "g", "a", 1, "n1", 0)},
				Pending: []cluster.Pending{func() cluster.Pending {
					w := gangRest("g", "a", 1, 1)
					w.Ask.WholeGPUs = 4
					return w
				}()},
			},
			waiting:     []string{"g"},
			forWorkload: map[string]int{"g": -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.snap.Projects = projects
			res, err := Plan(&tt.snap, Options{})
			if err != nil {
				t.Fatal(err)
			}
			var waiting, placed []string
			for _, g := range res.GangsWaiting {
				waiting = append(waiting, g.Job)
				if !strings.HasPrefix(g.Reason, "waiting for the whole gang: ") {
					t.Errorf("gang %s: reason %q", g.Job, g.Reason)
				}
			}
			for _, a := range res.Actions {
				switch a.Kind {
				case Suspend:
					want, ok := tt.forWorkload[a.Job]
					if !ok || a.Workload != want {
						t.Errorf("suspend %s for workload %d, want %d (listed: %v)", a.Job, a.Workload, want, ok)
					}
				case Place:
					placed = append(placed, a.Job)
				}
			}
			if strings.Join(waiting, ",") != strings.Join(tt.waiting, ",") {
				t.Errorf("gangs waiting %v, want %v", waiting, tt.waiting)
			}
			if strings.Join(placed, ",") != strings.Join(tt.placed, ",") {
				t.Errorf("placed %v, want %v", placed, tt.placed)
			}
		})
	}
}

// TestApplyGangWaitsWhole: a gang suspended while part of it waited comes
// back as one suspended workload of all its instances: a stopped job has
// nothing queued in Nomad.
func TestApplyGangWaitsWhole(t *testing.T) {
	al := running("g-0", "a", 0, 1, "n1", 0)
	al.Job, al.Gang = "g", true
	snap := &cluster.Snapshot{Nodes: []cluster.Node{node("n1", 4)}, Projects: []cluster.Project{{Name: "a"}},
		Allocations: []cluster.Allocation{al},
		Pending:     []cluster.Pending{{Project: "a", Job: "g", Group: "main", Preemptible: true, Ask: cluster.Ask{WholeGPUs: 1}, Count: 2, Gang: true}}}
	next := Apply(snap, Result{Actions: []Action{{Kind: Suspend, Project: "a", Job: "g", Allocations: []string{"g-0"}, Workload: -1}}}, 100)
	if len(next.Allocations) != 0 || len(next.Pending) != 1 || !next.Pending[0].Suspended || next.Pending[0].Count != 3 || !next.Pending[0].Gang {
		t.Errorf("allocations %+v, pending %+v; want one suspended gang workload of 3 instances", next.Allocations, next.Pending)
	}
}
