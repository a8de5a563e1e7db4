package nomadwatch

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// connected starts a stream connection: the cache must be listed in full
// before Build plans on it again.
func (b *Builder) connected(namespaces string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streaming, b.synced, b.applied, b.streamNS = true, false, 0, namespaces
	select {
	case <-b.reconnect:
	default:
	}
	b.gen++
}

// disconnected ends a stream connection.
func (b *Builder) disconnected() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streaming, b.synced = false, false
}

// applyBatch applies one batch of events and says whether any was news
// (cache.takeNews); an index that goes backwards or a payload that does
// not decode is a gap.
func (b *Builder) applyBatch(evs *nomadapi.Events) (news bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if evs.Index < b.applied {
		b.synced = false
		return false, fmt.Errorf("event index went backwards from %d to %d", b.applied, evs.Index)
	}
	b.applied = evs.Index
	for i := range evs.Events {
		if err := b.cache.apply(&evs.Events[i]); err != nil {
			b.synced = false
			return false, err
		}
	}
	return b.cache.takeNews(), nil
}

// refresh brings the cache up to Nomad as of now: a full listing without
// the stream, once per stream connection and every ResyncInterval;
// otherwise a check of Nomad's indexes against the events applied, and a
// full listing when the stream cannot account for them.
func (b *Builder) refresh(ctx context.Context, now time.Time) error {
	b.mu.Lock()
	streaming, synced, gen := b.streaming, b.synced, b.gen
	resync := now.Sub(b.lastFull) >= b.opts.ResyncInterval
	reason := "gap"
	switch {
	case !streaming:
		reason = "poll"
	case !b.everSynced:
		reason = "start"
	}
	b.mu.Unlock()
	switch {
	case !streaming || !synced:
		_, err := b.relist(ctx, reason, gen, false)
		return err
	case resync:
		_, err := b.relist(ctx, "resync", gen, true)
		return err
	}
	if err := b.checkNamespaces(ctx); err != nil {
		return err
	}
	target, err := b.tableIndexes(ctx)
	if err != nil {
		return err
	}
	if behind := b.catchUp(ctx, target); behind != "" {
		b.log.Debug("the event stream does not account for Nomad's index; listing in full", "behind", behind)
		_, err := b.relist(ctx, "index", gen, false)
		return err
	}
	return nil
}

// checkNamespaces asks Follow to subscribe again when Nomad has
// namespaces the stream's subscription does not cover, and lists in full
// meanwhile.
func (b *Builder) checkNamespaces(ctx context.Context) error {
	ns, err := b.namespaces(ctx)
	if err != nil {
		return err
	}
	b.mu.Lock()
	same, gen := ns == b.streamNS, b.gen
	if !same {
		b.synced = false
		select {
		case b.reconnect <- struct{}{}:
		default:
		}
	}
	b.mu.Unlock()
	if same {
		return nil
	}
	_, err = b.relist(ctx, "gap", gen, false)
	return err
}

// relist lists Nomad in full and adopts the listing into the cache; with
// count, it first lets the stream deliver what the listing saw, so that
// what adopting changes is what the stream missed.
func (b *Builder) relist(ctx context.Context, reason string, gen uint64, count bool) ([]Change, error) {
	b.mu.Lock()
	cached := maps.Clone(b.cache.nodes) // events change the cache meanwhile
	b.mu.Unlock()
	l, err := b.list(ctx, allKinds, cached)
	if err != nil {
		return nil, err
	}
	if count {
		target := l.index
		target[kindJob] = 0 // the job listing's index moves with summaries, which no event carries
		if b.catchUp(ctx, target) != "" {
			count = false // still in flight: differences would not be the stream's misses
		}
	}
	b.mu.Lock()
	changes := b.cache.adopt(l)
	if b.streaming && b.gen == gen {
		b.synced, b.everSynced, b.lastFull = true, true, time.Now()
	}
	b.mu.Unlock()
	if !count {
		changes = nil
	}
	if b.opts.OnRelist != nil {
		b.opts.OnRelist(reason, changes)
	}
	return changes, nil
}

// tableIndexes reads Nomad's current index of nodes, allocations and jobs
// (the jobs' moves with their summaries too) from the leader, one object
// each.
func (b *Builder) tableIndexes(ctx context.Context) ([numKinds]uint64, error) {
	var out [numKinds]uint64
	q := func() *nomadapi.QueryOptions {
		o := consistent(ctx, map[string]string{"task_states": "false"})
		o.PerPage = 1
		return o
	}
	_, meta, err := b.nomad.Nodes().List(q())
	if err != nil {
		return out, fmt.Errorf("reading Nomad's node index: %w", err)
	}
	out[kindNode] = meta.LastIndex
	if _, meta, err = b.nomad.Allocations().List(q()); err != nil {
		return out, fmt.Errorf("reading Nomad's allocation index: %w", err)
	}
	out[kindAlloc] = meta.LastIndex
	if _, meta, err = b.nomad.Jobs().List(q()); err != nil {
		return out, fmt.Errorf("reading Nomad's job index: %w", err)
	}
	out[kindJob] = meta.LastIndex
	return out, nil
}

// catchUp waits, at most CatchUp, until the cache is as new as target (by
// kind; jobs against the newest event of any topic, since a job summary
// moves with allocations and evaluations) and names what is still behind.
func (b *Builder) catchUp(ctx context.Context, target [numKinds]uint64) string {
	deadline := time.Now().Add(b.opts.CatchUp)
	for {
		b.mu.Lock()
		c := b.cache
		var behind []string
		for k := range numKinds {
			have := c.index[k]
			if k == kindJob {
				have = max(have, c.latest, c.index[kindNode], c.index[kindAlloc])
			}
			if have < target[k] {
				behind = append(behind, fmt.Sprintf("%s %d < %d", k, have, target[k]))
			}
		}
		b.mu.Unlock()
		if len(behind) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return strings.Join(behind, ", ")
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// inputs takes from the cache Assemble's inputs, after reading what the
// events leave out: the summaries of system jobs they touched, and the job
// version of finished allocations placed since the last listing. Nodes
// and allocations go by the Builder's segment memo: only the nodes the
// cache touched since the last View are read (every node after a
// listing, with a new memo: the full rebuild).
func (b *Builder) inputs(ctx context.Context) (Inputs, error) {
	if err := b.readSummaries(ctx); err != nil {
		return Inputs{}, err
	}
	if err := b.readVersions(ctx); err != nil {
		return Inputs{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var in Inputs
	in, b.memo = b.cache.viewInputs(b.memo)
	return in, nil
}

// untouch makes the next View derive every node again (a Build that took
// the touched nodes failed before its View kept them).
func (b *Builder) untouch() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cache.allTouched = true
}

// readSummaries reads the summary of every system or sysbatch job whose
// summary events may have moved (their queued instances are pending
// demand).
func (b *Builder) readSummaries(ctx context.Context) error {
	b.mu.Lock()
	var dirty []*nomadapi.JobListStub
	for key := range b.cache.dirtySummary {
		if j := b.cache.jobs[key]; j != nil && !j.Stop && j.Status != "dead" {
			dirty = append(dirty, j)
		} else {
			delete(b.cache.dirtySummary, key)
		}
	}
	b.mu.Unlock()
	for _, j := range dirty {
		sum, _, err := b.nomad.Jobs().Summary(j.ID, (&nomadapi.QueryOptions{Namespace: j.Namespace}).WithContext(ctx))
		if err != nil {
			return fmt.Errorf("reading the summary of Nomad job %s: %w", Key(j.Namespace, j.ID), err)
		}
		b.mu.Lock()
		key := Key(j.Namespace, j.ID)
		if cur := b.cache.jobs[key]; cur != nil {
			s := *cur
			s.JobSummary = sum
			b.cache.jobs[key] = &s
			delete(b.cache.dirtySummary, key)
		}
		b.mu.Unlock()
	}
	return nil
}

// versionBatch bounds the allocations one filtered listing asks for.
const versionBatch = 50

// readVersions reads the job version of the finished allocations whose
// version the events left out and that may keep their place (settled).
func (b *Builder) readVersions(ctx context.Context) error {
	b.mu.Lock()
	var ids []string
	for id := range b.cache.unversioned {
		a, ok := b.cache.allocs[id]
		if !ok || a.versionKnown {
			delete(b.cache.unversioned, id)
			continue
		}
		s := a.stub
		if (s.ClientStatus == "complete" || s.ClientStatus == "failed") && s.NextAllocation == "" && s.FollowupEvalID == "" {
			ids = append(ids, id)
		}
	}
	b.mu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), versionBatch)
		batch := ids[:n]
		ids = ids[n:]
		q := consistent(ctx, map[string]string{"task_states": "false"})
		q.Filter = `ID == "` + strings.Join(batch, `" or ID == "`) + `"`
		stubs, _, err := b.nomad.Allocations().List(q)
		if err != nil {
			return fmt.Errorf("reading the job version of %d Nomad allocations: %w", len(batch), err)
		}
		b.mu.Lock()
		for _, s := range stubs {
			// The version read is the allocation's if the cache's entry
			// is not newer than the read.
			if e, ok := b.cache.allocs[s.ID]; ok && !e.versionKnown && e.stub.ModifyIndex <= s.ModifyIndex {
				st := *e.stub
				st.JobVersion, st.JobType = s.JobVersion, s.JobType
				e.stub, e.versionKnown = &st, true
				b.cache.storeAlloc(e)
				b.cache.touched[st.NodeID] = true
			}
		}
		b.mu.Unlock()
	}
	return nil
}
