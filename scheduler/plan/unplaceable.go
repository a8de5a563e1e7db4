package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// findUnplaceable marks the pending workloads that no plan could place: no
// available node that admits the workload has, even with every GPU
// allocation gone, enough available GPUs of an allowed model, CPU and
// memory for one instance. Such work is no demand (it would inflate its
// project's deserved share), is not walked, and is reported in
// Result.Unplaceable with the reason. A unit (see units) with such a
// workload is unplaceable as a whole.
func (s *state) findUnplaceable() {
	pending := s.snap.Pending
	s.plan.never = make([]bool, len(pending))
	reasons := make([]string, len(pending))
	cache := map[askKey]string{}
	for w := range pending {
		if r := s.neverFits(w, cache); r != "" {
			reasons[w] = r
			for _, m := range s.units.of(w) {
				s.plan.never[m] = true
			}
		}
	}
	for w := range pending {
		if !s.plan.never[w] {
			continue
		}
		r := reasons[w]
		if r == "" {
			for _, m := range s.units.of(w) {
				if reasons[m] != "" {
					r = fmt.Sprintf("its job resumes as a whole, and its group %s is unplaceable: %s", pending[m].Group, reasons[m])
					break
				}
			}
		}
		s.plan.unplaceable = append(s.plan.unplaceable, Unplaced{Workload: w, Reason: r})
	}
}

// askKey is what neverFits remembers an unconstrained ask by.
type askKey struct {
	cpu, mem      int64
	whole, shares int
	models        string
}

// neverFits returns why workload w fits on no node even when it is idle,
// or "" when it fits on one.
func (s *state) neverFits(w int, cache map[askKey]string) string {
	wl := &s.snap.Pending[w]
	nodes := s.index.PendingNodes[w]
	key := askKey{wl.Ask.CPUMilli, wl.Ask.MemoryMiB, wl.Ask.WholeGPUs, int(wl.Ask.Shares), strings.Join(wl.Ask.Models, "\x00")}
	if nodes == nil {
		if r, ok := cache[key]; ok {
			return r
		}
	}
	admitted, closed := 0, ""
	for n := range s.snap.Nodes {
		if nodes != nil && !nodes[n] {
			continue
		}
		admitted++
		node := &s.snap.Nodes[n]
		if node.Unavailable != "" {
			if closed == "" {
				closed = fmt.Sprintf("node %s: %s", node.Name, node.Unavailable)
			}
			continue
		}
		if fitsIdle(node, &wl.Ask) {
			if nodes == nil {
				cache[key] = ""
			}
			return ""
		}
	}
	var r string
	switch {
	case admitted == 0:
		r = "no node admits it"
		if wl.NodesReason != "" {
			r += " (" + wl.NodesReason + ")"
		}
	case closed != "" && !s.anyAvailable(nodes):
		r = fmt.Sprintf("every node that admits it is out of planning (%s)", closed)
	default:
		r = fmt.Sprintf("no node that admits it could hold one instance (%s) even with its GPU work gone", describeAsk(&wl.Ask))
	}
	if nodes == nil {
		cache[key] = r
	}
	return r
}

// anyAvailable reports whether any available node is in the table (nil:
// any node at all).
func (s *state) anyAvailable(nodes []bool) bool {
	for n := range s.snap.Nodes {
		if (nodes == nil || nodes[n]) && s.snap.Nodes[n].Unavailable == "" {
			return true
		}
	}
	return false
}

// fitsIdle reports whether one instance of ask fits on node with nothing
// else on it.
func fitsIdle(node *cluster.Node, ask *cluster.Ask) bool {
	if node.CPUMilli < ask.CPUMilli || node.MemoryMiB < ask.MemoryMiB {
		return false
	}
	want := ask.WholeGPUs
	if ask.Shares > 0 {
		want = 1
	}
	for _, g := range node.GPUs {
		if want == 0 {
			break
		}
		if g.Unavailable == "" && (len(ask.Models) == 0 || slices.Contains(ask.Models, g.Model)) {
			want--
		}
	}
	return want == 0
}

// describeAsk renders one instance's ask for messages.
func describeAsk(a *cluster.Ask) string {
	var parts []string
	switch {
	case a.WholeGPUs > 0:
		parts = append(parts, fmt.Sprintf("%d GPUs", a.WholeGPUs))
	case a.Shares > 0:
		parts = append(parts, fmt.Sprintf("%s of one GPU", a.Shares))
	}
	if len(a.Models) > 0 {
		parts = append(parts, "model "+strings.Join(a.Models, " or "))
	}
	if a.CPUMilli > 0 || a.MemoryMiB > 0 {
		parts = append(parts, fmt.Sprintf("CPU %d, memory %d MiB", a.CPUMilli, a.MemoryMiB))
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}
