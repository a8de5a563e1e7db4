package ranking

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// DefaultMinInterval is the default shortest time between two writes to
// one node's metadata.
const DefaultMinInterval = 2 * time.Second

// DefaultMaxCalls is the default bound on the Nomad calls (node reads and
// writes) of one Publish.
const DefaultMaxCalls = 64

// DefaultCallTimeout is the default bound on one node metadata call.
const DefaultCallTimeout = 5 * time.Second

// Publisher writes Compute's ranks as Nomad dynamic node metadata. It
// remembers each node's ranking keys as last read from or written to the
// node, and writes a node only when one of its values differs (unsetting
// ranking keys of classes that left), at most once per MinInterval. The
// quota service's leader runs it; Forget drops what it remembers (a new
// leader reads every node afresh).
type Publisher struct {
	nomad *nomadapi.Client
	log   hclog.Logger
	// MinInterval is the shortest time between two writes to one node
	// (default DefaultMinInterval).
	MinInterval time.Duration
	// ComputeEvery is the shortest time between two computations of the
	// ranks (default DefaultMinInterval): a Publish sooner after the last
	// one that computed does nothing. Computing takes about 0.1 s of CPU
	// at 5,000 nodes (BenchmarkCompute), and a busy cluster's cycles run
	// back to back; the ranks only steer placement, and a node is written
	// at most once per MinInterval anyway.
	ComputeEvery time.Duration
	// MaxCalls bounds the Nomad calls of one Publish (default
	// DefaultMaxCalls): the nodes beyond are deferred, so that a new
	// leader on a large cluster reads the nodes over several cycles
	// instead of stalling one.
	MaxCalls int
	// CallTimeout bounds each node metadata call (default
	// DefaultCallTimeout). Nomad forwards them to the node's client
	// agent: one that died without closing its connection keeps a call
	// waiting for the connection's keepalive to fail, and the leader's
	// cycle, which publishes, with it.
	CallTimeout time.Duration
	now         func() time.Time

	mu sync.Mutex
	// known is each node's ranking keys as the node last reported them;
	// a node not in it is read before it is written.
	known      map[string]map[string]string
	lastWrite  map[string]time.Time
	computedAt time.Time
	// ranked is what the last computation read and gave (rank).
	ranked *rankInputs
}

// NewPublisher returns a publisher writing through client.
func NewPublisher(client *nomadapi.Client, log hclog.Logger) *Publisher {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Publisher{nomad: client, log: log, MinInterval: DefaultMinInterval, ComputeEvery: DefaultMinInterval, MaxCalls: DefaultMaxCalls, CallTimeout: DefaultCallTimeout, now: time.Now,
		known: map[string]map[string]string{}, lastWrite: map[string]time.Time{}}
}

// Report is what one Publish did.
type Report struct {
	// Written are the nodes whose metadata was written.
	Written []string
	// Deferred are the nodes that differ but were written less than
	// MinInterval ago, or that the MaxCalls bound left for later: a later
	// Publish writes them.
	Deferred []string
	// Errors are the nodes that could not be read or written.
	Errors []error
	// Skipped says the ranks were computed less than ComputeEvery ago:
	// nothing was compared or written.
	Skipped bool
}

// Forget drops what the publisher remembers of the nodes' metadata.
func (p *Publisher) Forget() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.known)
	clear(p.lastWrite)
	p.computedAt, p.ranked = time.Time{}, nil
}

// Publish computes the ranks of snap and specs (Compute; the last ones
// again while snap equals the snapshot last ranked and specs ask for the
// same CPU-only work) and writes every node whose published values
// differ from them; within ComputeEvery of the last Publish that
// computed, it does nothing.
func (p *Publisher) Publish(ctx context.Context, snap *cluster.Snapshot, specs map[string]*nomadapi.Job) (Report, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.ComputeEvery > 0 && !p.computedAt.IsZero() && now.Sub(p.computedAt) < p.ComputeEvery {
		return Report{Skipped: true}, nil
	}
	p.computedAt = now
	ranked, err := rank(snap, specs, p.ranked)
	if err != nil {
		p.ranked = nil
		return Report{}, err
	}
	p.ranked = ranked
	ranks := ranked.ranks
	var rep Report
	calls := 0
	for _, n := range snap.Nodes {
		want, ok := ranks.Nodes[n.Name]
		if !ok {
			continue
		}
		if err := p.publishNode(ctx, n.Name, want, &rep, &calls); err != nil {
			delete(p.known, n.Name)
			rep.Errors = append(rep.Errors, err)
		}
	}
	for id := range p.known {
		if _, ok := ranks.Nodes[id]; !ok {
			delete(p.known, id)
			delete(p.lastWrite, id)
		}
	}
	return rep, nil
}

// publishNode writes node id's ranking keys if they differ from want.
func (p *Publisher) publishNode(ctx context.Context, id string, want map[string]string, rep *Report, calls *int) error {
	have, ok := p.known[id]
	if !ok {
		if *calls >= p.MaxCalls {
			rep.Deferred = append(rep.Deferred, id)
			return nil
		}
		*calls++
		callCtx, cancel := p.callContext(ctx)
		resp, err := p.nomad.Nodes().Meta().Read(id, (&nomadapi.QueryOptions{}).WithContext(callCtx))
		cancel()
		if err != nil {
			return fmt.Errorf("reading the metadata of node %s: %w", id, err)
		}
		have = rankingKeys(resp.Meta)
		p.known[id] = have
	}
	change := diff(have, want)
	if len(change) == 0 {
		return nil
	}
	now := p.now()
	if last, ok := p.lastWrite[id]; ok && now.Sub(last) < p.MinInterval || *calls >= p.MaxCalls {
		rep.Deferred = append(rep.Deferred, id)
		return nil
	}
	*calls++
	callCtx, cancel := p.callContext(ctx)
	resp, err := p.nomad.Nodes().Meta().Apply(&nomadapi.NodeMetaApplyRequest{NodeID: id, Meta: change},
		(&nomadapi.QueryOptions{}).WithContext(callCtx))
	cancel()
	if err != nil {
		// Whether it landed is unknown: the node is read again first.
		delete(p.known, id)
		return fmt.Errorf("writing the ranking metadata of node %s (the quota service's token needs node:write): %w", id, err)
	}
	p.lastWrite[id] = now
	p.known[id] = rankingKeys(resp.Meta)
	rep.Written = append(rep.Written, id)
	p.log.Debug("published placement ranks", "node", id, "changed", len(change))
	return nil
}

// callContext bounds one node metadata call by CallTimeout.
func (p *Publisher) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if p.CallTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, p.CallTimeout)
}

// rankingKeys is the ranking part of a node's metadata.
func rankingKeys(meta map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range meta {
		if strings.HasPrefix(k, Prefix) {
			out[k] = v
		}
	}
	return out
}

// diff is the metadata update that turns have into want: changed and new
// keys with their values, keys of want's prefix that left as nil.
func diff(have, want map[string]string) map[string]*string {
	change := map[string]*string{}
	for k, v := range want {
		if old, ok := have[k]; !ok || old != v {
			change[k] = &v
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			change[k] = nil
		}
	}
	return change
}

// Known is the ranking metadata the publisher last saw on each node (for
// tests and the status).
func (p *Publisher) Known() map[string]map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]map[string]string, len(p.known))
	for id, m := range p.known {
		out[id] = maps.Clone(m)
	}
	return out
}
