package nodedemand

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	wire "github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// DefaultMaxCalls bounds the variable writes of one Publish: a new leader
// on a large cluster spreads its first writes over several cycles.
const DefaultMaxCalls = 256

// Publisher writes the demand per node and the leader's heartbeat as
// Nomad Variables. A node's variable is written only when its demand
// changed and deleted when the node has none left; the heartbeat every
// Beat. The leader calls Start when it begins to lead (a new epoch: values
// of earlier leaders stop counting), then Publish once per cycle and
// Heartbeat from its beat loop, and Stop when it no longer leads.
type Publisher struct {
	nomad *nomadapi.Client
	log   hclog.Logger
	// Prefix and Namespace place the variables (defaults
	// wire.DefaultPrefix, wire.DefaultNamespace); Beat is the heartbeat
	// period (default wire.DefaultBeat); MaxCalls bounds one Publish
	// (default DefaultMaxCalls).
	Prefix, Namespace string
	Beat              time.Duration
	MaxCalls          int
	instance          string

	mu    sync.Mutex
	epoch string
	seq   uint64
	// beatIndex is the modify index of this leader's last heartbeat.
	beatIndex uint64
	// known is each node's value as published; listed says known holds
	// every node variable under the prefix (read once per epoch);
	// written is the modify index of each node variable this epoch
	// wrote, as Nomad returned it (see Verify).
	known   map[string]wire.Node
	listed  bool
	written map[string]uint64
}

// NewPublisher returns a publisher for the instance named instance.
func NewPublisher(client *nomadapi.Client, instance string, log hclog.Logger) *Publisher {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Publisher{nomad: client, log: log, instance: instance, Prefix: wire.DefaultPrefix,
		Namespace: wire.DefaultNamespace, Beat: wire.DefaultBeat, MaxCalls: DefaultMaxCalls, known: map[string]wire.Node{},
		written: map[string]uint64{}}
}

// Report is what one Publish did.
type Report struct {
	// Written and Deleted are the nodes whose variable was written or
	// deleted; Deferred those MaxCalls left for the next Publish.
	Written, Deleted, Deferred []string
	Errors                     []error
}

// Start begins an epoch: what this publisher knew is dropped, the node
// variables are listed again before the next writes.
func (p *Publisher) Start(epoch string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.epoch, p.seq, p.beatIndex, p.listed = epoch, 0, 0, false
	clear(p.known)
	clear(p.written)
}

// Epoch is the current epoch ("" when not started).
func (p *Publisher) Epoch() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.epoch
}

func (p *Publisher) wo(ctx context.Context) *nomadapi.WriteOptions {
	return (&nomadapi.WriteOptions{Namespace: p.Namespace}).WithContext(ctx)
}

func (p *Publisher) qo(ctx context.Context) *nomadapi.QueryOptions {
	return (&nomadapi.QueryOptions{Namespace: p.Namespace}).WithContext(ctx)
}

// Heartbeat writes the heartbeat: the epoch, the beat period and a new
// sequence number.
func (p *Publisher) Heartbeat(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch == "" {
		return errors.New("published demand: heartbeat before Start")
	}
	p.seq++
	l := wire.Leader{Epoch: p.epoch, Instance: p.instance, Beat: p.Beat, Seq: p.seq}
	path := wire.LeaderPath(p.Prefix)
	v, _, err := p.nomad.Variables().Update(&nomadapi.Variable{Namespace: p.Namespace, Path: path, Items: l.Items()}, p.wo(ctx))
	if err != nil {
		return fmt.Errorf("writing the demand heartbeat %s (the service's token needs variables write on %s/*): %w", path, strings.TrimSuffix(p.Prefix, "/"), err)
	}
	p.beatIndex = v.ModifyIndex
	return nil
}

// Stop deletes the heartbeat if it is still this leader's, so that the
// plugins read Nomad themselves at once instead of after StaleBeats.
func (p *Publisher) Stop(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	idx := p.beatIndex
	p.epoch, p.beatIndex = "", 0
	if idx == 0 {
		return nil
	}
	path := wire.LeaderPath(p.Prefix)
	if _, err := p.nomad.Variables().CheckedDelete(path, idx, p.wo(ctx)); err != nil {
		var cas nomadapi.ErrCASConflict
		if errors.As(err, &cas) {
			return nil // another leader beats now
		}
		return fmt.Errorf("deleting the demand heartbeat %s: %w", path, err)
	}
	return nil
}

// Publish writes each node's demand in want where it differs from what is
// published, and deletes the variables of nodes without demand. want's
// epochs are set to the publisher's. Before Start and after Stop it does
// nothing.
func (p *Publisher) Publish(ctx context.Context, want map[string]wire.Node) (Report, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epoch == "" {
		return Report{}, nil // not leading (Stop ran, or Start not yet)
	}
	if !p.listed {
		if err := p.list(ctx); err != nil {
			return Report{}, err
		}
	}
	var rep Report
	calls := 0
	for _, id := range p.changed(want) {
		n := want[id]
		n.Epoch = p.epoch
		if calls >= p.MaxCalls {
			rep.Deferred = append(rep.Deferred, id)
			continue
		}
		calls++
		p.write(ctx, id, n, &rep)
	}
	for _, id := range p.gone(want) {
		if calls >= p.MaxCalls {
			rep.Deferred = append(rep.Deferred, id)
			continue
		}
		calls++
		path := wire.NodePath(p.Prefix, id)
		if _, err := p.nomad.Variables().Delete(path, p.wo(ctx)); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("deleting the demand of node %s (%s): %w", id, path, err))
			continue
		}
		delete(p.known, id)
		delete(p.written, id)
		rep.Deleted = append(rep.Deleted, id)
	}
	if len(rep.Written)+len(rep.Deleted) > 0 {
		p.log.Debug("published node demand", "written", len(rep.Written), "deleted", len(rep.Deleted), "deferred", len(rep.Deferred))
	}
	return rep, nil
}

// write writes node id's demand n and reports whether it did; p.mu is
// held.
func (p *Publisher) write(ctx context.Context, id string, n wire.Node, rep *Report) bool {
	path := wire.NodePath(p.Prefix, id)
	v, _, err := p.nomad.Variables().Update(&nomadapi.Variable{Namespace: p.Namespace, Path: path, Items: n.Items()}, p.wo(ctx))
	if err != nil {
		delete(p.known, id)
		delete(p.written, id)
		rep.Errors = append(rep.Errors, fmt.Errorf("writing the demand of node %s (%s): %w", id, path, err))
		return false
	}
	p.known[id] = n
	p.written[id] = v.ModifyIndex
	rep.Written = append(rep.Written, id)
	return true
}

// Verify lists the node variables and repairs those that are not what
// this epoch wrote: a variable deleted, or written since by someone else
// (its modify index is not the one this publisher's write returned), is
// written again; one under the prefix that this epoch neither wrote nor
// found at its start is deleted (guarded by its modify index). Publish
// writes only what changed, so without Verify such a change would stand
// until the node's demand changes. Values not yet written this epoch are
// left to Publish; at most MaxCalls writes. Before Start and after Stop
// it does nothing.
func (p *Publisher) Verify(ctx context.Context) (Report, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var rep Report
	if p.epoch == "" || !p.listed {
		return rep, nil
	}
	prefix := wire.NodesPrefix(p.Prefix)
	metas, _, err := p.nomad.Variables().PrefixList(prefix, p.qo(ctx))
	if err != nil {
		return rep, fmt.Errorf("listing the published node demand under %s: %w", prefix, err)
	}
	found := make(map[string]uint64, len(metas))
	for _, m := range metas {
		if m != nil && strings.HasPrefix(m.Path, prefix) {
			found[strings.TrimPrefix(m.Path, prefix)] = m.ModifyIndex
		}
	}
	calls := 0
	for _, id := range slices.Sorted(maps.Keys(p.written)) {
		if idx, ok := found[id]; ok && idx == p.written[id] {
			continue
		}
		if calls >= p.MaxCalls {
			rep.Deferred = append(rep.Deferred, id)
			continue
		}
		calls++
		n, idx := p.known[id], p.written[id]
		if !p.write(ctx, id, n, &rep) {
			p.known[id], p.written[id] = n, idx // still wrong: the next Verify tries again
		}
	}
	for _, id := range slices.Sorted(maps.Keys(found)) {
		if _, ok := p.known[id]; ok {
			continue
		}
		if calls >= p.MaxCalls {
			rep.Deferred = append(rep.Deferred, id)
			continue
		}
		calls++
		path := wire.NodePath(p.Prefix, id)
		if _, err := p.nomad.Variables().CheckedDelete(path, found[id], p.wo(ctx)); err != nil {
			rep.Errors = append(rep.Errors, fmt.Errorf("deleting the demand of node %s (%s), which this leader did not write: %w", id, path, err))
			continue
		}
		rep.Deleted = append(rep.Deleted, id)
	}
	if len(rep.Written)+len(rep.Deleted) > 0 {
		p.log.Warn("published node demand changed by someone else: written again", "written", len(rep.Written), "deleted", len(rep.Deleted), "deferred", len(rep.Deferred))
	}
	return rep, nil
}

// changed are the nodes whose wanted demand is not what was written,
// sorted (the order writes are deferred in): the few a cycle changes,
// not every node. p.mu is held.
func (p *Publisher) changed(want map[string]wire.Node) []string {
	var ids []string
	for id, n := range want {
		n.Epoch = p.epoch
		if have, ok := p.known[id]; !ok || !have.Same(n) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// gone are the nodes written that want no longer names, sorted. p.mu is
// held.
func (p *Publisher) gone(want map[string]wire.Node) []string {
	var ids []string
	for id := range p.known {
		if _, ok := want[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// list reads which node variables exist (an earlier leader's): each is
// known with an empty epoch, so that it is rewritten or deleted.
func (p *Publisher) list(ctx context.Context) error {
	prefix := wire.NodesPrefix(p.Prefix)
	metas, _, err := p.nomad.Variables().PrefixList(prefix, p.qo(ctx))
	if err != nil {
		return fmt.Errorf("listing the published node demand under %s: %w", prefix, err)
	}
	for _, m := range metas {
		if m != nil && strings.HasPrefix(m.Path, prefix) {
			p.known[strings.TrimPrefix(m.Path, prefix)] = wire.Node{}
		}
	}
	p.listed = true
	return nil
}

// Known is the demand last published per node (for tests and the status).
func (p *Publisher) Known() map[string]wire.Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.known)
}
