package placement

import (
	"fmt"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Cluster is the nodes a policy chooses among. Assign and Release keep the
// free capacity exact; policies read it.
type Cluster struct {
	Nodes []Node
	// Pools, when not nil, are the GPU pools of the whole cluster that
	// Nodes were drawn from: a caller that shows a policy only some
	// candidate nodes (a bounded search) gives it the cluster-wide
	// totals here, one entry per GPU model and mode, kept exact as
	// capacity changes. Nil means Nodes are the whole cluster, and a
	// policy that weighs pools counts them from Nodes.
	Pools []Pool
}

// Pool is the GPUs of one model in one mode: their number and their free
// capacity. Work that may use only some models (Task.Models) or modes
// can draw only on some pools, which the gpushare policy weighs.
type Pool struct {
	Model string
	Mode  cluster.Mode
	GPUs  int
	Free  cluster.Shares
}

// MayUse reports whether t may run on a GPU of model m in mode, whatever
// its free capacity: t names no models or names m, and the mode admits
// t's kind (cluster.ModeAny both kinds, cluster.ModeWhole whole GPUs,
// cluster.ModeShared shares, cluster.ModeMIG neither).
func (t Task) MayUse(m string, mode cluster.Mode) bool {
	switch mode {
	case cluster.ModeWhole:
		if isShare(t) {
			return false
		}
	case cluster.ModeShared:
		if !isShare(t) {
			return false
		}
	case cluster.ModeMIG:
		return false
	}
	return len(t.Models) == 0 || slices.Contains(t.Models, m)
}

// Fits reports whether t fits on node n and, if so, on which GPUs when the
// GPUs are taken in index order (the lowest-numbered GPUs that fit). It checks
// CPU, memory, models, and per-GPU capacity: a share needs one GPU with
// Shares free, N whole GPUs need N fully idle GPUs.
func (c *Cluster) Fits(n int, t Task) ([]int, bool) {
	node := &c.Nodes[n]
	if node.FreeCPUMilli < t.CPUMilli || node.FreeMemoryMiB < t.MemoryMiB {
		return nil, false
	}
	if t.GPUCount == 0 {
		return nil, true
	}
	var gpus []int
	for i, g := range node.GPUs {
		if g.Free >= t.Shares && t.MayUse(g.Model, g.Mode) {
			gpus = append(gpus, i)
			if len(gpus) == t.GPUCount {
				return gpus, true
			}
		}
	}
	return nil, false
}

// Assign applies a placement to the cluster. It returns an error, and changes
// nothing, when the choice does not fit.
func (c *Cluster) Assign(ch Choice, t Task) error {
	if err := c.check(ch, t); err != nil {
		return err
	}
	node := &c.Nodes[ch.Node]
	node.FreeCPUMilli -= t.CPUMilli
	node.FreeMemoryMiB -= t.MemoryMiB
	for _, g := range ch.GPUs {
		node.GPUs[g].Free -= t.Shares
	}
	return nil
}

// Release gives back what Assign took for the same choice and task.
func (c *Cluster) Release(ch Choice, t Task) {
	node := &c.Nodes[ch.Node]
	node.FreeCPUMilli += t.CPUMilli
	node.FreeMemoryMiB += t.MemoryMiB
	for _, g := range ch.GPUs {
		node.GPUs[g].Free += t.Shares
	}
}

func (c *Cluster) check(ch Choice, t Task) error {
	if ch.Node < 0 || ch.Node >= len(c.Nodes) {
		return fmt.Errorf("node index %d out of range [0,%d)", ch.Node, len(c.Nodes))
	}
	node := &c.Nodes[ch.Node]
	if node.FreeCPUMilli < t.CPUMilli || node.FreeMemoryMiB < t.MemoryMiB {
		return fmt.Errorf("node %s: task needs %d mCPU and %d MiB, %d and %d free",
			node.Name, t.CPUMilli, t.MemoryMiB, node.FreeCPUMilli, node.FreeMemoryMiB)
	}
	if len(ch.GPUs) != t.GPUCount {
		return fmt.Errorf("node %s: task needs %d GPUs, choice names %d", node.Name, t.GPUCount, len(ch.GPUs))
	}
	seen := map[int]bool{}
	for _, g := range ch.GPUs {
		if g < 0 || g >= len(node.GPUs) || seen[g] {
			return fmt.Errorf("node %s: GPU index %d invalid or repeated", node.Name, g)
		}
		seen[g] = true
		if node.GPUs[g].Free < t.Shares || !t.MayUse(node.GPUs[g].Model, node.GPUs[g].Mode) {
			return fmt.Errorf("node %s: GPU %d (%s, %s GPU free) cannot take %s GPU",
				node.Name, g, node.GPUs[g].Model, node.GPUs[g].Free, t.Shares)
		}
	}
	return nil
}
