package placement

import (
	"cmp"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Placed is a task running where Choice put it.
type Placed struct {
	Task   Task
	Choice Choice
}

// Move is one step of a consolidation: movable piece Piece (an index into
// the list given to Consolidate) moves to To.
type Move struct {
	Piece int
	To    Choice
}

// ConsolidationLimits bound a consolidation: at most MaxMoves pieces move
// for one task, and at most MaxNodes candidate nodes (the cheapest) are
// tried. Allowed, when set, says which nodes the task may use.
type ConsolidationLimits struct {
	MaxMoves int
	MaxNodes int
	Allowed  func(node int) bool
}

// DefaultConsolidationLimits are the bounds the simulator and the planner
// use unless told otherwise.
var DefaultConsolidationLimits = ConsolidationLimits{MaxMoves: 2, MaxNodes: 8}

// Consolidate finds room for task t, which fits nowhere as c stands, by
// moving running pieces that may move (movable, each where c has it): on
// one node it takes out the fewest pieces that leave room for t there (the
// least GPU capacity moved breaks ties), and the policy places each of them
// again, anywhere but in t's place. It returns the moves and t's choice, or
// false when no candidate node within the limits works. c is left as it
// was.
func Consolidate(c *Cluster, t Task, movable []Placed, policy Policy, lim ConsolidationLimits) ([]Move, Choice, bool) {
	if t.GPUCount == 0 || lim.MaxMoves <= 0 {
		return nil, Choice{}, false
	}
	for _, cand := range cheapestNodes(c, t, movable, lim) {
		if moves, ch, ok := tryConsolidate(c, t, movable, cand, policy); ok {
			return moves, ch, true
		}
	}
	return nil, Choice{}, false
}

// candidate is a node where t fits once pieces move away.
type candidate struct {
	node   int
	pieces []int
	moved  cluster.Shares
}

// cheapestNodes lists the nodes where moving at most lim.MaxMoves pieces
// leaves room for t, fewest pieces then least capacity moved first, at
// most lim.MaxNodes of them.
func cheapestNodes(c *Cluster, t Task, movable []Placed, lim ConsolidationLimits) []candidate {
	onNode := map[int][]int{}
	for i, p := range movable {
		onNode[p.Choice.Node] = append(onNode[p.Choice.Node], i)
	}
	var cands []candidate
	for n, pieces := range onNode {
		if lim.Allowed != nil && !lim.Allowed(n) {
			continue
		}
		if chosen, ok := piecesToFree(&c.Nodes[n], t, movable, pieces, lim.MaxMoves); ok {
			cand := candidate{node: n, pieces: chosen}
			for _, i := range chosen {
				cand.moved += movable[i].Task.Demand()
			}
			cands = append(cands, cand)
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(len(a.pieces), len(b.pieces)), cmp.Compare(a.moved, b.moved), cmp.Compare(a.node, b.node))
	})
	return cands[:min(len(cands), lim.MaxNodes)]
}

// piecesToFree chooses, among the movable pieces on node n, the fewest
// whose moving leaves room for t on n (at most maxMoves): by GPU (see
// gpuPieces), then, where the node's CPU or memory is still short, the
// pieces that hold the most of it.
func piecesToFree(n *Node, t Task, movable []Placed, pieces []int, maxMoves int) ([]int, bool) {
	chosen, ok := gpuPieces(n, t, movable, pieces)
	if !ok {
		return nil, false
	}
	cpu, mem := n.FreeCPUMilli, n.FreeMemoryMiB
	for _, i := range chosen {
		cpu += movable[i].Task.CPUMilli
		mem += movable[i].Task.MemoryMiB
	}
	rest := slices.DeleteFunc(slices.Clone(pieces), func(i int) bool { return slices.Contains(chosen, i) })
	slices.SortStableFunc(rest, func(a, b int) int {
		return cmp.Compare(movable[b].Task.CPUMilli, movable[a].Task.CPUMilli)
	})
	for _, i := range rest {
		if cpu >= t.CPUMilli && mem >= t.MemoryMiB {
			break
		}
		chosen = append(chosen, i)
		cpu += movable[i].Task.CPUMilli
		mem += movable[i].Task.MemoryMiB
	}
	if cpu < t.CPUMilli || mem < t.MemoryMiB || len(chosen) == 0 || len(chosen) > maxMoves {
		return nil, false
	}
	slices.Sort(chosen)
	return chosen, true
}

// gpuPieces chooses the pieces on node n whose moving leaves GPUs for t:
// for a share, the GPU where the fewest pieces free enough; for whole
// GPUs, the GPUs that moving their pieces empties, fewest pieces first.
func gpuPieces(n *Node, t Task, movable []Placed, pieces []int) ([]int, bool) {
	perGPU := make([][]int, len(n.GPUs))
	for _, i := range pieces {
		for _, g := range movable[i].Choice.GPUs {
			perGPU[g] = append(perGPU[g], i)
		}
	}
	var options [][]int
	for g, gpu := range n.GPUs {
		if !t.MayUse(gpu.Model, gpu.Mode) {
			continue
		}
		if set, ok := freeOnGPU(gpu.Free, t.Shares, perGPU[g], movable); ok {
			options = append(options, set)
		}
	}
	if len(options) < t.GPUCount {
		return nil, false
	}
	slices.SortStableFunc(options, func(a, b []int) int { return cmp.Compare(len(a), len(b)) })
	var chosen []int
	for _, set := range options[:t.GPUCount] {
		for _, i := range set {
			if !slices.Contains(chosen, i) {
				chosen = append(chosen, i)
			}
		}
	}
	return chosen, true
}

// freeOnGPU is the fewest pieces (largest on the GPU first) that bring a
// GPU with free capacity free up to need, or false when moving all of them
// does not.
func freeOnGPU(free, need cluster.Shares, pieces []int, movable []Placed) ([]int, bool) {
	if free >= need {
		return nil, true
	}
	order := slices.Clone(pieces)
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(movable[b].Task.Shares, movable[a].Task.Shares) })
	for k, i := range order {
		free += movable[i].Task.Shares
		if free >= need {
			return order[:k+1], true
		}
	}
	return nil, false
}

// tryConsolidate moves cand's pieces out, holds t's room on cand's node and
// places the pieces again with the policy; it undoes all of it before
// returning what worked.
func tryConsolidate(c *Cluster, t Task, movable []Placed, cand candidate, policy Policy) ([]Move, Choice, bool) {
	for _, i := range cand.pieces {
		c.Release(movable[i].Choice, movable[i].Task)
	}
	defer func() {
		for _, i := range cand.pieces {
			_ = c.Assign(movable[i].Choice, movable[i].Task)
		}
	}()
	gpus, ok := c.Fits(cand.node, t)
	if !ok {
		return nil, Choice{}, false
	}
	ch := Choice{Node: cand.node, GPUs: gpus}
	if c.Assign(ch, t) != nil {
		return nil, Choice{}, false
	}
	defer c.Release(ch, t)
	var moves []Move
	defer func() {
		for _, m := range slices.Backward(moves) {
			c.Release(m.To, movable[m.Piece].Task)
		}
	}()
	for _, i := range cand.pieces {
		to, ok := policy.Place(c, movable[i].Task)
		if !ok || c.Assign(to, movable[i].Task) != nil {
			return nil, Choice{}, false
		}
		moves = append(moves, Move{Piece: i, To: to})
	}
	return slices.Clone(moves), ch, true
}
