package nomadwatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// Builder lists Nomad and assembles Views. Job specs are cached by job
// modify index, full nodes by node modify index.
type Builder struct {
	nomad *nomadapi.Client
	log   hclog.Logger

	mu    sync.Mutex
	specs map[string]*nomadapi.Job
	nodes map[string]cachedNode
}

// NewBuilder returns a builder over the Nomad client.
func NewBuilder(client *nomadapi.Client, log hclog.Logger) *Builder {
	return &Builder{nomad: client, log: log.Named("nomadwatch"), specs: map[string]*nomadapi.Job{}, nodes: map[string]cachedNode{}}
}

// Build lists nodes, allocations and jobs in all namespaces and assembles
// a View with the given quota settings and suspension records. Any listing
// error fails the whole build: the service never plans on partial data.
func (b *Builder) Build(ctx context.Context, settings []quota.Settings, suspensions []state.Suspension) (*View, error) {
	q := func(params map[string]string) *nomadapi.QueryOptions {
		return (&nomadapi.QueryOptions{Namespace: "*", Params: params, AllowStale: false}).WithContext(ctx)
	}
	nodes, _, err := b.nomad.Nodes().List(q(map[string]string{"resources": "true"}))
	if err != nil {
		return nil, fmt.Errorf("listing Nomad nodes: %w", err)
	}
	allocs, _, err := b.nomad.Allocations().List(q(map[string]string{"resources": "true"}))
	if err != nil {
		return nil, fmt.Errorf("listing Nomad allocations: %w", err)
	}
	// Meta only comes with meta=true: the non-preemptible flag and the
	// projects' job_meta_key mapping read it.
	jobs, _, err := b.nomad.Jobs().ListOptions(&nomadapi.JobListOptions{Fields: &nomadapi.JobListFields{Meta: true}}, q(nil))
	if err != nil {
		return nil, fmt.Errorf("listing Nomad jobs: %w", err)
	}
	info, err := b.nodeInfo(ctx, nodes)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	recorded := map[string]bool{}
	for _, r := range suspensions {
		recorded[Key(r.Namespace, r.Job)] = true
	}
	specs := map[string]*nomadapi.Job{}
	for _, j := range jobs {
		key := Key(j.Namespace, j.ID)
		queued := false
		if j.JobSummary != nil {
			for _, s := range j.JobSummary.Summary {
				queued = queued || s.Queued > 0
			}
		}
		if !(queued && !j.Stop) && !recorded[key] {
			continue
		}
		spec, err := b.spec(ctx, j)
		if err != nil {
			return nil, err
		}
		if spec != nil {
			specs[key] = spec
		}
	}
	b.prune(jobs)
	return Assemble(Inputs{Nodes: nodes, NodeInfo: info, Allocations: allocs, Jobs: jobs, Specs: specs,
		Settings: settings, Suspensions: suspensions, Now: now}), nil
}

func (b *Builder) spec(ctx context.Context, j *nomadapi.JobListStub) (*nomadapi.Job, error) {
	key := Key(j.Namespace, j.ID)
	b.mu.Lock()
	cached := b.specs[key]
	b.mu.Unlock()
	if cached != nil && cached.JobModifyIndex != nil && *cached.JobModifyIndex == j.JobModifyIndex {
		return cached, nil
	}
	spec, _, err := b.nomad.Jobs().Info(j.ID, (&nomadapi.QueryOptions{Namespace: j.Namespace}).WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("reading Nomad job %s: %w", key, err)
	}
	b.mu.Lock()
	b.specs[key] = spec
	b.mu.Unlock()
	return spec, nil
}

func (b *Builder) prune(jobs []*nomadapi.JobListStub) {
	live := map[string]bool{}
	for _, j := range jobs {
		live[Key(j.Namespace, j.ID)] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.specs {
		if !live[k] {
			delete(b.specs, k)
		}
	}
}

// Watch follows the event stream until ctx ends and calls changed after
// every batch of events and after every (re)connect, when events may have
// been missed. Connection errors are logged and retried with a back-off.
func Watch(ctx context.Context, client *nomadapi.Client, log hclog.Logger, changed func()) {
	log = log.Named("events")
	topics := map[nomadapi.Topic][]string{
		nomadapi.TopicJob: {"*"}, nomadapi.TopicAllocation: {"*"},
		nomadapi.TopicEvaluation: {"*"}, nomadapi.TopicNode: {"*"},
	}
	backoff := 500 * time.Millisecond
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		ch, err := client.EventStream().Stream(sctx, topics, 0, &nomadapi.QueryOptions{Namespace: "*"})
		if err != nil {
			cancel()
			log.Warn("event stream unavailable; relying on periodic re-lists", "error", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		changed() // (re)connected: whatever happened in the gap needs a re-list
		for evs := range ch {
			if evs.Err != nil {
				if ctx.Err() != nil {
					break
				}
				log.Warn("event stream broke; reconnecting", "error", evs.Err)
				break
			}
			backoff = 500 * time.Millisecond
			if len(evs.Events) > 0 {
				changed()
			}
		}
		cancel()
		if ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			changed()
		}
	}
}

// Queue returns a function to pass to Watch that wakes the receiver of
// the returned channel at most once per pending signal.
func Queue() (func(), <-chan struct{}) {
	ch := make(chan struct{}, 1)
	return func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}, ch
}
