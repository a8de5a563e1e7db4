// Package fairshare computes each project's deserved GPU share for one
// scheduling cycle.
//
// The rule (docs/design.md, Projects and fair share): every project first gets
// min(guaranteed, demand); what is left of the capacity goes to projects with
// unmet demand, highest priority tier first, split by over-quota weight
// inside a tier, never above a project's limit. Inside a tier the split is
// water-filling: a project capped by its demand or limit leaves its part to
// the others of the tier, and what the tier cannot use goes to the next tier.
// A project with over-quota weight 0 (cluster.Project.NoOverQuota, as in
// KAI-Scheduler and Kueue) gets no part of the surplus at all: its deserved
// share is min(guaranteed, demand), and what nobody else can use is left
// unassigned rather than given to it.
//
// Everything is in integer shares (0.01 GPU), so results are exact. Each
// division rounds down; the few shares left by rounding go one by one to the
// projects with the largest remainders (then larger weight, then name), so
// the total handed out is exactly min(capacity, total capped demand), less
// what only weight-0 projects want, and never more than the capacity.
//
// A project's SurplusFactor (time-aware fair share) scales its weight in
// the split of the surplus.
//
// When the guarantees alone exceed the capacity (an over-committed cluster,
// e.g. after nodes left), the guarantee phase is itself water-filled: higher
// priority tiers first, in proportion to the guarantees inside a tier.
package fairshare

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// Deserved returns the deserved share of every project, in the order of
// projects. demand[i] is what project i could use this cycle: what it runs
// plus what it has pending. capacity is the cluster's GPU capacity.
func Deserved(capacity cluster.Shares, projects []cluster.Project, demand []cluster.Shares) []cluster.Shares {
	n := len(projects)
	deserved := make([]cluster.Shares, n)
	want := make([]cluster.Shares, n) // demand capped by limit
	first := make([]cluster.Shares, n)
	var firstTotal cluster.Shares
	for i := range projects {
		want[i] = max(0, min(demand[i], projects[i].Cap()))
		first[i] = min(max(projects[i].Guaranteed, 0), want[i])
		firstTotal += first[i]
	}
	capacity = max(capacity, 0)
	tiers := priorityTiers(projects)
	if firstTotal > capacity {
		// Guarantees over-committed: fill them tier by tier, in proportion
		// to the guarantee.
		byGuarantee := filling{projects, deserved, first, func(i int) int64 { return int64(first[i]) }}
		avail := capacity
		for _, tier := range tiers {
			avail = byGuarantee.fill(avail, tier)
		}
		return deserved
	}
	copy(deserved, first)
	byWeight := filling{projects, deserved, want, surplusWeights(projects)}
	avail := capacity - firstTotal
	for _, tier := range tiers {
		if avail == 0 {
			break
		}
		avail = byWeight.fill(avail, tier)
	}
	return deserved
}

// surplusScale is the resolution of cluster.Project.SurplusFactor in the
// split of the surplus.
const surplusScale = 1_000_000

// surplusWeights is each project's weight in the split of the surplus:
// its over-quota weight, scaled by its SurplusFactor when any project has
// one (then in millionths, at least 1 for a weight above 0).
func surplusWeights(projects []cluster.Project) func(int) int64 {
	if !slices.ContainsFunc(projects, func(p cluster.Project) bool { return p.SurplusFactor > 0 }) {
		return func(i int) int64 { return projects[i].Weight() }
	}
	w := make([]int64, len(projects))
	for i, p := range projects {
		f := p.SurplusFactor
		if f <= 0 {
			f = 1
		}
		if w[i] = p.Weight(); w[i] > 0 {
			w[i] = max(1, int64(float64(w[i])*f*surplusScale+0.5))
		}
	}
	return func(i int) int64 { return w[i] }
}

// priorityTiers groups project positions by priority, highest first; inside
// a tier positions are in name order.
func priorityTiers(projects []cluster.Project) [][]int {
	order := make([]int, len(projects))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(projects[b].Priority, projects[a].Priority); c != 0 {
			return c
		}
		return cmp.Compare(projects[a].Name, projects[b].Name)
	})
	var tiers [][]int
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && projects[order[end]].Priority == projects[order[start]].Priority {
			end++
		}
		tiers = append(tiers, order[start:end])
		start = end
	}
	return tiers
}

// filling water-fills GPU amounts over the members of one priority tier:
// member i may grow from given[i] up to upto[i], in proportion to
// weight(i).
type filling struct {
	projects    []cluster.Project
	given, upto []cluster.Shares
	weight      func(int) int64
}

// fill hands out avail over the members of tier and returns what is left.
// Members whose remaining room is within their part are filled and leave;
// the others share the rest in the next pass, until nobody is capped (see
// split).
func (f filling) fill(avail cluster.Shares, tier []int) cluster.Shares {
	active := make([]int, 0, len(tier))
	for _, i := range tier {
		if f.given[i] < f.upto[i] && f.weight(i) > 0 {
			active = append(active, i)
		}
	}
	for avail > 0 && len(active) > 0 {
		var total uint64
		for _, i := range active {
			total += uint64(f.weight(i))
		}
		left, kept := f.fillCapped(avail, active, total)
		if len(kept) == len(active) {
			return f.split(avail, active, total)
		}
		avail, active = left, kept
	}
	return avail
}

// fillCapped gives every active member whose remaining room is within its
// part of avail that room. It returns what is left of avail and the members
// still short of their room (active, filtered in place).
func (f filling) fillCapped(avail cluster.Shares, active []int, total uint64) (cluster.Shares, []int) {
	left := avail
	kept := active[:0]
	for _, i := range active {
		part, _ := portion(avail, f.weight(i), total)
		if room := f.upto[i] - f.given[i]; room <= part {
			f.given[i] += room
			left -= room
		} else {
			kept = append(kept, i)
		}
	}
	return left, kept
}

// split gives every active member its part of avail, none of them capped,
// rounded down; the shares left by rounding go one by one to the largest
// remainders (then larger weight, then name). It returns what is left.
func (f filling) split(avail cluster.Shares, active []int, total uint64) cluster.Shares {
	type rest struct {
		i   int
		rem uint64
	}
	start := avail
	rests := make([]rest, 0, len(active))
	for _, i := range active {
		part, rem := portion(start, f.weight(i), total)
		f.given[i] += part
		avail -= part
		rests = append(rests, rest{i, rem})
	}
	slices.SortFunc(rests, func(a, b rest) int {
		if c := cmp.Compare(b.rem, a.rem); c != 0 {
			return c
		}
		if c := cmp.Compare(f.weight(b.i), f.weight(a.i)); c != 0 {
			return c
		}
		return cmp.Compare(f.projects[a.i].Name, f.projects[b.i].Name)
	})
	for _, r := range rests {
		if avail == 0 {
			break
		}
		if f.given[r.i] < f.upto[r.i] {
			f.given[r.i]++
			avail--
		}
	}
	return avail
}

// portion is avail*w/total rounded down, and the remainder, without
// overflow (w <= total).
func portion(avail cluster.Shares, w int64, total uint64) (cluster.Shares, uint64) {
	hi, lo := bits.Mul64(uint64(avail), uint64(w))
	q, r := bits.Div64(hi, lo, total)
	return cluster.Shares(q), r
}
