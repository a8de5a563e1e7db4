package device

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/device/alloctrack"
	"github.com/gpushare/nomad-gpushare/device/partition"
)

// holdings is what the Nomad API last said the node's allocations hold, and
// the reservations Reserve granted since: Nomad tells a device plugin
// nothing when a reservation ends, so the loop reads it back from the API,
// and two Reserve calls between two reads must still not give one GPU both
// whole and shared. It is kept across a reconfiguration (the first read of
// the new one replaces it), so a reservation granted just before still
// counts; but Reserve decides nothing until the new configuration's first
// read (awaitRead). mu guards every field.
type holdings struct {
	mu sync.Mutex
	// gpus is the last successful read, by GPU UUID. Each read replaces
	// the map and nothing modifies it afterwards, so holders of a copy of
	// the reference read it without the lock.
	gpus map[string]*alloctrack.GPUHolding
	// hidden says why the last read may have left allocations out (see
	// alloctrack.Snapshot.Hidden); "" when it was complete.
	hidden string
	// pending are the reservations granted since the last consistent read
	// that began after them.
	pending map[string]*pendingHold
	// read is closed by the first successful read since reset; readErr is
	// the last failed read's error until then.
	read    chan struct{}
	readErr error
}

// pendingHold records how a GPU was reserved since the last Nomad read.
type pendingHold struct {
	whole, share bool
	at           time.Time
}

// reset makes Reserve wait for the next successful read (a new
// configuration); the last holdings and the pending reservations stay.
func (h *holdings) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.read, h.readErr = make(chan struct{}), nil
}

// hasPending reports whether reservations wait for a read that accounts for
// them: the next read should then be consistent.
func (h *holdings) hasPending() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pending) > 0
}

// update takes a successful read: its holdings replace the last. A
// consistent read includes every allocation placed before it began, so the
// reservations made before then are forgotten; a stale one may lag, so they
// stay.
func (h *holdings) update(snap alloctrack.Snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gpus, h.hidden = snap.GPUs, snap.Hidden
	if snap.Consistent {
		for id, pu := range h.pending {
			if pu.at.Before(snap.Started) {
				delete(h.pending, id)
			}
		}
	}
	h.readErr = nil
	select {
	case <-h.read:
	default:
		close(h.read)
	}
}

// failed records a failed read, for Reserve's error while it waits.
func (h *holdings) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.readErr = err
}

// errNoRead is returned by awaitRead when no read succeeded in time.
var errNoRead = errors.New("the plugin has not read this node's allocations from the Nomad API since it started, so it cannot tell which GPUs are held")

// awaitRead waits, at most timeout, for the first successful read since
// reset.
func (h *holdings) awaitRead(timeout time.Duration) error {
	h.mu.Lock()
	read := h.read
	h.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-read:
		return nil
	case <-t.C:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.readErr != nil {
		return fmt.Errorf("%w (waited %s; last attempt: %v)", errNoRead, timeout, h.readErr)
	}
	return fmt.Errorf("%w (waited %s; no read finished yet)", errNoRead, timeout)
}

// current returns the last read (nil before the first); see holdings.gpus.
func (h *holdings) current() map[string]*alloctrack.GPUHolding {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gpus
}

// claim records the reservation of binding b at now, or refuses it when it
// could give a GPU both whole and shared: when the allocations Nomad listed
// or the reservations since hold it the other way (conflict), or when the
// last read may have hidden allocations and the binding is not in the
// family the GPU is offered in now (hiddenRisk).
func (h *holdings) claim(b binding, v *reserveView, now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.conflict(b); err != nil {
		return err
	}
	if err := h.hiddenRisk(b, v); err != nil {
		return err
	}
	if b.shareGPU != "" {
		h.record(b.shareGPU, now).share = true
		return nil
	}
	for _, id := range b.whole {
		h.record(id, now).whole = true
	}
	return nil
}

// conflict refuses a binding that the allocations Nomad listed, or the
// reservations since, hold the other way.
func (h *holdings) conflict(b binding) error {
	if b.shareGPU != "" {
		if g := h.gpus[b.shareGPU]; g != nil && len(g.WholeAllocs) > 0 || h.pending[b.shareGPU] != nil && h.pending[b.shareGPU].whole {
			return fmt.Errorf("gpushare: refusing shares %s: GPU %s is held whole by another allocation", strings.Join(b.shares, ", "), b.shareGPU)
		}
		return nil
	}
	for _, id := range b.whole {
		held := 0
		if g := h.gpus[id]; g != nil {
			held = g.ShareUnits
		}
		if held > 0 || h.pending[id] != nil && h.pending[id].share {
			return fmt.Errorf("gpushare: refusing whole GPU %s: it has share tenants (%d shares held)", id, held)
		}
	}
	return nil
}

// hiddenRisk refuses, while allocations may be hidden from the plugin, a
// binding outside the family its GPU is offered in now. The plugin then
// switches nothing, so the GPU has stayed in that family and hidden
// allocations can only hold it that way; a placement in the other family
// (planned against an older publication) could share the GPU with one.
func (h *holdings) hiddenRisk(b binding, v *reserveView) error {
	if h.hidden == "" {
		return nil
	}
	want, gpus := partition.Whole, b.whole
	if b.shareGPU != "" {
		want, gpus = partition.Share, []string{b.shareGPU}
	}
	for _, id := range gpus {
		if v.gpus[id].family != want {
			return fmt.Errorf("gpushare: refusing %s of GPU %s: it is not offered as %s now, and allocations on this node may be hidden from the plugin: %s",
				map[partition.Mode]string{partition.Whole: "the whole GPU", partition.Share: "shares"}[want], id, want, h.hidden)
		}
	}
	return nil
}

// record returns the pending hold of a GPU, stamped now.
func (h *holdings) record(id string, now time.Time) *pendingHold {
	if h.pending == nil {
		h.pending = map[string]*pendingHold{}
	}
	pu := h.pending[id]
	if pu == nil {
		pu = &pendingHold{}
		h.pending[id] = pu
	}
	pu.at = now
	return pu
}

// wholeHeld reports whether a GPU is held whole: by an allocation the
// Nomad API listed, or by a whole binding Reserve granted since.
func (h *holdings) wholeHeld(uuid string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if g := h.gpus[uuid]; g != nil && len(g.WholeAllocs) > 0 {
		return true
	}
	return h.pending[uuid] != nil && h.pending[uuid].whole
}
