package nomadwatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// Builder lists Nomad and assembles Views. Job specs are cached by the
// job's modify index (which moves with every change, version tags
// included), full nodes by node modify index.
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
// a View with the given quota settings and suspension records (recErrs:
// those that did not decode). Any listing error fails the whole build: the
// service never plans on partial data.
func (b *Builder) Build(ctx context.Context, settings []quota.Settings, suspensions []state.Suspension, recErrs []state.RecordError) (*View, error) {
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
	specs, err := b.readSpecs(ctx, jobs, suspensions)
	if err != nil {
		return nil, err
	}
	unlisted, err := b.readUnlisted(ctx, jobs, suspensions, specs)
	if err != nil {
		return nil, err
	}
	b.prune(jobs)
	return Assemble(Inputs{Nodes: nodes, NodeInfo: info, Allocations: allocs, Jobs: jobs, Specs: specs,
		Settings: settings, Suspensions: suspensions, RecordErrors: recErrs, Unlisted: unlisted, Now: now}), nil
}

// readSpecs reads the full spec of every job that may have pending work
// (registered, not stopped, not finished) and of every recorded job.
func (b *Builder) readSpecs(ctx context.Context, jobs []*nomadapi.JobListStub, suspensions []state.Suspension) (map[string]*nomadapi.Job, error) {
	recorded := map[string]bool{}
	for _, r := range suspensions {
		recorded[r.Key()] = true
	}
	specs := map[string]*nomadapi.Job{}
	for _, j := range jobs {
		key := Key(j.Namespace, j.ID)
		if (j.Stop || j.Status == "dead" || j.ParameterizedJob || j.Periodic) && !recorded[key] {
			continue
		}
		spec, err := b.spec(ctx, j)
		if err != nil {
			return nil, err
		}
		specs[key] = spec
	}
	return specs, nil
}

// readUnlisted reads the job of every record the listing left out, one by
// one: a listing under ACLs leaves out what the token may not see, so only
// Nomad's 404 says the job is gone.
func (b *Builder) readUnlisted(ctx context.Context, jobs []*nomadapi.JobListStub, suspensions []state.Suspension, specs map[string]*nomadapi.Job) (map[string]error, error) {
	listed := map[string]bool{}
	for _, j := range jobs {
		listed[Key(j.Namespace, j.ID)] = true
	}
	unlisted := map[string]error{}
	for _, r := range suspensions {
		key := r.Key()
		if listed[key] {
			continue
		}
		job, _, err := b.nomad.Jobs().Info(r.Job, (&nomadapi.QueryOptions{Namespace: r.Namespace}).WithContext(ctx))
		switch code := StatusCode(err); {
		case err == nil:
			specs[key] = job
		case code == http.StatusNotFound:
			unlisted[key] = nil
		case code != 0:
			unlisted[key] = fmt.Errorf("reading Nomad job %s: %w", key, err)
		default:
			return nil, fmt.Errorf("reading Nomad job %s: %w", key, err)
		}
	}
	return unlisted, nil
}

// StatusCode is the HTTP status of a Nomad API error (0 when err is not
// an HTTP answer).
func StatusCode(err error) int {
	var e nomadapi.UnexpectedResponseError
	if errors.As(err, &e) {
		return e.StatusCode()
	}
	return 0
}

func (b *Builder) spec(ctx context.Context, j *nomadapi.JobListStub) (*nomadapi.Job, error) {
	key := Key(j.Namespace, j.ID)
	b.mu.Lock()
	cached := b.specs[key]
	b.mu.Unlock()
	if cached != nil && cached.ModifyIndex != nil && *cached.ModifyIndex == j.ModifyIndex {
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
