package cluster

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error Index returns for a snapshot that
// contradicts itself.
var ErrInvalid = errors.New("invalid snapshot")

// Index is the lookup tables of a snapshot and the capacity left free by its
// allocations. It is built once per cycle by Snapshot.Index and is read-only
// afterwards.
type Index struct {
	// ProjectByName and NodeByName map names to positions in
	// Snapshot.Projects and Snapshot.Nodes.
	ProjectByName map[string]int
	NodeByName    map[string]int
	// ProjectDepartment is, per project, the position of its department
	// in Snapshot.Departments, or -1 for a project on its own.
	ProjectDepartment []int32
	// AllocProject and AllocNode are, per allocation, the positions of its
	// project and node; PendingProject the same for pending workloads.
	AllocProject   []int32
	AllocNode      []int32
	PendingProject []int32
	// GPUOffset[n] is the position of node n's first GPU in FreeShares.
	GPUOffset []int32
	// FreeShares is the unallocated part of every GPU, node by node.
	FreeShares []Shares
	// FreeCPUMilli and FreeMemoryMiB are per node.
	FreeCPUMilli  []int64
	FreeMemoryMiB []int64
	// Held is the GPU amount each project's allocations hold;
	// NonPreemptibleHeld the part of it held by work that opted out of
	// suspension.
	Held               []Shares
	NonPreemptibleHeld []Shares
	// Capacity is the GPU amount projects share: every available GPU of
	// an available node, plus what allocations hold on unavailable GPUs
	// and nodes (that work runs and counts for its projects, but nothing
	// else can be given there).
	Capacity Shares
	// PendingNodes is, per pending workload, the nodes it may run on as a
	// table by node position, or nil when it may run on every node.
	// Workloads that share one Nodes slice share the table.
	PendingNodes [][]bool
	// PendingTable numbers the tables of PendingNodes: per pending
	// workload, the number of its table (0, 1, ... in the order first
	// used; workloads that share a table share its number), or -1 when it
	// may run on every node. Caches of answers per table key on it.
	PendingTable []int32
	// tables are the distinct tables, by number.
	tables [][]bool
}

// Admits reports whether pending workload w may run on node n.
func (x *Index) Admits(w, n int) bool {
	t := x.PendingNodes[w]
	return t == nil || t[n]
}

// Free returns the free shares of GPU g on node n.
func (x *Index) Free(n, g int) Shares { return x.FreeShares[int(x.GPUOffset[n])+g] }

// Index checks the snapshot and builds its lookup tables. Every error wraps
// ErrInvalid and names the record at fault: duplicate names, unknown
// projects or nodes, malformed asks, bindings to GPUs that do not exist or
// that would be over-committed or used against their mode.
func (s *Snapshot) Index() (*Index, error) {
	x := &Index{
		ProjectByName:      make(map[string]int, len(s.Projects)),
		NodeByName:         make(map[string]int, len(s.Nodes)),
		AllocProject:       make([]int32, len(s.Allocations)),
		AllocNode:          make([]int32, len(s.Allocations)),
		PendingProject:     make([]int32, len(s.Pending)),
		PendingNodes:       make([][]bool, len(s.Pending)),
		PendingTable:       make([]int32, len(s.Pending)),
		GPUOffset:          make([]int32, len(s.Nodes)+1),
		FreeCPUMilli:       make([]int64, len(s.Nodes)),
		FreeMemoryMiB:      make([]int64, len(s.Nodes)),
		Held:               make([]Shares, len(s.Projects)),
		NonPreemptibleHeld: make([]Shares, len(s.Projects)),
	}
	if err := x.addProjects(s); err != nil {
		return nil, err
	}
	if err := x.addNodes(s); err != nil {
		return nil, err
	}
	if err := x.addAllocations(s); err != nil {
		return nil, err
	}
	if err := x.addPending(s); err != nil {
		return nil, err
	}
	return x, nil
}

// IndexAfter is s.Index for a snapshot that may run as last did, x
// being last's Index: when s.EqualRunning(last), the new Index shares
// x's tables of the projects, nodes and allocations (both stay read
// only) and only s's pending workloads are checked and indexed (reused
// is then true); otherwise it is s.Index().
func (s *Snapshot) IndexAfter(last *Snapshot, x *Index) (out *Index, reused bool, err error) {
	if last == nil || x == nil || !s.EqualRunning(last) {
		out, err = s.Index()
		return out, false, err
	}
	y := *x
	y.PendingProject = make([]int32, len(s.Pending))
	y.PendingNodes = make([][]bool, len(s.Pending))
	y.PendingTable = make([]int32, len(s.Pending))
	y.tables = nil
	if err := y.addPending(s); err != nil {
		return nil, false, err
	}
	return &y, true, nil
}

// addProjects checks the projects and indexes them by name.
func (x *Index) addProjects(s *Snapshot) error {
	for i := range s.Projects {
		p := &s.Projects[i]
		if _, dup := x.ProjectByName[p.Name]; dup || p.Name == "" {
			return fmt.Errorf("%w: project %q: empty or duplicate name", ErrInvalid, p.Name)
		}
		if p.Guaranteed < 0 || (p.HasLimit && p.Limit < 0) {
			return fmt.Errorf("%w: project %q: negative guarantee or limit", ErrInvalid, p.Name)
		}
		x.ProjectByName[p.Name] = i
	}
	return x.addDepartments(s)
}

// addDepartments checks the departments and finds each project's.
func (x *Index) addDepartments(s *Snapshot) error {
	byName := make(map[string]int32, len(s.Departments))
	for i := range s.Departments {
		d := &s.Departments[i]
		if _, dup := byName[d.Name]; dup || d.Name == "" {
			return fmt.Errorf("%w: department %q: empty or duplicate name", ErrInvalid, d.Name)
		}
		if d.Guaranteed < 0 || (d.HasLimit && d.Limit < 0) {
			return fmt.Errorf("%w: department %q: negative guarantee or limit", ErrInvalid, d.Name)
		}
		if d.Department != "" {
			return fmt.Errorf("%w: department %q: names department %q, but departments do not nest", ErrInvalid, d.Name, d.Department)
		}
		byName[d.Name] = int32(i)
	}
	x.ProjectDepartment = make([]int32, len(s.Projects))
	for i := range s.Projects {
		p := &s.Projects[i]
		x.ProjectDepartment[i] = -1
		if p.Department == "" {
			continue
		}
		d, ok := byName[p.Department]
		if !ok {
			return fmt.Errorf("%w: project %q: unknown department %q", ErrInvalid, p.Name, p.Department)
		}
		x.ProjectDepartment[i] = d
	}
	return nil
}

// addNodes checks the nodes, indexes them by name and starts every node
// and GPU fully free.
func (x *Index) addNodes(s *Snapshot) error {
	total := 0
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if _, dup := x.NodeByName[n.Name]; dup || n.Name == "" {
			return fmt.Errorf("%w: node %q: empty or duplicate name", ErrInvalid, n.Name)
		}
		x.NodeByName[n.Name] = i
		for g := range n.GPUs {
			if c := n.GPUs[g].Shares; c < 0 || c > SharesPerGPU {
				return fmt.Errorf("%w: node %q GPU %d: capacity %s, want 0 (one GPU) to 1.00", ErrInvalid, n.Name, g, c)
			}
		}
		x.GPUOffset[i] = int32(total)
		total += len(n.GPUs)
		x.FreeCPUMilli[i] = n.CPUMilli
		x.FreeMemoryMiB[i] = n.MemoryMiB
	}
	x.GPUOffset[len(s.Nodes)] = int32(total)
	x.FreeShares = make([]Shares, total)
	for i := range s.Nodes {
		n := &s.Nodes[i]
		for g := range n.GPUs {
			if n.Unavailable == "" && n.GPUs[g].Unavailable == "" {
				c := n.GPUs[g].Capacity()
				x.FreeShares[int(x.GPUOffset[i])+g] = c
				x.Capacity += c
			}
		}
	}
	return nil
}

// addAllocations checks the allocations, takes what they hold from the
// free capacity and adds it to their projects' usage.
func (x *Index) addAllocations(s *Snapshot) error {
	// Allocations usually come node by node: remember the last lookup.
	lastNode, n := "", -1
	for i := range s.Allocations {
		a := &s.Allocations[i]
		p, ok := x.ProjectByName[a.Project]
		if !ok {
			return fmt.Errorf("%w: allocation %q: unknown project %q", ErrInvalid, a.ID, a.Project)
		}
		if n < 0 || a.Node != lastNode {
			if n, ok = x.NodeByName[a.Node]; !ok {
				return fmt.Errorf("%w: allocation %q: unknown node %q", ErrInvalid, a.ID, a.Node)
			}
			lastNode = a.Node
		}
		if err := a.Ask.Validate(); err != nil {
			return fmt.Errorf("%w: allocation %q: %w", ErrInvalid, a.ID, err)
		}
		if a.MinCount < 0 {
			return fmt.Errorf("%w: allocation %q: negative minimum count %d", ErrInvalid, a.ID, a.MinCount)
		}
		if err := x.bind(s, n, a); err != nil {
			return fmt.Errorf("%w: allocation %q: %w", ErrInvalid, a.ID, err)
		}
		x.AllocProject[i], x.AllocNode[i] = int32(p), int32(n)
		x.Held[p] += a.Ask.GPUShares()
		if !a.Preemptible {
			x.NonPreemptibleHeld[p] += a.Ask.GPUShares()
		}
	}
	return nil
}

// addPending checks the pending workloads and finds their projects and the
// nodes they may run on.
func (x *Index) addPending(s *Snapshot) error {
	tables := map[nodeList]int32{}
	for i := range s.Pending {
		w := &s.Pending[i]
		p, ok := x.ProjectByName[w.Project]
		if !ok {
			return fmt.Errorf("%w: pending %s/%s: unknown project %q", ErrInvalid, w.Job, w.Group, w.Project)
		}
		if err := w.Ask.Validate(); err != nil {
			return fmt.Errorf("%w: pending %s/%s: %w", ErrInvalid, w.Job, w.Group, err)
		}
		if w.Count < 1 {
			return fmt.Errorf("%w: pending %s/%s: count %d below 1", ErrInvalid, w.Job, w.Group, w.Count)
		}
		if w.MinCount < 0 {
			return fmt.Errorf("%w: pending %s/%s: negative minimum count %d", ErrInvalid, w.Job, w.Group, w.MinCount)
		}
		if w.Shrunk && w.Suspended {
			return fmt.Errorf("%w: pending %s/%s: both shrunk and suspended", ErrInvalid, w.Job, w.Group)
		}
		x.PendingProject[i] = int32(p)
		id, err := x.nodeTable(w.Nodes, tables)
		if err != nil {
			return fmt.Errorf("%w: pending %s/%s: %w", ErrInvalid, w.Job, w.Group, err)
		}
		x.PendingTable[i] = id
		if id >= 0 {
			x.PendingNodes[i] = x.tables[id]
		}
	}
	return nil
}

// nodeList identifies a Pending.Nodes slice: workloads whose lists share
// their first element and length share one table.
type nodeList struct {
	first *string
	n     int
}

// nodeTable turns a list of node names into a table by node position
// and returns its number (-1 for a nil list); tables numbers the lists
// seen so far.
func (x *Index) nodeTable(names []string, tables map[nodeList]int32) (int32, error) {
	if names == nil {
		return -1, nil
	}
	key := nodeList{n: len(names)}
	if len(names) > 0 {
		key.first = &names[0]
	}
	if id, ok := tables[key]; ok {
		return id, nil
	}
	t := make([]bool, len(x.NodeByName))
	for _, name := range names {
		n, ok := x.NodeByName[name]
		if !ok {
			return 0, fmt.Errorf("nodes: unknown node %q", name)
		}
		t[n] = true
	}
	id := int32(len(x.tables))
	x.tables = append(x.tables, t)
	tables[key] = id
	return id, nil
}

// bind takes the allocation's ask from the free capacity of node n. On an
// unavailable node nothing is taken and the binding is not checked; on an
// unavailable GPU what the allocation holds adds to the capacity instead.
func (x *Index) bind(s *Snapshot, n int, a *Allocation) error {
	node := &s.Nodes[n]
	if node.Unavailable != "" {
		x.Capacity += a.Ask.GPUShares()
		return nil
	}
	want := a.Ask.WholeGPUs
	per := Shares(SharesPerGPU)
	if a.Ask.Shares > 0 {
		want, per = 1, a.Ask.Shares
	}
	if len(a.GPUs) != want {
		return fmt.Errorf("ask needs %d GPUs, bound to %d", want, len(a.GPUs))
	}
	for j, g := range a.GPUs {
		if g < 0 || g >= len(node.GPUs) {
			return fmt.Errorf("node %q has no GPU %d", node.Name, g)
		}
		for _, h := range a.GPUs[:j] {
			if h == g {
				return fmt.Errorf("GPU %d bound twice", g)
			}
		}
		gpu := &node.GPUs[g]
		if gpu.Unavailable != "" {
			x.Capacity += per
			continue
		}
		if (gpu.Mode == ModeWhole && a.Ask.Shares > 0) || (gpu.Mode == ModeShared && a.Ask.WholeGPUs > 0) {
			return fmt.Errorf("node %q GPU %d is in %s mode", node.Name, g, gpu.Mode)
		}
		free := &x.FreeShares[int(x.GPUOffset[n])+g]
		if *free < per {
			return fmt.Errorf("node %q GPU %d over-committed: %s free, %s asked", node.Name, g, *free, per)
		}
		*free -= per
	}
	x.FreeCPUMilli[n] -= a.Ask.CPUMilli
	x.FreeMemoryMiB[n] -= a.Ask.MemoryMiB
	if x.FreeCPUMilli[n] < 0 || x.FreeMemoryMiB[n] < 0 {
		return fmt.Errorf("node %q CPU or memory over-committed", node.Name)
	}
	return nil
}
