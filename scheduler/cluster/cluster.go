// Package cluster is the cluster snapshot the scheduler decides on: nodes and
// their GPUs, running allocations, pending workloads and projects.
//
// A snapshot is plain data (slices of structs) so that the quota service can
// build one from Nomad and tests can build one by hand. Names refer to other
// records (an allocation names its project and node); Index builds the maps
// that turn names into slice positions once per cycle.
//
// Units: one GPU is 100 shares (Shares); a share is 0.01 of one GPU, memory
// and compute alike, the unit of package vocab (vocab.UnitsPerGPU). All
// quota arithmetic is in integer shares, so it is exact.
package cluster

import (
	"fmt"
	"strconv"

	"github.com/gpushare/nomad-gpushare/vocab"
)

// Shares is an amount of GPU in hundredths of a GPU: 100 shares = 1 GPU.
type Shares int64

// SharesPerGPU is the number of shares in one whole GPU: a share is the
// project's one unit of GPU (vocab.UnitsPerGPU to a GPU). It is untyped,
// as an int or a Shares alike.
const SharesPerGPU = vocab.UnitsPerGPU

// GPUs returns n whole GPUs as shares.
func GPUs(n int) Shares { return Shares(n) * SharesPerGPU }

// String formats s as GPUs with two decimals, e.g. "1.50".
func (s Shares) String() string {
	neg := ""
	if s < 0 {
		neg, s = "-", -s
	}
	return fmt.Sprintf("%s%d.%02d", neg, s/SharesPerGPU, s%SharesPerGPU)
}

// ParseShares reads a GPU amount written as a decimal ("2", "0.5", "1.25")
// with at most two decimals, exactly (no floating point).
func ParseShares(text string) (Shares, error) {
	if text == "" {
		return 0, fmt.Errorf("empty GPU amount")
	}
	neg := false
	s := text
	if s[0] == '-' {
		neg, s = true, s[1:]
	}
	whole, frac := s, ""
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			whole, frac = s[:i], s[i+1:]
			break
		}
	}
	if whole == "" || len(frac) > 2 || (len(frac) == 0 && len(whole) != len(s)) {
		return 0, fmt.Errorf("GPU amount %q: want a number with at most two decimals", text)
	}
	for _, part := range []string{whole, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return 0, fmt.Errorf("GPU amount %q: want a number with at most two decimals", text)
			}
		}
	}
	if len(whole) > 12 {
		return 0, fmt.Errorf("GPU amount %q: too large", text)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GPU amount %q: %w", text, err)
	}
	var f int64
	if frac != "" {
		f, _ = strconv.ParseInt(frac, 10, 64)
		if len(frac) == 1 {
			f *= 10
		}
	}
	v := Shares(w)*SharesPerGPU + Shares(f)
	if neg {
		v = -v
	}
	return v, nil
}

// Mode says which kind of work a GPU may carry. A GPU is never given both
// whole and shared at once; ModeAny lets the scheduler use an idle GPU either
// way.
type Mode uint8

const (
	// ModeAny: an idle GPU may take a whole-GPU task or shares.
	ModeAny Mode = iota
	// ModeWhole: the GPU is handed out only as a whole GPU.
	ModeWhole
	// ModeShared: the GPU is handed out only in shares.
	ModeShared
	// ModeMIG: the device is one MIG instance of a MIG-enabled GPU (a
	// part of it, GPU.Shares). Nomad places work on it by itself, whole;
	// the planner never does (its asks are in whole GPUs or shares of a
	// whole GPU), and what it holds counts its part of the GPU
	// (docs/design.md, Units and device families).
	ModeMIG
)

// String returns "any", "whole" or "shared".
func (m Mode) String() string {
	switch m {
	case ModeWhole:
		return "whole"
	case ModeShared:
		return "shared"
	case ModeMIG:
		return "mig"
	default:
		return "any"
	}
}

// GPU is one physical GPU of a node.
type GPU struct {
	// ID names the GPU as its node's device plugin does (the NVIDIA
	// UUID). Informational: planning does not read it.
	ID        string
	Model     string
	MemoryMiB int64
	Mode      Mode
	// Shares is the device's capacity when it is less than one GPU (a MIG
	// instance, ModeMIG); 0 means one whole GPU (see Capacity).
	Shares Shares
	// Unavailable, when not empty, says why the GPU takes no work (it is
	// unhealthy): nothing is placed on it, and what allocations hold on it
	// still counts for their projects but is never freed for other work.
	Unavailable string
}

// Capacity is what the device holds: Shares, or one whole GPU when unset.
func (g *GPU) Capacity() Shares {
	if g.Shares > 0 {
		return g.Shares
	}
	return SharesPerGPU
}

// Node is one Nomad client with its capacity. What is free is derived from
// the allocations bound to it (see Snapshot.Index).
type Node struct {
	Name      string
	CPUMilli  int64
	MemoryMiB int64
	GPUs      []GPU
	// Unavailable, when not empty, says why the node is out of planning
	// (not ready, ineligible, draining, or holding allocations the
	// snapshot cannot account for): nothing is placed on it and nothing
	// is suspended to make room on it. Its allocations still count for
	// their projects; their GPU bindings are not checked and may be
	// empty.
	Unavailable string
}

// Ask is what one instance of a workload needs. It asks for WholeGPUs whole
// GPUs, or for Shares of one GPU (1 to 99), or for neither (CPU only).
type Ask struct {
	CPUMilli  int64
	MemoryMiB int64
	WholeGPUs int
	Shares    Shares
	// Models, when not empty, restricts the GPU models the instance may use.
	Models []string
}

// GPUShares is the GPU amount the ask takes, in shares.
func (a Ask) GPUShares() Shares { return GPUs(a.WholeGPUs) + a.Shares }

// Validate reports whether the ask is well formed.
func (a Ask) Validate() error {
	switch {
	case a.CPUMilli < 0 || a.MemoryMiB < 0:
		return fmt.Errorf("negative CPU or memory ask")
	case a.WholeGPUs < 0 || a.Shares < 0:
		return fmt.Errorf("negative GPU ask")
	case a.WholeGPUs > 0 && a.Shares > 0:
		return fmt.Errorf("ask names both %d whole GPUs and %s GPU in shares", a.WholeGPUs, a.Shares)
	case a.Shares >= SharesPerGPU:
		return fmt.Errorf("share ask %s is not below one GPU; ask for whole GPUs", a.Shares)
	}
	return nil
}

// Allocation is one running instance of a task group: what it holds on one
// node. An instance that holds GPUs in more than one shape (shares of two
// GPUs through two tasks, or whole GPUs and shares) is given as one
// Allocation per shape, with the same ID and job.
type Allocation struct {
	ID      string
	Project string
	// Job identifies the job; it must be unique in the snapshot (for
	// example "namespace/job-id"). Suspension stops whole jobs.
	Job      string
	Group    string
	Priority int
	// Preemptible is false for work that opts out of suspension; it is
	// protected only within its project's guarantee (docs/design.md,
	// Reclaim and preempt).
	Preemptible bool
	// System marks an allocation of a system or sysbatch job: such a job
	// runs on every eligible node, and stopping it stops it everywhere, so
	// it is never a victim. Its GPUs count for its project.
	System bool
	// NeverVictim, when set, says why the job may never be a victim
	// whatever its project holds (for example: the quota service could not
	// bring it back). Unlike non-preemptible work it is protected above
	// its project's guarantee too. Its GPUs count for its project, and the
	// plan names it with the reason (plan.ProjectShare.NeverVictims).
	NeverVictim string
	Ask         Ask
	// Node names the node; GPUs are the indexes of the bound GPUs on it
	// (WholeGPUs of them, or one for a share).
	Node string
	GPUs []int
	// Start is when the allocation started (any monotonic unit, e.g. Unix
	// seconds); newer allocations are preempted first.
	Start int64
	// Gang marks an allocation of a gang: a job whose GPU task groups run
	// all together or not at all (docs/design.md, Gangs and elastic
	// groups). False for every other job.
	Gang bool
	// MinCount, when above 0, makes the allocation's task group elastic:
	// it runs with MinCount instances up to its count, and the instances
	// above MinCount are shrunk away (highest Instance first, then newest)
	// before any whole job is suspended. 0 means not elastic.
	MinCount int
	// InMinRuntime marks an allocation that started less than its minimum
	// runtime ago (docs/design.md, Minimum runtime): its job is no victim
	// of reclaim for a project above its guarantee, nor of preemption
	// inside its project, while all its allocations are so marked (an
	// elastic instance, while it is). Restoring a guarantee and holding a
	// project to its limit do not wait for it.
	InMinRuntime bool
	// Movable marks work that may be moved to another node to make room
	// (job meta gpushare.movable = "true"; docs/design.md,
	// Consolidation): the plan suspends it and holds its room elsewhere,
	// and it comes back there. Only a job of one allocation moves.
	Movable bool
	// Instance is the allocation's index in its task group (Nomad's
	// allocation name "job.group[Instance]"). When a group's count falls,
	// Nomad stops the highest indexes, so an elastic group shrinks from
	// its highest instance. 0 where unknown.
	Instance int
}

// Pending is a workload waiting to run: Count instances of one task group,
// each with the same ask. A suspended job comes back as pending workloads
// (Suspended set) and is resumed when it fits, in fairness order.
type Pending struct {
	Project     string
	Job         string
	Group       string
	Priority    int
	Preemptible bool
	Ask         Ask
	Count       int
	// Submit is when the workload was submitted (same unit as Start);
	// earlier goes first among equals.
	Submit    int64
	Suspended bool
	// Nodes, when not nil, are the only nodes the workload may run on
	// (those its constraints admit); an empty non-nil list admits none.
	// NodesReason says, for people, why the others are left out (for
	// example which constraint filtered them).
	Nodes       []string
	NodesReason string
	// Gang marks a workload of a gang job: every pending workload of the
	// job that is not Shrunk is placed with the others, and with the
	// job's running allocations, or none of it is (docs/design.md, Gangs
	// and elastic groups). False for every other job.
	Gang bool
	// MinCount is the elastic minimum of the workload's task group (see
	// Allocation.MinCount); 0 means not elastic. A pending group is
	// admitted at its Count like any other; the minimum matters once it
	// runs.
	MinCount int
	// Shrunk marks instances a shrink took from a running elastic group:
	// they grow back only as the plan's lowest priority, on capacity
	// nothing else waits for (plan.Result.Grow), never by reclaim or
	// preemption, and never hold up the rest of their gang.
	Shrunk bool
}

// GPUShares is the GPU amount of all instances, in shares.
func (p Pending) GPUShares() Shares { return p.Ask.GPUShares() * Shares(p.Count) }

// Project is a quota holder: by default a Nomad namespace.
type Project struct {
	Name string
	// Guaranteed is the project's guaranteed quota (fractions allowed).
	Guaranteed Shares
	// Limit is a hard cap on what the project may use, when HasLimit.
	Limit    Shares
	HasLimit bool
	// Priority orders projects: higher wins over-quota capacity first and
	// is reclaimed from last.
	Priority int
	// OverQuotaWeight splits over-quota capacity inside a priority tier;
	// zero means the default weight 1.
	OverQuotaWeight int64
	// NoOverQuota is an over-quota weight of 0, as KAI-Scheduler and
	// Kueue read it: the project gets no share of the surplus. It may
	// still run on idle GPUs, above its deserved share, so any project
	// entitled to reclaim takes that work back first (docs/design.md,
	// Projects and fair share).
	NoOverQuota bool
	// SurplusFactor, when above 0, scales the over-quota weight: the
	// quota service's time-aware fair share lowers it for a project that
	// used much of the surplus recently (docs/design.md, Projects and
	// fair share). 0 means 1.
	SurplusFactor float64
	// Department names the project's department, one of
	// Snapshot.Departments, or is empty for a project on its own
	// (docs/design.md, Departments). A department's own Department is
	// empty: departments do not nest.
	Department string
}

// Weight is the over-quota weight with the default applied: 0 for
// NoOverQuota, else OverQuotaWeight or 1.
func (p Project) Weight() int64 {
	switch {
	case p.NoOverQuota:
		return 0
	case p.OverQuotaWeight <= 0:
		return 1
	}
	return p.OverQuotaWeight
}

// Unbounded stands for "no bound" in the model's amounts: the cap of a
// project without a limit, a node's CPU or memory where none is known. It
// is above any real amount and leaves room to add many without overflow.
const Unbounded = 1 << 40

// Cap is the most the project may ever hold: its limit, or Unbounded.
func (p Project) Cap() Shares {
	if p.HasLimit {
		return p.Limit
	}
	return Unbounded
}

// Snapshot is the state one scheduling cycle decides on. The planner
// only reads it; whoever built a snapshot may share its lists with the
// next one (the quota service's View does), so code that changes a
// snapshot it did not build clones the list first.
type Snapshot struct {
	Nodes       []Node
	Allocations []Allocation
	Pending     []Pending
	Projects    []Project
	// Departments group projects one level up: a department has a
	// guarantee, limit, priority and over-quota weight as a project has
	// (its SurplusFactor and Department are not read), and its projects
	// share what it is given (docs/design.md, Departments).
	Departments []Project
}
