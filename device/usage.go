package device

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
)

// usage is what the Nomad API last said the node's allocations hold, and
// the reservations Reserve granted since: Nomad tells a device plugin
// nothing when a reservation ends, so the loop reads it back from the API,
// and two Reserve calls between two reads must still not give one GPU both
// whole and shared. It is kept across a reconfiguration (the first read of
// the new one replaces it), so a reservation granted just before still
// counts. mu guards every field.
type usage struct {
	mu sync.Mutex
	// gpus is the last successful read, by GPU UUID. Each read replaces
	// the map and nothing modifies it afterwards, so holders of a copy of
	// the reference read it without the lock.
	gpus map[string]*alloctrack.GPUUsage
	// pending are the reservations granted since the read that accounts
	// for them began.
	pending map[string]*pendingUse
}

// pendingUse records how a GPU was reserved since the last Nomad read.
type pendingUse struct {
	whole, share bool
	at           time.Time
}

// update takes a successful read that began at readStarted: its usage
// replaces the last, and the reservations made before it began, which it
// accounts for, are forgotten.
func (u *usage) update(gpus map[string]*alloctrack.GPUUsage, readStarted time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.gpus = gpus
	for id, pu := range u.pending {
		if pu.at.Before(readStarted) {
			delete(u.pending, id)
		}
	}
}

// current returns the last read (nil before the first); see usage.gpus.
func (u *usage) current() map[string]*alloctrack.GPUUsage {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.gpus
}

// claim records the reservation of binding b at now, or refuses it when a
// GPU would be held both whole and shared, by the allocations Nomad listed
// or by reservations since.
func (u *usage) claim(b binding, now time.Time) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if b.shareGPU != "" {
		if g := u.gpus[b.shareGPU]; g != nil && len(g.WholeAllocs) > 0 || u.pending[b.shareGPU] != nil && u.pending[b.shareGPU].whole {
			return fmt.Errorf("gpushare: refusing shares %s: GPU %s is held whole by another allocation", strings.Join(b.shares, ", "), b.shareGPU)
		}
		u.record(b.shareGPU, now).share = true
		return nil
	}
	for _, id := range b.whole {
		held := 0
		if g := u.gpus[id]; g != nil {
			held = g.ShareUnits
		}
		if held > 0 || u.pending[id] != nil && u.pending[id].share {
			return fmt.Errorf("gpushare: refusing whole GPU %s: it has share tenants (%d shares held)", id, held)
		}
	}
	for _, id := range b.whole {
		u.record(id, now).whole = true
	}
	return nil
}

// record returns the pending use of a GPU, stamped now.
func (u *usage) record(id string, now time.Time) *pendingUse {
	if u.pending == nil {
		u.pending = map[string]*pendingUse{}
	}
	pu := u.pending[id]
	if pu == nil {
		pu = &pendingUse{}
		u.pending[id] = pu
	}
	pu.at = now
	return pu
}
