package service

import (
	"context"
	"errors"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/ranking"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/prometheus/client_golang/prometheus"
)

// ranks publishes the placement ranks (package ranking) while this
// instance leads, with Config.PublishRanks. Its own loop (leadRanks)
// publishes, so that a cycle never waits for node metadata writes: at
// 5,000 nodes the writes of one computation held the cycle that made them
// for about half a second every 2 s (docs/scale.md).
type ranks struct {
	pub    *ranking.Publisher
	writes prometheus.Counter
	errs   prometheus.Counter
	// deferred is the number of nodes the last publication left for a
	// later one (Report.Deferred): after a leader's start, its first
	// reads of every node's metadata, a few dozen per round.
	deferred prometheus.Gauge
	// offers holds the last acting cycle's snapshot until the loop takes
	// it; a newer one replaces it.
	offers chan rankInput
	// lastErr is the last publishing failure logged, so that a lasting
	// one (a token without node:write) is logged once.
	lastErr string
}

// rankInput is what the ranks are computed from: one cycle's snapshot and
// specs, which no one changes once the cycle planned.
type rankInput struct {
	snap  *cluster.Snapshot
	specs map[string]*nomadapi.Job
}

func newRanks(s *Service) *ranks {
	r := &ranks{pub: ranking.NewPublisher(s.cfg.Nomad, s.log.Named("ranking")), offers: make(chan rankInput, 1),
		writes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpushare", Name: "rank_writes_total",
			Help: "Node metadata writes of placement ranks (gpushare.rank.<class>)."}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpushare", Name: "rank_write_errors_total",
			Help: "Nodes whose placement ranks could not be read or written."}),
		deferred: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpushare", Name: "rank_nodes_deferred",
			Help: "Nodes whose placement ranks the last publication left for a later one (the per-node write interval, the bound on Nomad calls per publication)."}),
	}
	s.reg.MustRegister(r.writes, r.errs, r.deferred)
	return r
}

// offerRanks hands the acting cycle's snapshot to the publishing loop,
// replacing one the loop has not taken yet.
func (s *Service) offerRanks(c *cycleData) {
	r := s.ranks
	if r == nil {
		return
	}
	in := rankInput{snap: c.view.Snapshot, specs: c.view.Specs}
	for {
		select {
		case r.offers <- in:
			return
		default:
		}
		select {
		case <-r.offers: // older than in: dropped
		default:
		}
	}
}

// leadRanks publishes the ranks of the snapshots offered until ctx (the
// leadership) ends. When a publish computed nothing (the last computation
// is younger than ComputeEvery) or left nodes for later (the per-node
// rate limit, the calls bound), the latest snapshot is published again
// ComputeEvery later.
func (s *Service) leadRanks(ctx context.Context) {
	r := s.ranks
	if r == nil {
		return
	}
	var last rankInput
	var again <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case last = <-r.offers:
		case <-again:
		}
		again = nil
		if rep := s.publishRanks(ctx, last); rep.Skipped || len(rep.Deferred) > 0 {
			again = time.After(max(r.pub.ComputeEvery, r.pub.MinInterval))
		}
	}
}

// ranksForget makes the publisher read every node afresh (another
// instance may have published since this one last led) and drops a
// snapshot offered in an earlier tenure; lead calls it before its first
// cycle.
func (s *Service) ranksForget() {
	if s.ranks == nil {
		return
	}
	s.ranks.pub.Forget()
	select {
	case <-s.ranks.offers: // a snapshot of an earlier tenure
	default:
	}
}

// publishRanks writes the ranks of in to the nodes whose ranks changed. A
// failure is logged, once while it lasts.
func (s *Service) publishRanks(ctx context.Context, in rankInput) ranking.Report {
	r := s.ranks
	rep, err := r.pub.Publish(ctx, in.snap, in.specs)
	if err == nil && !rep.Skipped {
		r.deferred.Set(float64(len(rep.Deferred)))
	}
	if err == nil {
		err = errors.Join(rep.Errors...)
	}
	r.writes.Add(float64(len(rep.Written)))
	r.errs.Add(float64(len(rep.Errors)))
	switch {
	case ctx.Err() != nil:
	case err != nil && err.Error() != r.lastErr:
		s.log.Warn("publishing placement ranks failed (run with -publish-ranks=false to stop publishing)", "error", err)
		r.lastErr = err.Error()
	case err == nil && r.lastErr != "":
		s.log.Info("publishing placement ranks works again")
		r.lastErr = ""
	}
	return rep
}
