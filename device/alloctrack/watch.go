package alloctrack

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/backoff"
	"github.com/hashicorp/nomad/api"
)

// MaxWait is the longest a Nomad server holds a blocking query
// (MaxBlockingRPCQueryTime); it adds up to 1/16 of the wait as jitter.
const MaxWait = 5 * time.Minute

// WatchOptions tune Watch.
type WatchOptions struct {
	// Wait is how long each blocking query waits for a change (default and
	// at most MaxWait): an idle node sends one request per Wait and watch.
	Wait time.Duration
	// MinInterval spaces the requests of each watch: the first change
	// after a quiet period is reported at once, the next ones at most once
	// per MinInterval (a busy cluster changes its evaluations many times a
	// second). Default 1s.
	MinInterval time.Duration
}

func (o WatchOptions) withDefaults() WatchOptions {
	if o.Wait <= 0 || o.Wait > MaxWait {
		o.Wait = MaxWait
	}
	if o.MinInterval <= 0 {
		o.MinInterval = time.Second
	}
	return o
}

// Watch follows the node, its allocations and (Config.Demand) the blocked
// evaluations with Nomad's blocking queries until ctx ends: each request
// names the index of the last answer and returns when the servers' index
// moves past it, or after o.Wait. Read answers from what they returned
// while all of them keep answering (and the allocation list was complete).
// Answers are stale reads, checked like Read's:
// one below an index already accepted is refused and the node read again
// from the leader. A request that fails, or hangs past its wait and
// Config.Timeout, stops Read from answering from the watches until one
// succeeds again.
func (t *Tracker) Watch(ctx context.Context, o WatchOptions) {
	o = o.withDefaults()
	var wg sync.WaitGroup
	run := func(name string, step func(ctx context.Context, nodeID string, blocking bool, o WatchOptions) error, down func(*view)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.follow(ctx, name, o, step, down)
		}()
	}
	run("node", t.watchNode, func(v *view) { v.nodeLive = false })
	run("allocations", t.watchAllocs, func(v *view) { v.allocsLive = false })
	if t.cfg.Demand {
		run("blocked evaluations", t.watchEvals, func(v *view) { v.evalsLive = false })
	}
	if t.publishedOn() {
		run("demand heartbeat", t.watchLeader, func(v *view) { v.pub.leaderLive = false })
		run("node demand", t.watchPublishedNode, func(v *view) { v.pub.nodeLive = false })
	}
	wg.Wait()
	t.setLive(func(v *view) {
		v.nodeLive, v.allocsLive, v.evalsLive = false, false, false
		v.pub.leaderLive, v.pub.nodeLive = false, false
	})
}

// follow runs one watch: step sends one query, a blocking one from the
// index of the last answer accepted if blocking, and takes its answer;
// down marks the watch as not answering. Requests are at least
// o.MinInterval apart; after a failure the next waits longer, up to a
// minute, with jitter.
func (t *Tracker) follow(ctx context.Context, name string, o WatchOptions, step func(ctx context.Context, nodeID string, blocking bool, o WatchOptions) error, down func(*view)) {
	retry := backoff.Backoff{Min: o.MinInterval, Max: time.Minute, Jitter: true}
	// The first request of a watch, and the first after a failure, does
	// not block: it answers at once, and Read can rely on the watch again
	// from then on.
	blocking := false
	for {
		nodeID, err := t.NodeID(ctx)
		sent := t.now()
		if err == nil {
			err = step(ctx, nodeID, blocking, o)
		}
		if ctx.Err() != nil {
			return
		}
		wait := o.MinInterval - t.now().Sub(sent)
		if err != nil {
			t.setLive(down)
			t.debug("blocking query failed; Read reads the node itself until it answers", "watch", name, "error", err)
			wait, blocking = retry.Next(), false
		} else {
			blocking = true
			retry.Reset()
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// blockingQuery returns options for a blocking query from index: a stale
// read bounded by its wait, the servers' jitter and Config.Timeout.
func (t *Tracker) blockingQuery(ctx context.Context, index uint64, o WatchOptions) (*api.QueryOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, o.Wait+o.Wait/16+t.cfg.Timeout)
	return (&api.QueryOptions{AllowStale: true, WaitIndex: index, WaitTime: o.Wait}).WithContext(ctx), cancel
}

// watchNode waits for the servers' view of the node to change.
func (t *Tracker) watchNode(ctx context.Context, nodeID string, blocking bool, o WatchOptions) error {
	t.mu.Lock()
	index := uint64(0)
	if blocking {
		index = t.view.seen.node
	}
	t.mu.Unlock()
	sent := t.now()
	q, cancel := t.blockingQuery(ctx, index, o)
	defer cancel()
	node, meta, err := t.client.Nodes().Info(nodeID, q)
	if err != nil {
		return fmt.Errorf("read node %s at %s: %w", nodeID, t.client.Address(), err)
	}
	t.debug("blocking query answered", "watch", "node", "wait_index", index, "index", meta.LastIndex)
	t.mu.Lock()
	v := &t.view
	switch {
	case meta.LastIndex < v.seen.node:
		t.mu.Unlock()
		return t.fromLeader(ctx, nodeID)
	case v.seen.node == 0:
		// Nothing accepted yet to compare with (see Read): the
		// leader's answer starts the watch.
		t.mu.Unlock()
		return t.startFromLeader(ctx, nodeID, func(v *view) { v.nodeLive = true })
	case meta.LastIndex == v.seen.node && v.node != nil:
		v.nodeAt, v.nodeLive = later(v.nodeAt, sent), true
		t.mu.Unlock()
		return nil
	}
	v.node, v.seen.node, v.nodeAt, v.nodeLive = node, meta.LastIndex, sent, true
	t.mu.Unlock()
	select {
	case t.nodeChanged <- struct{}{}:
	default:
	}
	return nil
}

// watchAllocs waits for the node's allocation list to change; a changed
// list is checked like Read's (combine).
func (t *Tracker) watchAllocs(ctx context.Context, nodeID string, blocking bool, o WatchOptions) error {
	t.mu.Lock()
	index := uint64(0)
	if blocking {
		index = t.view.seen.allocs
	}
	t.mu.Unlock()
	sent := t.now()
	before := t.lastVerdict(ctx)
	if !before.Complete {
		// Nomad keeps the token's rights of now for the whole wait:
		// Read reads the node itself until a query sent with a
		// complete token answers.
		t.setLive(func(v *view) { v.allocsLive = false })
	}
	q, cancel := t.blockingQuery(ctx, index, o)
	defer cancel()
	allocs, meta, err := t.client.Nodes().Allocations(nodeID, q)
	if err != nil {
		return fmt.Errorf("list allocations of node %s at %s: %w", nodeID, t.client.Address(), err)
	}
	t.debug("blocking query answered", "watch", "allocations", "wait_index", index, "index", meta.LastIndex, "allocations", len(allocs))
	t.mu.Lock()
	v := &t.view
	switch {
	case meta.LastIndex < v.seen.allocs:
		t.mu.Unlock()
		return t.fromLeader(ctx, nodeID)
	case v.seen.allocs == 0:
		t.mu.Unlock()
		return t.startFromLeader(ctx, nodeID, func(v *view) { v.allocsLive = true })
	case meta.LastIndex == v.seen.allocs && v.allocs != nil:
		v.allocsAt, v.allocsLive = later(v.allocsAt, sent), true
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()
	hidden := combine(before, t.checkVerdict(ctx))
	t.mu.Lock()
	if meta.LastIndex >= v.seen.allocs { // else Read took a newer answer meanwhile
		v.allocs, v.seen.allocs, v.allocsAt, v.hidden = allocs, meta.LastIndex, sent, hidden
		v.allocsChanged = sent
		v.notePlaced(allocs, sent)
		if v.allocs == nil {
			v.allocs = []*api.Allocation{}
		}
	}
	v.allocsLive = true
	t.mu.Unlock()
	return nil
}

// fromLeader takes the node and its allocations from the leader when a
// blocking query answered below an index already accepted.
func (t *Tracker) fromLeader(ctx context.Context, nodeID string) error {
	t.debug("stale answer of a blocking query refused; reading from the leader")
	_, _, err := t.readActive(ctx, nodeID, true)
	return err
}

// startFromLeader takes the node and its allocations from the leader for
// a watch's first answer, and marks the watch live (live) once the
// leader answered.
func (t *Tracker) startFromLeader(ctx context.Context, nodeID string, live func(*view)) error {
	if err := t.fromLeader(ctx, nodeID); err != nil {
		return err
	}
	t.setLive(live)
	return nil
}

// watchEvals waits for the evaluations to change and keeps the blocked
// ones that failed for devices.
// While the quota service's published demand is fresh it sends nothing
// (Read does not use the evaluations then); the first query after it
// goes stale does not block.
func (t *Tracker) watchEvals(ctx context.Context, _ string, blocking bool, o WatchOptions) error {
	if t.Published().Fresh {
		t.setLive(func(v *view) { v.evalsLive = false })
		return nil
	}
	t.mu.Lock()
	index := t.view.evalsIndex
	if !blocking {
		index = 0
	} else if t.view.evalsLive {
		// A cluster without evaluations answers index 0, which would
		// make the next query return at once.
		index = max(index, 1)
	}
	t.mu.Unlock()
	sent := t.now()
	q, cancel := t.blockingQuery(ctx, index, o)
	defer cancel()
	evals, meta, err := t.listBlocked(ctx, q)
	if err != nil {
		return err
	}
	t.keepEvals(evals, meta.LastIndex, sent)
	t.setLive(func(v *view) { v.evalsLive = true })
	return nil
}

func (t *Tracker) setLive(f func(*view)) {
	t.mu.Lock()
	f(&t.view)
	t.mu.Unlock()
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
