package placement

import "github.com/gpushare/nomad-gpushare/scheduler/cluster"

// reserve weighs the nodes that can still take a multi-GPU task against
// the multi-GPU tasks expected until the cluster is full, as the pools
// weigh GPU models: FGD's measure sees a type only if it is among the
// common ones, but a multi-GPU task that finds no node loses its whole
// ask, and the largest (8 GPUs and most of a node's CPU) fit only nodes
// that nothing else has touched.
//
// For each multi-GPU type of the workload (Workload.Multi: every one,
// however rare) it counts the slots, the tasks of that type the cluster
// can take now (each node on its own), and the need, the tasks of that
// type and of the same GPU count with a larger CPU ask (which take the
// same nodes) expected until the cluster is full: the free GPU capacity
// over the GPU demand per arriving task, times the types' weights. A
// placement that takes slots below the need loses, in expectation, the
// GPU ask of each slot it takes below it.
type reserve struct {
	w       *Workload
	perTask float64
	// slots and need are per type of w.Multi.
	slots []int
	need  []float64
}

func newReserve(w *Workload) *reserve {
	r := &reserve{w: w, slots: make([]int, len(w.Multi)), need: make([]float64, len(w.Multi))}
	for _, t := range w.Types {
		r.perTask += t.Weight * float64(t.Demand())
	}
	return r
}

// Demand is the GPU capacity a task of type tt takes.
func (tt *TaskType) Demand() cluster.Shares { return cluster.Shares(tt.GPUCount) * tt.Shares }

// slotsOn is how many tasks of type tt fit node n if its free CPU were
// cpu, its free memory mem, and its GPUs had free capacities free.
func slotsOn(tt *TaskType, n *Node, cpu, mem int64, free []cluster.Shares) int {
	idle := 0
	for i, v := range free {
		if v == cluster.SharesPerGPU && tt.modelAllowed(n.GPUs[i].Model) && n.GPUs[i].Mode != cluster.ModeShared && n.GPUs[i].Mode != cluster.ModeMIG {
			idle++
		}
	}
	k := idle / tt.GPUCount
	if tt.CPUMilli > 0 {
		k = min(k, int(cpu/tt.CPUMilli))
	}
	if tt.MemoryMiB > 0 {
		k = min(k, int(mem/tt.MemoryMiB))
	}
	return max(k, 0)
}

// load counts the slots and the need on c. With c.Pools set, c.Nodes are
// only candidates: the slots of the whole cluster are unknown, and the
// reserve weighs nothing (loss is 0).
func (r *reserve) load(c *Cluster, scratch []cluster.Shares) {
	clear(r.slots)
	clear(r.need)
	if len(r.w.Multi) == 0 || c.Pools != nil || r.perTask == 0 {
		return
	}
	var total cluster.Shares
	for i := range c.Nodes {
		n := &c.Nodes[i]
		scratch = scratch[:0]
		for _, g := range n.GPUs {
			scratch = append(scratch, g.Free)
			total += g.Free
		}
		for j := range r.w.Multi {
			r.slots[j] += slotsOn(&r.w.Multi[j], n, n.FreeCPUMilli, n.FreeMemoryMiB, scratch)
		}
	}
	h := float64(total) / r.perTask
	for j := range r.w.Multi {
		a := &r.w.Multi[j]
		for k := range r.w.Multi {
			if b := &r.w.Multi[k]; b.GPUCount == a.GPUCount && b.CPUMilli >= a.CPUMilli {
				r.need[j] += h * b.Weight
			}
		}
	}
}

// active reports whether the reserve weighs anything this placement: some
// type needs slots.
func (r *reserve) active() bool {
	for _, v := range r.need {
		if v > 0 {
			return true
		}
	}
	return false
}

// loss is the multi-GPU demand expected to find no node, in shares, once t
// lands on n and leaves its GPUs with free capacities after: the growth of
// each type's shortfall of slots against its need, times its GPU ask.
func (r *reserve) loss(n *Node, t Task, before, after []cluster.Shares) float64 {
	var sum float64
	for j := range r.w.Multi {
		if r.need[j] == 0 {
			continue
		}
		tt := &r.w.Multi[j]
		b := slotsOn(tt, n, n.FreeCPUMilli, n.FreeMemoryMiB, before)
		if b == 0 {
			continue
		}
		a := slotsOn(tt, n, n.FreeCPUMilli-t.CPUMilli, n.FreeMemoryMiB-t.MemoryMiB, after)
		if a == b {
			continue
		}
		sb := max(0, r.need[j]-float64(r.slots[j]))
		sa := max(0, r.need[j]-float64(r.slots[j]-b+a))
		sum += (sa - sb) * float64(tt.Demand())
	}
	return sum
}
