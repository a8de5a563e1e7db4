package sim

import (
	"cmp"
	"errors"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// Offline is the offline reference of a run: the same tasks that arrive
// in Run until arrived GPU demand first reaches the read level, known all
// at once, sorted by GPU demand (then CPU, then memory) from largest to
// smallest and placed in that order by cfg.Policy. With the bestfit policy
// it is best-fit-decreasing, the classic offline bin-packing heuristic: it
// is not a proven bound, but no online policy is expected to come close
// to it, since it places the largest tasks while the cluster is empty.
// AllocAtStop is the allocation after the reference's tasks (at the read
// level: it places nothing more).
func Offline(cfg Config) (Result, error) {
	readAt, stopAt, err := cfg.levels()
	if err != nil {
		return Result{}, err
	}
	c := &placement.Cluster{Nodes: cloneNodes(cfg.Nodes)}
	capacity := cluster.GPUs(0)
	for _, n := range c.Nodes {
		capacity += cluster.GPUs(len(n.GPUs))
	}
	if capacity == 0 {
		return Result{}, errors.New("sim: no GPU capacity")
	}
	readLevel, stopLevel := readAt*float64(capacity), stopAt*float64(capacity)
	next := arrivals(cfg.Tasks, cfg.Seed)
	var batch []placement.Task
	var arrived cluster.Shares
	for float64(arrived) < readLevel {
		t := next()
		if float64(arrived+t.Demand()) > stopLevel {
			break
		}
		arrived += t.Demand()
		batch = append(batch, t)
	}
	slices.SortStableFunc(batch, func(a, b placement.Task) int {
		return cmp.Or(cmp.Compare(b.Demand(), a.Demand()), cmp.Compare(b.CPUMilli, a.CPUMilli),
			cmp.Compare(b.MemoryMiB, a.MemoryMiB))
	})
	res := Result{Capacity: capacity, Arrived: len(batch)}
	var allocated cluster.Shares
	for _, t := range batch {
		ch, ok := cfg.Policy.Place(c, t)
		if !ok {
			res.Failed++
			continue
		}
		if err := c.Assign(ch, t); err != nil {
			return res, err
		}
		allocated += t.Demand()
		res.Placed++
	}
	res.AllocAtStop = 100 * float64(allocated) / float64(capacity)
	res.UnallocAtRead = 100 - res.AllocAtStop
	return res, nil
}
