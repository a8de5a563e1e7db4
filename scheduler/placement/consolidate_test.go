package placement

import (
	"reflect"
	"testing"
)

// placedOn assigns t on node n's GPUs gpus and returns it as a piece.
func placedOn(t *testing.T, c *Cluster, task Task, n int, gpus ...int) Placed {
	t.Helper()
	p := Placed{Task: task, Choice: Choice{Node: n, GPUs: gpus}}
	if err := c.Assign(p.Choice, task); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConsolidate(t *testing.T) {
	bestfit, _ := ByName("bestfit", 1)
	tests := []struct {
		name string
		// setup fills the cluster of two 2-GPU nodes and returns the
		// movable pieces.
		setup     func(t *testing.T, c *Cluster) []Placed
		task      Task
		lim       ConsolidationLimits
		wantMoves int
		wantNode  int
		ok        bool
	}{
		{
			name: "a whole GPU after one share moves to the other node",
			setup: func(t *testing.T, c *Cluster) []Placed {
				placedOn(t, c, share(1000, 50), 0, 0)
				mv := placedOn(t, c, share(1000, 50), 0, 1)
				placedOn(t, c, whole(1000, 1), 1, 0)
				placedOn(t, c, share(1000, 50), 1, 1)
				return []Placed{mv}
			},
			task: whole(1000, 1), lim: DefaultConsolidationLimits, wantMoves: 1, wantNode: 0, ok: true,
		},
		{
			name: "nothing movable: no room",
			setup: func(t *testing.T, c *Cluster) []Placed {
				placedOn(t, c, share(1000, 50), 0, 0)
				placedOn(t, c, share(1000, 50), 0, 1)
				placedOn(t, c, whole(1000, 1), 1, 0)
				placedOn(t, c, share(1000, 50), 1, 1)
				return nil
			},
			task: whole(1000, 1), lim: DefaultConsolidationLimits,
		},
		{
			name: "the moved piece has nowhere to go",
			setup: func(t *testing.T, c *Cluster) []Placed {
				placedOn(t, c, share(1000, 50), 0, 0)
				mv := placedOn(t, c, share(1000, 60), 0, 1)
				placedOn(t, c, whole(1000, 1), 1, 0)
				placedOn(t, c, share(1000, 50), 1, 1)
				return []Placed{mv}
			},
			task: whole(1000, 1), lim: DefaultConsolidationLimits,
		},
		{
			name: "two GPUs need three moves, above the limit",
			setup: func(t *testing.T, c *Cluster) []Placed {
				a := placedOn(t, c, share(1000, 30), 0, 0)
				b := placedOn(t, c, share(1000, 30), 0, 0)
				d := placedOn(t, c, share(1000, 30), 0, 1)
				return []Placed{a, b, d}
			},
			task: whole(1000, 2), lim: ConsolidationLimits{MaxMoves: 2, MaxNodes: 8},
		},
		{
			name: "two GPUs by three moves within a limit of three",
			setup: func(t *testing.T, c *Cluster) []Placed {
				a := placedOn(t, c, share(1000, 30), 0, 0)
				b := placedOn(t, c, share(1000, 30), 0, 0)
				d := placedOn(t, c, share(1000, 30), 0, 1)
				placedOn(t, c, share(1000, 10), 1, 0)
				placedOn(t, c, share(1000, 10), 1, 1)
				return []Placed{a, b, d}
			},
			task: whole(1000, 2), lim: ConsolidationLimits{MaxMoves: 3, MaxNodes: 8}, wantMoves: 3, wantNode: 0, ok: true,
		},
		{
			name: "the node's CPU is short: a CPU-heavy piece moves too",
			setup: func(t *testing.T, c *Cluster) []Placed {
				gpu := placedOn(t, c, share(1000, 50), 0, 0)
				placedOn(t, c, share(1000, 90), 0, 1)
				cpu := placedOn(t, c, Task{CPUMilli: 13000}, 0)
				placedOn(t, c, share(1000, 40), 1, 0)
				placedOn(t, c, share(1000, 40), 1, 1)
				return []Placed{gpu, cpu}
			},
			task: share(4000, 60), lim: DefaultConsolidationLimits, wantMoves: 2, wantNode: 0, ok: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cluster{Nodes: []Node{node("n0", 16000, 1<<20, 2, "G"), node("n1", 16000, 1<<20, 2, "G")}}
			movable := tt.setup(t, c)
			before := cloneNodesForTest(c.Nodes)
			moves, ch, ok := Consolidate(c, tt.task, movable, bestfit, tt.lim)
			if !reflect.DeepEqual(c.Nodes, before) {
				t.Fatalf("Consolidate changed the cluster")
			}
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if !ok {
				return
			}
			if len(moves) != tt.wantMoves || ch.Node != tt.wantNode {
				t.Fatalf("moves %v, choice %v; want %d moves, node %d", moves, ch, tt.wantMoves, tt.wantNode)
			}
			// Applying the moves, then the task, must fit exactly.
			for _, m := range moves {
				c.Release(movable[m.Piece].Choice, movable[m.Piece].Task)
			}
			for _, m := range moves {
				if err := c.Assign(m.To, movable[m.Piece].Task); err != nil {
					t.Fatalf("move %v: %v", m, err)
				}
			}
			if err := c.Assign(ch, tt.task); err != nil {
				t.Fatalf("task after the moves: %v", err)
			}
		})
	}
}

func cloneNodesForTest(nodes []Node) []Node {
	out := make([]Node, len(nodes))
	for i, n := range nodes {
		out[i] = n
		out[i].GPUs = append([]GPU(nil), n.GPUs...)
	}
	return out
}
