package device

import (
	"sync"
	"sync/atomic"

	"github.com/gpushare/nomad-gpushare/vocab"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// publication is what the plugin offers Nomad: the device groups that the
// Fingerprint streams send, with their signature and the streams waiting
// for a change, and the view Reserve checks bindings against. The loop
// sets it; mu guards the groups and subscribers, the view is swapped
// atomically so that Reserve takes no lock for it.
type publication struct {
	view atomic.Pointer[reserveView]

	mu     sync.Mutex
	groups []*dev.DeviceGroup
	sig    string
	// published is set by the first set after a reset: a new stream then
	// gets the groups at once.
	published bool
	subs      map[chan struct{}]struct{}
}

// reset forgets the groups (a new configuration); the streams stay
// subscribed and the Reserve view stays until the next set.
func (p *publication) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.groups, p.sig, p.published = nil, "(nothing published)", false
	if p.subs == nil {
		p.subs = map[chan struct{}]struct{}{}
	}
}

// set publishes groups and the Reserve view, and wakes the subscribers
// when the groups changed (by signature).
func (p *publication) set(groups []*dev.DeviceGroup, view *reserveView) {
	p.view.Store(view)
	sig := signature(groups)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published = true
	if sig == p.sig {
		return
	}
	p.groups, p.sig = groups, sig
	for n := range p.subs {
		select {
		case n <- struct{}{}:
		default:
		}
	}
}

// current returns the groups last published.
func (p *publication) current() []*dev.DeviceGroup {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.groups
}

// subscribe returns a channel that receives a token whenever the groups
// change (one token may stand for several changes), primed when groups are
// published already, and the function that unsubscribes it.
func (p *publication) subscribe() (<-chan struct{}, func()) {
	n := make(chan struct{}, 1)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.subs[n] = struct{}{}
	if p.published {
		n <- struct{}{}
	}
	return n, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.subs, n)
	}
}

// offeredWhole lists the GPUs with a healthy instance in the whole family.
func offeredWhole(groups []*dev.DeviceGroup) map[string]bool {
	out := map[string]bool{}
	for _, g := range groups {
		if g.Vendor != vocab.Vendor || g.Type != vocab.TypeWhole {
			continue
		}
		for _, d := range g.Devices {
			if d.Healthy {
				out[d.ID] = true
			}
		}
	}
	return out
}
