// Package borrow is the borrowing rule of a GPU's memory: tenants may
// borrow, up to their limit, the memory nobody else needs, and every
// tenant stays able to reach its request (docs/design.md, "Dynamic
// fractions and the node-level scheduler", "Borrowing rule"). It is a pure
// function of one GPU's state as a monitor cycle saw it:
//
//  1. A tenant using more than its limit is killed (reason "limit").
//  2. On every GPU, free memory stays at least the sum over its tenants of
//     min(request - used, headroom) where positive: every tenant below its
//     request can grow at once by its headroom (or up to its request, if
//     that is less). Free memory is the GPU's total less what every
//     process on it uses (tenants', and processes of no tenant); a killed
//     tenant counts as using nothing (it restarts and is owed its request
//     again). With a headroom of the whole GPU this is "free memory covers
//     every unused request": borrowers use only memory nobody requested.
//     With less, borrowers also use the idle part of others' requests, and
//     give it back as their owners grow.
//  3. While that does not hold, the tenant most above its request is
//     killed (reason "reclaim": an owner takes its memory back), the
//     newest on ties. A tenant within its request is never killed: when
//     only such tenants are left and the rule still fails (processes of no
//     tenant hold the memory), the shortfall is reported instead.
package borrow

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Tenant is one task's use of one physical GPU, in MiB.
type Tenant struct {
	// Key names the tenant (allocation ID and task) in kills and ties.
	Key        string
	RequestMiB uint64
	LimitMiB   uint64
	UsedMiB    uint64
	// Since is when the tenant's allocation was created: on ties the
	// newest is killed first.
	Since time.Time
}

// Above is how far the tenant is above its request (0 within it).
func (t Tenant) Above() uint64 {
	if t.UsedMiB > t.RequestMiB {
		return t.UsedMiB - t.RequestMiB
	}
	return 0
}

// claim is what free memory must hold for the tenant: what it may still
// claim within its request, at most headroom.
func (t Tenant) claim(headroom uint64) int64 {
	if t.RequestMiB > t.UsedMiB {
		return int64(min(t.RequestMiB-t.UsedMiB, headroom))
	}
	return 0
}

// GPU is one physical GPU as a monitor cycle saw it.
type GPU struct {
	UUID     string
	TotalMiB uint64
	// OtherMiB is the memory that processes of no tenant of this GPU use.
	OtherMiB uint64
	// HeadroomMiB is how much each tenant below its request may grow at
	// once (see the package rule).
	HeadroomMiB uint64
	Tenants     []Tenant
}

// Reason says why a tenant is killed.
type Reason string

const (
	// ReasonLimit: the tenant used more than its limit.
	ReasonLimit Reason = "limit"
	// ReasonReclaim: the tenant used memory above its request that
	// another tenant's request needs.
	ReasonReclaim Reason = "reclaim"
)

// Kill is one tenant to kill on the GPU.
type Kill struct {
	Tenant Tenant
	Reason Reason
	// Detail says why in words, with the figures.
	Detail string
}

// Decision is what the rule asks for one GPU.
type Decision struct {
	Kills []Kill
	// ShortMiB is what free memory still lacks after the kills, when only
	// tenants within their request are left (0 when the rule holds).
	ShortMiB uint64
}

// Decide applies the rule to one GPU.
func Decide(g GPU) Decision {
	var d Decision
	live := make([]Tenant, 0, len(g.Tenants))
	var claim int64 // what free memory must hold; killed tenants use 0
	for _, t := range g.Tenants {
		if t.UsedMiB > t.LimitMiB {
			d.Kills = append(d.Kills, Kill{Tenant: t, Reason: ReasonLimit,
				Detail: fmt.Sprintf("uses %d MiB, above its limit of %d MiB", t.UsedMiB, t.LimitMiB)})
			claim += restarted(t).claim(g.HeadroomMiB)
			continue
		}
		live = append(live, t)
		claim += t.claim(g.HeadroomMiB)
	}
	slices.SortStableFunc(d.Kills, func(a, b Kill) int { return cmp.Compare(a.Tenant.Key, b.Tenant.Key) })
	free := freeMiB(g, live)
	slices.SortFunc(live, victimOrder)
	for _, t := range live {
		if free >= claim {
			return d
		}
		if t.Above() == 0 {
			break // the rest are within their request: never killed
		}
		d.Kills = append(d.Kills, Kill{Tenant: t, Reason: ReasonReclaim,
			Detail: fmt.Sprintf("free %d MiB is less than the %d MiB the tenants below their request must be able to grow by; it uses %d MiB, %d MiB above its request of %d MiB",
				free, claim, t.UsedMiB, t.Above(), t.RequestMiB)})
		free += int64(t.UsedMiB)
		claim += restarted(t).claim(g.HeadroomMiB)
	}
	if free < claim {
		d.ShortMiB = uint64(claim - free)
	}
	return d
}

// restarted is a killed tenant: it uses nothing and is owed its request.
func restarted(t Tenant) Tenant {
	t.UsedMiB = 0
	return t
}

// freeMiB is the GPU's total less what its processes use (negative when
// the readings add up to more than the total).
func freeMiB(g GPU, live []Tenant) int64 {
	free := int64(g.TotalMiB) - int64(g.OtherMiB)
	for _, t := range live {
		free -= int64(t.UsedMiB)
	}
	return free
}

// victimOrder sorts the tenants the rule kills first to the front: the
// most above its request, then the newest, then by key.
func victimOrder(a, b Tenant) int {
	if c := cmp.Compare(b.Above(), a.Above()); c != 0 {
		return c
	}
	if c := b.Since.Compare(a.Since); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}
