package nomadwatch

import (
	"context"
	"fmt"

	nomadapi "github.com/hashicorp/nomad/api"
)

// listing is one full reading of some kinds of objects, each kind at the
// index Nomad answered it at.
type listing struct {
	kinds  [numKinds]bool
	index  [numKinds]uint64
	nodes  map[string]nodeEntry
	allocs map[string]allocEntry
	jobs   map[string]*nomadapi.JobListStub
}

// allKinds lists everything.
var allKinds = [numKinds]bool{true, true, true}

// Change counts what adopting a listing changed in the cache, by kind.
type Change struct {
	Kind                    string
	Added, Removed, Changed int
}

// consistent is a query that Nomad's leader answers: listings, on which
// the cache's deletions rest, are never stale.
func consistent(ctx context.Context, params map[string]string) *nomadapi.QueryOptions {
	return (&nomadapi.QueryOptions{Namespace: "*", Params: params, AllowStale: false}).WithContext(ctx)
}

// list reads the given kinds in full: node stubs, then the full node of
// every node whose modify index moved since cached (the others' are
// reused), allocations desired to run with their resources and without
// task states (listAllocs), jobs with their meta and summaries.
func (b *Builder) list(ctx context.Context, kinds [numKinds]bool, cached map[string]nodeEntry) (*listing, error) {
	l := &listing{kinds: kinds}
	if kinds[kindNode] {
		stubs, meta, err := b.nomad.Nodes().List(consistent(ctx, nil))
		if err != nil {
			return nil, fmt.Errorf("listing Nomad nodes: %w", err)
		}
		l.index[kindNode] = meta.LastIndex
		if l.nodes, err = b.fullNodes(ctx, stubs, cached); err != nil {
			return nil, err
		}
	}
	if kinds[kindAlloc] {
		var err error
		if l.allocs, l.index[kindAlloc], err = b.listAllocs(ctx); err != nil {
			return nil, err
		}
	}
	if kinds[kindJob] {
		// Meta only comes with meta=true: the non-preemptible flag and
		// the projects' job_meta_key mapping read it.
		jobs, meta, err := b.nomad.Jobs().ListOptions(&nomadapi.JobListOptions{Fields: &nomadapi.JobListFields{Meta: true}}, consistent(ctx, nil))
		if err != nil {
			return nil, fmt.Errorf("listing Nomad jobs: %w", err)
		}
		l.index[kindJob] = meta.LastIndex
		l.jobs = make(map[string]*nomadapi.JobListStub, len(jobs))
		for _, j := range jobs {
			l.jobs[Key(j.Namespace, j.ID)] = j
		}
	}
	return l, nil
}

// fullNodes returns the full node of every listed node, reading a node
// only when its modify index moved since it was cached. Reads may be
// stale: one older than the listing is read again from the leader.
func (b *Builder) fullNodes(ctx context.Context, stubs []*nomadapi.NodeListStub, cached map[string]nodeEntry) (map[string]nodeEntry, error) {
	out := make(map[string]nodeEntry, len(stubs))
	var moved []*nomadapi.NodeListStub
	for _, n := range stubs {
		if c, ok := cached[n.ID]; ok && c.full.ModifyIndex >= n.ModifyIndex {
			out[n.ID] = c
		} else {
			moved = append(moved, n)
		}
	}
	err := readEach(moved, out, func(n *nomadapi.NodeListStub) (string, nodeEntry, error) {
		full, err := b.readNode(ctx, n.ID, n.ModifyIndex)
		if err != nil {
			return "", nodeEntry{}, err
		}
		return n.ID, newNodeEntry(full), nil
	})
	return out, err
}

// allocPage is how many allocations one page of the allocation listing
// holds: Nomad's client decodes a response whole, and one response of
// 100,000 allocations with their resources is about 320 MiB of JSON.
const allocPage = 2000

// listAllocs reads the allocations desired to run, with their resources
// and without task states, a page at a time. Each page is answered at its
// own index; the listing's index is the oldest of them, so that it claims
// no more than every page saw (adopt takes an allocation missing from the
// listing and not newer than it as gone, and one changed since as the
// events').
func (b *Builder) listAllocs(ctx context.Context) (map[string]allocEntry, uint64, error) {
	out := map[string]allocEntry{}
	var at uint64
	next := ""
	for page := 1; ; page++ {
		q := consistent(ctx, map[string]string{"resources": "true", "task_states": "false"})
		q.Filter = `DesiredStatus == "run"`
		q.PerPage, q.NextToken = allocPage, next
		allocs, meta, err := b.nomad.Allocations().List(q)
		if err != nil {
			return nil, 0, fmt.Errorf("listing Nomad allocations (page %d): %w", page, err)
		}
		if page == 1 || meta.LastIndex < at {
			at = meta.LastIndex
		}
		for _, a := range allocs {
			e := newAllocEntry(a, a.AllocatedResources)
			e.versionKnown = true
			out[a.ID] = e
		}
		if meta.NextToken == "" {
			return out, at, nil
		}
		if meta.NextToken == next {
			return nil, 0, fmt.Errorf("listing Nomad allocations: page %d gave back its own next token %q", page, next)
		}
		next = meta.NextToken
	}
}

// readNode reads a node at least as new as index: stale first, from the
// leader when the stale answer is older.
func (b *Builder) readNode(ctx context.Context, id string, index uint64) (*nomadapi.Node, error) {
	for _, stale := range []bool{true, false} {
		full, err := b.getNode(ctx, id, stale)
		if err != nil {
			return nil, fmt.Errorf("reading Nomad node %s: %w", id, err)
		}
		if full.ModifyIndex >= index {
			return full, nil
		}
	}
	return nil, fmt.Errorf("reading Nomad node %s: the leader answered index older than %d", id, index)
}

// adopt replaces the kinds the listing read with what it read, keeping
// what events brought since (newer objects, deletions after the listing),
// and returns what changed. Objects whose modify index is newer than the
// listing in the cache are the events'; an object missing from a listing
// and older than it is gone.
func (c *cache) adopt(l *listing) []Change {
	c.allTouched = true
	var out []Change
	if l.kinds[kindNode] {
		var ch Change
		c.nodes, ch = merge(c.nodes, l.nodes, c.deleted[kindNode], l.index[kindNode],
			func(e nodeEntry) uint64 { return e.full.ModifyIndex }, nodeEntry.fingerprint)
		out = append(out, withKind(ch, kindNode))
	}
	if l.kinds[kindAlloc] {
		var ch Change
		c.allocs, ch = merge(c.allocs, l.allocs, c.deleted[kindAlloc], l.index[kindAlloc],
			func(e allocEntry) uint64 { return e.stub.ModifyIndex }, allocEntry.fingerprint)
		c.reorder()
		out = append(out, withKind(ch, kindAlloc))
	}
	if l.kinds[kindJob] {
		var ch Change
		c.jobs, ch = merge(c.jobs, l.jobs, c.deleted[kindJob], l.index[kindJob],
			func(s *nomadapi.JobListStub) uint64 { return s.ModifyIndex }, jobFingerprint)
		out = append(out, withKind(ch, kindJob))
		// The listing's summaries are fresh.
		for key := range c.dirtySummary {
			if j := c.jobs[key]; j == nil || j.ModifyIndex <= l.index[kindJob] {
				delete(c.dirtySummary, key)
			}
		}
	}
	for k := range numKinds {
		if l.kinds[k] {
			c.listedAt[k] = l.index[k]
			c.index[k] = max(c.index[k], l.index[k])
			c.deleted[k] = map[string]uint64{}
		}
	}
	return out
}

func withKind(ch Change, k kind) Change {
	ch.Kind = k.String()
	return ch
}

// merge is adopt for one kind.
func merge[E any](cur, listed map[string]E, deleted map[string]uint64, at uint64, index func(E) uint64, fp func(E) string) (map[string]E, Change) {
	var ch Change
	out := make(map[string]E, len(listed))
	for key, le := range listed {
		ce, had := cur[key]
		switch {
		case had && index(ce) > at:
			out[key] = ce // an event newer than the listing
			continue
		case deleted[key] > at:
			continue // deleted after the listing
		case !had:
			ch.Added++
		case fp(ce) != fp(le):
			ch.Changed++
		}
		out[key] = le
	}
	for key, ce := range cur {
		if _, ok := listed[key]; ok {
			continue
		}
		if index(ce) > at {
			out[key] = ce // created after the listing
		} else {
			ch.Removed++
		}
	}
	return out, ch
}
