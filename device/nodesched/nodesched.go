// Package nodesched is the node-level scheduler: where on the node a share
// tenant physically runs, and when it must move. Nomad places a share
// tenant on the GPU its instances name (its home); a burstable tenant
// (limit above request) whose home already has other tenants may instead
// run as a guest on an idle GPU that the node publishes whole, so that it
// can burst, while Nomad still counts its request on its home and sees
// the idle GPU as free. When that GPU is bound whole, or is withdrawn from
// the whole family (a switch, a failure), its guest must move back. It is
// pure: it decides, the plugin acts (docs/design.md, "Dynamic fractions
// and the node-level scheduler").
package nodesched

import (
	"cmp"
	"slices"
)

// GPU is one GPU of the node as the plugin sees it now.
type GPU struct {
	UUID  string
	Order int
	// Model and MemoryMiB: a guest only goes to a GPU like its home, so
	// that its request and limit in MiB hold there.
	Model     string
	MemoryMiB uint64
	// OfferedWhole: healthy and published in the whole family (a new
	// guest may come).
	OfferedWhole bool
	// Leaving: unhealthy, or being taken out of the whole family by the
	// partition (a guest must go). A GPU not published yet (after a
	// plugin start) is neither offered nor leaving.
	Leaving bool
	// BoundWhole: an allocation holds it whole, or a whole binding of it
	// was granted since Nomad was last read.
	BoundWhole bool
	// Tenants physically on it: share tenants at home, guests, whole
	// holders.
	Tenants int
}

// Ask is a share tenant being bound.
type Ask struct {
	Home string
	// Burstable: its limit is above its request.
	Burstable bool
}

// Placement says where a tenant runs and why.
type Placement struct {
	GPU   string
	Guest bool
	Why   string
}

// Place chooses where a share tenant runs: at home unless it is burstable,
// its home has other tenants, and an idle GPU like its home is published
// whole (then the lowest-ordered such GPU, as a guest: the partition
// switches idle GPUs to the share family from the highest-ordered end).
func Place(a Ask, gpus []GPU) Placement {
	var home *GPU
	for i := range gpus {
		if gpus[i].UUID == a.Home {
			home = &gpus[i]
		}
	}
	switch {
	case !a.Burstable:
		return Placement{GPU: a.Home, Why: "not burstable (no limit above its request)"}
	case home == nil:
		return Placement{GPU: a.Home, Why: "home GPU unknown"}
	case home.Tenants == 0:
		return Placement{GPU: a.Home, Why: "alone on its home GPU"}
	}
	var best *GPU
	for i := range gpus {
		g := &gpus[i]
		if g.UUID == a.Home || !hostable(*g, *home) {
			continue
		}
		if best == nil || g.Order < best.Order || g.Order == best.Order && g.UUID < best.UUID {
			best = g
		}
	}
	if best == nil {
		return Placement{GPU: a.Home, Why: "no idle whole GPU like its home to burst on"}
	}
	return Placement{GPU: best.UUID, Guest: true, Why: "home GPU has other tenants; guest on an idle whole GPU"}
}

// hostable: g may take a guest whose home is home.
func hostable(g, home GPU) bool {
	return g.OfferedWhole && !g.BoundWhole && g.Tenants == 0 && g.Model == home.Model && g.MemoryMiB == home.MemoryMiB
}

// Guest is a tenant running away from its home.
type Guest struct {
	Key        string
	Home, Host string
}

// Move is a guest that must go back, and why.
type Move struct {
	Guest
	Why string
}

// Moves lists the guests that must move: their host is bound whole, is
// leaving the whole family (being switched to the share family,
// unhealthy) or is gone. Sorted by host order, then key.
func Moves(guests []Guest, gpus []GPU) []Move {
	byUUID := make(map[string]GPU, len(gpus))
	for _, g := range gpus {
		byUUID[g.UUID] = g
	}
	var out []Move
	for _, gu := range guests {
		h, ok := byUUID[gu.Host]
		switch {
		case !ok:
			out = append(out, Move{gu, "host GPU no longer known"})
		case h.BoundWhole:
			out = append(out, Move{gu, "host GPU bound whole by Nomad"})
		case h.Leaving:
			out = append(out, Move{gu, "host GPU leaving the whole family (switched to shares, or unhealthy)"})
		}
	}
	slices.SortFunc(out, func(a, b Move) int {
		if c := cmp.Compare(byUUID[a.Host].Order, byUUID[b.Host].Order); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return out
}
