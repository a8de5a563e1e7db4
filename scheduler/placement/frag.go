package placement

import "github.com/gpushare/nomad-gpushare/scheduler/cluster"

// fragMeter measures the expected GPU fragmentation of a node against a
// workload, two ways (fragValue):
//
//   - fgd, the FGD paper's measure: the sum over task types, weighted by
//     frequency, of the free GPU capacity a task of that type could not use
//     on the node. That is all of the node's free GPU capacity when the task
//     does not fit there at all (CPU, model or GPUs), and otherwise the free
//     capacity on GPUs with less free than the task's per-GPU ask. A
//     CPU-only type can use none of the free GPU capacity, so all of it
//     counts for that type whether or not the task fits (as in the paper's
//     simulator, where such types only shift every node's measure alike and
//     never steer a choice).
//   - fill, gpushare's look-ahead (computed only when the meter's fill flag
//     is set): for each GPU type, the free GPU capacity still left if tasks
//     of that type alone kept arriving until none fit, by GPU, CPU or
//     memory (see computeFill).
//
// Results are memoized by node state (free CPU, GPU model, sorted free GPU
// list): the measure depends on nothing else, and many nodes share a state.
// The memo is bounded: when it holds memoCap states it is emptied and
// refilled from the states in use, so a long-running scheduler keeps at most
// memoCap entries however many states it has seen.
type fragMeter struct {
	w *Workload
	// fill computes the fill measure too (the gpushare policy's).
	fill bool
	// byModel leaves out, for each type, the GPUs of models it may not use
	// (FGD counts them as fragmented).
	byModel bool
	memo    map[fragKey]fragValue
	memoCap int
	// models numbers the GPU models seen, for the memo's keys; lastModel
	// and lastID are the last one looked up (nodes of one model tend to
	// come together).
	models    map[string]int32
	lastModel string
	lastID    int32
	scratch   []cluster.Shares
	memAsk    int64
}

// maxMemoGPUs bounds the node size whose states are memoized.
const maxMemoGPUs = 16

// defaultMemoCap bounds the number of memoized node states (about 100 bytes
// each). It is well above the states a cluster of a few thousand nodes uses
// at once (about two per node and task type tried), so resets are rare.
const defaultMemoCap = 1 << 16

// fragValue is a node's fragmentation by both measures, in shares.
type fragValue struct {
	fgd, fill float64
}

func (a fragValue) minus(b fragValue) fragValue {
	return fragValue{fgd: a.fgd - b.fgd, fill: a.fill - b.fill}
}

// fragKey is a node state as the memo knows it. It holds numbers only,
// without padding, so that the map hashes it as one block of memory.
type fragKey struct {
	cpu   int64
	mem   int64
	model int32 // fragMeter.modelID
	n     int32
	free  [maxMemoGPUs]uint16
}

func newFragMeter(w *Workload) *fragMeter {
	return &fragMeter{w: w, memo: map[fragKey]fragValue{}, memoCap: defaultMemoCap, models: map[string]int32{}, lastID: -1}
}

// modelID is the number of GPU model m in the memo's keys.
func (f *fragMeter) modelID(m string) int32 {
	if f.lastID >= 0 && m == f.lastModel {
		return f.lastID
	}
	id, ok := f.models[m]
	if !ok {
		id = int32(len(f.models))
		f.models[m] = id
	}
	f.lastModel, f.lastID = m, id
	return id
}

// nodeModel is the model shared by all GPUs of n, and false when they differ.
func nodeModel(n *Node) (string, bool) {
	if len(n.GPUs) == 0 {
		return "", true
	}
	m := n.GPUs[0].Model
	for i := 1; i < len(n.GPUs); i++ {
		if n.GPUs[i].Model != m {
			return "", false
		}
	}
	return m, true
}

// frag is the fragmentation of node n if its free CPU were cpu and its GPUs
// had the given free capacities (free[i] for n.GPUs[i]).
func (f *fragMeter) frag(n *Node, cpu int64, free []cluster.Shares) fragValue {
	model, same := nodeModel(n)
	if !same || len(free) > maxMemoGPUs {
		return f.compute(n, cpu, free)
	}
	k := fragKey{cpu: cpu, model: f.modelID(model), n: int32(len(free))}
	if f.fill {
		k.mem = n.FreeMemoryMiB - f.memAsk
	}
	for i, v := range free {
		k.free[i] = uint16(v)
	}
	// Sort the key's free list (insertion sort; at most 16 entries): the
	// measure does not depend on GPU order when all GPUs share a model.
	for i := 1; i < int(k.n); i++ {
		for j := i; j > 0 && k.free[j] < k.free[j-1]; j-- {
			k.free[j], k.free[j-1] = k.free[j-1], k.free[j]
		}
	}
	if v, ok := f.memo[k]; ok {
		return v
	}
	v := f.compute(n, cpu, free)
	if len(f.memo) >= f.memoCap {
		clear(f.memo)
	}
	f.memo[k] = v
	return v
}

func (f *fragMeter) compute(n *Node, cpu int64, free []cluster.Shares) fragValue {
	v := fragValue{fgd: f.computeFGD(n, cpu, free)}
	if f.fill {
		v.fill = f.computeFill(n, cpu, free)
	}
	return v
}

func (f *fragMeter) computeFGD(n *Node, cpu int64, free []cluster.Shares) float64 {
	var total cluster.Shares
	for _, v := range free {
		total += v
	}
	if total == 0 {
		return 0
	}
	var sum float64
	for ti := range f.w.Types {
		tt := &f.w.Types[ti]
		usable := total
		if f.byModel && tt.GPUCount > 0 {
			usable = 0
			for i, v := range free {
				if tt.modelAllowed(n.GPUs[i].Model) {
					usable += v
				}
			}
		}
		if tt.GPUCount == 0 || cpu < tt.CPUMilli {
			sum += tt.Weight * float64(usable)
			continue
		}
		fit, unusable := 0, cluster.Shares(0)
		for i, v := range free {
			allowed := tt.modelAllowed(n.GPUs[i].Model)
			if v >= tt.Shares && allowed {
				fit++
			} else if allowed || !f.byModel {
				unusable += v
			}
		}
		if fit < tt.GPUCount {
			unusable = usable
		}
		sum += tt.Weight * float64(unusable)
	}
	return sum
}

// current is the fragmentation of n as it is.
func (f *fragMeter) current(n *Node) fragValue {
	f.memAsk = 0
	f.load(n)
	return f.frag(n, n.FreeCPUMilli, f.scratch)
}

// afterShare is the fragmentation of n once share t is placed on GPU g.
func (f *fragMeter) afterShare(n *Node, t Task, g int) fragValue {
	f.load(n)
	f.memAsk = t.MemoryMiB
	f.scratch[g] -= t.Shares
	return f.frag(n, n.FreeCPUMilli-t.CPUMilli, f.scratch)
}

// afterWhole is the fragmentation of n once t (CPU only or whole GPUs) is
// placed on it, on the lowest-numbered GPUs that fit.
func (f *fragMeter) afterWhole(n *Node, t Task) fragValue {
	f.load(n)
	f.memAsk = t.MemoryMiB
	k := t.GPUCount
	for i := range n.GPUs {
		if k == 0 {
			break
		}
		if f.scratch[i] >= t.Shares && t.MayUse(n.GPUs[i].Model, n.GPUs[i].Mode) {
			f.scratch[i] -= t.Shares
			k--
		}
	}
	return f.frag(n, n.FreeCPUMilli-t.CPUMilli, f.scratch)
}

func (f *fragMeter) load(n *Node) {
	f.scratch = f.scratch[:0]
	for i := range n.GPUs {
		f.scratch = append(f.scratch, n.GPUs[i].Free)
	}
}

// shareCandidate reports whether share t fits GPU g of n and no
// lower-numbered GPU of the same model and mode has the same free capacity
// (such GPUs are alike, so only the first of them needs trying).
func (f *fragMeter) shareCandidate(n *Node, t Task, g int) bool {
	gpu := &n.GPUs[g]
	if gpu.Free < t.Shares || !t.MayUse(gpu.Model, gpu.Mode) {
		return false
	}
	for h := 0; h < g; h++ {
		if o := &n.GPUs[h]; o.Free == gpu.Free && o.Model == gpu.Model && o.Mode == gpu.Mode {
			return false
		}
	}
	return true
}

// choice builds the Choice for t on node i, given the GPU bestOnNode chose.
func choice(c *Cluster, i int, t Task, gpu int) Choice {
	if isShare(t) {
		return Choice{Node: i, GPUs: []int{gpu}}
	}
	return Choice{Node: i, GPUs: lowestGPUs(&c.Nodes[i], t)}
}

// computeFill is the gpushare measure: for each GPU task type, the free GPU
// capacity that would still be left if tasks of that type alone filled the
// node until no more fit (by GPU, CPU or memory), weighted by frequency:
//
//	sum_t w_t * (freeGPU - k_t * gpuAsk_t),  k_t = min(fitByGPU_t, freeCPU/cpuAsk_t, freeMem/memAsk_t)
//
// fitByGPU counts partial GPUs for whole-GPU types and leftover slivers for
// shares; a type's memory ask is the mean of its tasks'. The memory left
// is the node's free memory less memAsk (the ask of the task being tried).
func (f *fragMeter) computeFill(n *Node, cpu int64, free []cluster.Shares) float64 {
	var total cluster.Shares
	for _, v := range free {
		total += v
	}
	if total == 0 {
		return 0
	}
	var sum float64
	for ti := range f.w.Types {
		tt := &f.w.Types[ti]
		if tt.GPUCount == 0 {
			continue
		}
		var byGPU int64
		usable := total
		if f.byModel {
			usable = 0
		}
		for i, v := range free {
			if !tt.modelAllowed(n.GPUs[i].Model) {
				continue
			}
			if f.byModel {
				usable += v
			}
			if tt.Shares < cluster.SharesPerGPU {
				byGPU += int64(v / tt.Shares)
			} else if v == cluster.SharesPerGPU {
				byGPU++
			}
		}
		if tt.Shares >= cluster.SharesPerGPU {
			byGPU /= int64(tt.GPUCount)
		}
		k := byGPU
		if tt.MemoryMiB > 0 {
			if byMem := (n.FreeMemoryMiB - f.memAsk) / tt.MemoryMiB; byMem < k {
				k = byMem
			}
		}
		if tt.CPUMilli > 0 {
			if byCPU := cpu / tt.CPUMilli; byCPU < k {
				k = byCPU
			}
		}
		sum += tt.Weight * float64(usable-cluster.Shares(k*int64(tt.GPUCount))*tt.Shares)
	}
	return sum
}
