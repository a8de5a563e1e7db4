package alloctrack

import (
	"context"
	"fmt"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	"github.com/hashicorp/nomad/api"
)

// The published demand (docs/design.md, Partition protocol, "Published
// demand"): the quota service's leader writes, for each node, the whole and
// share requests its plan places there, and a heartbeat. While the
// heartbeat is fresh, Read takes this node's demand from it instead of
// listing the blocked evaluations, and the evaluation watch sends nothing.
// It is never trusted for safety: it only chooses which family idle GPUs
// are switched to, and the partition protocol and Reserve keep a GPU out
// of both families whatever it says.

// PublishedConfig says where the quota service publishes the demand.
type PublishedConfig struct {
	// Prefix of the variables (vocab/nodedemand); empty: do not read
	// them (the plugin lists the blocked evaluations itself).
	Prefix string
	// Namespace of the variables (default nodedemand.DefaultNamespace).
	Namespace string
	// Grace: after this node's allocation list changed, published demand
	// older than the change only holds GPUs (it may count an instance
	// already placed) for at most Grace, unless the service writes it
	// anew (default DefaultPublishedGrace).
	Grace time.Duration
}

// DefaultPublishedGrace is PublishedConfig.Grace's default: the service's
// cycle after an allocation event (coalescing, follow-ups) is well within.
const DefaultPublishedGrace = 5 * time.Second

// published is the view of the published demand; guarded by Tracker.mu.
type published struct {
	// leaderLive / nodeLive: the blocking query of the heartbeat / of
	// this node's variable answered last time.
	leaderLive, nodeLive bool
	// leader is the last heartbeat (leaderErr: why it is nonsense or
	// absent); leaderIndex its modify index, leaderSeen when a heartbeat
	// with a new index was last taken (the plugin's clock).
	leader      nodedemand.Leader
	leaderErr   error
	leaderIndex uint64
	leaderSeen  time.Time
	// node is this node's demand (nil: no variable); nodeErr why it is
	// nonsense; nodeIndex the index of the answer that gave it.
	node      *nodedemand.Node
	nodeErr   error
	nodeIndex uint64
}

// PublishedState says whether Read takes the demand from the service,
// and why not.
type PublishedState struct {
	// Fresh: the heartbeat is fresh and this node's value readable.
	Fresh bool
	// Why says why not (for logs and the status).
	Why string
}

// publishedOn reports whether the published demand is to be read at all.
func (t *Tracker) publishedOn() bool { return t.cfg.Demand && t.cfg.Published.Prefix != "" }

// publishedDemand is this node's demand as published, when it is fresh:
// the heartbeat changed within nodedemand.StaleBeats of its period, its
// epoch is the node value's (else the node has no demand from this
// leader), and the value reads. placedIndex is the newest placement on
// the node (the highest create index of its allocations) and placedAt when
// the plugin saw it: a non-empty value written before that placement may
// still count it, so it is dropped (only held, see partition's DemandHold)
// for Grace after placedAt. Updates of allocations already placed (their
// client status) do not count: they change no demand.
func (t *Tracker) publishedDemand(now time.Time, placedIndex uint64, placedAt time.Time) ([]Demand, PublishedState) {
	if !t.publishedOn() {
		return nil, PublishedState{Why: "not configured"}
	}
	t.mu.Lock()
	p := t.view.pub
	t.mu.Unlock()
	switch {
	case !p.leaderLive || !p.nodeLive:
		return nil, PublishedState{Why: "its variables cannot be read (yet)"}
	case p.leaderErr != nil:
		return nil, PublishedState{Why: p.leaderErr.Error()}
	case now.Sub(p.leaderSeen) > nodedemand.StaleBeats*p.leader.Beat:
		return nil, PublishedState{Why: fmt.Sprintf("no heartbeat for %s (beat %s)", now.Sub(p.leaderSeen).Round(time.Second), p.leader.Beat)}
	case p.nodeErr != nil:
		return nil, PublishedState{Why: p.nodeErr.Error()}
	}
	fresh := PublishedState{Fresh: true}
	if p.node == nil || p.node.Epoch != p.leader.Epoch || p.node.Empty() {
		return nil, fresh
	}
	if p.nodeIndex < placedIndex && now.Sub(placedAt) < t.publishedGrace() {
		return nil, fresh
	}
	out := make([]Demand, 0, len(p.node.Requests))
	for i, r := range p.node.Requests {
		out = append(out, Demand{Key: fmt.Sprintf("service/%s/%05d", p.node.Epoch, i), Whole: r.Whole, Shares: r.Shares})
	}
	return out, fresh
}

func (t *Tracker) publishedGrace() time.Duration {
	if g := t.cfg.Published.Grace; g > 0 {
		return g
	}
	return DefaultPublishedGrace
}

func (t *Tracker) publishedNamespace() string {
	if ns := t.cfg.Published.Namespace; ns != "" {
		return ns
	}
	return nodedemand.DefaultNamespace
}

// Published says whether the published demand is fresh now.
func (t *Tracker) Published() PublishedState {
	t.mu.Lock()
	idx, at := t.view.placedIndex, t.view.placedAt
	t.mu.Unlock()
	_, st := t.publishedDemand(t.now(), idx, at)
	return st
}

// notePlaced keeps the newest placement of allocs seen at (see
// publishedDemand); t.mu must be held.
func (v *view) notePlaced(allocs []*api.Allocation, at time.Time) {
	for _, a := range allocs {
		if a != nil && a.CreateIndex > v.placedIndex {
			v.placedIndex, v.placedAt = a.CreateIndex, at
		}
	}
}

// peekVar reads a variable of the published demand, a blocking query from
// index when blocking; nil when absent.
func (t *Tracker) peekVar(ctx context.Context, path string, index uint64, blocking bool, o WatchOptions) (*api.Variable, uint64, error) {
	if !blocking {
		index = 0
	}
	q, cancel := t.blockingQuery(ctx, max(index, 1), o)
	defer cancel()
	if !blocking {
		q.WaitIndex, q.WaitTime = 0, 0
	}
	q.Namespace = t.publishedNamespace()
	v, meta, err := t.client.Variables().Peek(path, q)
	if err != nil {
		return nil, 0, fmt.Errorf("read the published demand %s at %s (the plugin's token needs variables read there): %w", path, t.client.Address(), err)
	}
	return v, meta.LastIndex, nil
}

// watchLeader follows the heartbeat of the published demand.
func (t *Tracker) watchLeader(ctx context.Context, _ string, blocking bool, o WatchOptions) error {
	t.mu.Lock()
	index := t.view.pub.leaderIndex
	t.mu.Unlock()
	v, idx, err := t.peekVar(ctx, nodedemand.LeaderPath(t.cfg.Published.Prefix), index, blocking, o)
	if err != nil {
		return err
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &t.view.pub
	p.leaderLive = true
	if v == nil {
		p.leader, p.leaderErr, p.leaderIndex = nodedemand.Leader{}, fmt.Errorf("no heartbeat at %s: the quota service does not publish", nodedemand.LeaderPath(t.cfg.Published.Prefix)), idx
		return nil
	}
	if v.ModifyIndex == p.leaderIndex && p.leaderErr == nil {
		return nil // unchanged: the heartbeat's age goes on
	}
	p.leaderIndex = v.ModifyIndex
	p.leader, p.leaderErr = nodedemand.DecodeLeader(v.Items)
	if p.leaderErr == nil {
		p.leaderSeen = now
	}
	return nil
}

// watchPublishedNode follows this node's variable of the published demand.
func (t *Tracker) watchPublishedNode(ctx context.Context, nodeID string, blocking bool, o WatchOptions) error {
	t.mu.Lock()
	index := t.view.pub.nodeIndex
	t.mu.Unlock()
	v, idx, err := t.peekVar(ctx, nodedemand.NodePath(t.cfg.Published.Prefix, nodeID), index, blocking, o)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &t.view.pub
	p.nodeLive = true
	if v == nil {
		p.node, p.nodeErr, p.nodeIndex = nil, nil, idx
		return nil
	}
	n, err := nodedemand.DecodeNode(v.Items)
	p.nodeIndex = v.ModifyIndex
	if err != nil {
		p.node, p.nodeErr = nil, fmt.Errorf("published demand of this node: %w", err)
		return nil
	}
	p.node, p.nodeErr = &n, nil
	return nil
}
