package service

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nodedemand"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	wire "github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	"github.com/prometheus/client_golang/prometheus"
)

// DemandConfig configures the published demand (package nodedemand): the
// demand of each node's idle GPUs, for the device plugins.
type DemandConfig struct {
	// Publish: while leading, publish it.
	Publish bool
	// Prefix and Namespace of the Nomad Variables (defaults
	// vocab/nodedemand's); Beat is the heartbeat period.
	Prefix, Namespace string
	Beat              time.Duration
}

// demand publishes the node demand while this instance leads.
type demand struct {
	pub    *nodedemand.Publisher
	writes prometheus.Counter
	errs   prometheus.Counter
	// lastErr is the last failure logged (once while it lasts).
	lastErr string
	// want is the demand computed for the plan numbered gen
	// (lastPlan.gen) with actions: a cycle that took the same plan and
	// kept its actions has the same demand. settled says the last
	// Publish, in epoch, wrote all of it (nothing deferred or failed).
	want    map[string]wire.Node
	gen     uint64
	actions []plan.Action
	settled bool
	epoch   string
}

func newDemand(s *Service) *demand {
	p := nodedemand.NewPublisher(s.cfg.Nomad, s.cfg.Instance, s.log.Named("demand"))
	if c := s.cfg.Demand; c.Prefix != "" {
		p.Prefix = c.Prefix
	}
	if c := s.cfg.Demand; c.Namespace != "" {
		p.Namespace = c.Namespace
	}
	if c := s.cfg.Demand; c.Beat > 0 {
		p.Beat = c.Beat
	}
	d := &demand{pub: p,
		writes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpushare", Name: "demand_writes_total",
			Help: "Writes and deletions of the published node demand (Nomad Variables <prefix>/nodes/<node>)."}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpushare", Name: "demand_write_errors_total",
			Help: "Failed writes of the published node demand and of its heartbeat."}),
	}
	s.reg.MustRegister(d.writes, d.errs)
	return d
}

// startDemand begins a new epoch of the published demand (a new
// leadership): the values of earlier leaders stop counting.
func (s *Service) startDemand() {
	if s.demand != nil {
		s.demand.pub.Start(fmt.Sprintf("%s-%d", s.cfg.Instance, time.Now().UnixNano()))
	}
}

// leadDemand publishes the heartbeat every beat, and repairs the node
// demand someone else changed (nodedemand.Publisher.Verify), until ctx
// ends (the leadership), then deletes the heartbeat if it is still this
// leader's.
func (s *Service) leadDemand(ctx context.Context) {
	d := s.demand
	if d == nil {
		return
	}
	tick := time.NewTicker(d.pub.Beat)
	defer tick.Stop()
	for {
		d.note(d.pub.Heartbeat(ctx), 0, s)
		rep, err := d.pub.Verify(ctx)
		if err == nil {
			err = errors.Join(rep.Errors...)
		}
		d.note(err, len(rep.Written)+len(rep.Deleted), s)
		select {
		case <-ctx.Done():
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			d.note(d.pub.Stop(stop), 0, s)
			cancel()
			return
		case <-tick.C:
		}
	}
}

// publishDemand writes the node demand of the cycle's plan; it returns
// the nodes deferred to a later cycle, as held actions (the leader
// retries soon).
func (s *Service) publishDemand(ctx context.Context, c *cycleData) (deferred []string) {
	d := s.demand
	if d == nil || d.pub.Epoch() == "" {
		return nil
	}
	epoch := d.pub.Epoch()
	want, publish := d.wanted(c, epoch, nodedemand.Compute)
	if !publish {
		return nil
	}
	rep, err := d.pub.Publish(ctx, want)
	d.settled, d.epoch = err == nil && len(rep.Deferred) == 0 && len(rep.Errors) == 0, epoch
	if err == nil {
		err = errors.Join(rep.Errors...)
	}
	for _, id := range rep.Deferred {
		deferred = append(deferred, fmt.Sprintf("published demand of node %s: %d variables written this cycle", id, d.pub.MaxCalls))
	}
	d.note(err, len(rep.Written)+len(rep.Deleted), s)
	return deferred
}

// wanted is the demand of the cycle's plan (computed by compute, unless
// the cycle took the last demand's plan with the same actions), and
// whether to publish it: not when it is what the last Publish of this
// epoch wrote in full (the publisher would find nothing to write).
func (d *demand) wanted(c *cycleData, epoch string, compute func(*cluster.Snapshot, plan.Result) map[string]wire.Node) (map[string]wire.Node, bool) {
	if d.want != nil && d.gen == c.planGen && reflect.DeepEqual(d.actions, c.res.Actions) {
		return d.want, !d.settled || d.epoch != epoch
	}
	d.want, d.gen, d.actions, d.settled = compute(c.view.Snapshot, c.res), c.planGen, slices.Clone(c.res.Actions), false
	return d.want, true
}

// note counts writes and logs a failure once while it lasts.
func (d *demand) note(err error, writes int, s *Service) {
	d.writes.Add(float64(writes))
	if err != nil && !errors.Is(err, context.Canceled) {
		d.errs.Inc()
	}
	switch {
	case err != nil && errors.Is(err, context.Canceled):
	case err != nil && err.Error() != d.lastErr:
		s.log.Warn("publishing the node demand failed; device plugins read Nomad themselves (run with -publish-demand=false to stop publishing)", "error", err)
		d.lastErr = err.Error()
	case err == nil && d.lastErr != "":
		s.log.Info("publishing the node demand works again")
		d.lastErr = ""
	}
}
