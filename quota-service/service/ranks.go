package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpushare/nomad-gpushare/quota-service/ranking"
	"github.com/prometheus/client_golang/prometheus"
)

// ranks publishes the placement ranks (package ranking) while this
// instance leads, with Config.PublishRanks.
type ranks struct {
	pub    *ranking.Publisher
	writes prometheus.Counter
	errs   prometheus.Counter
	// lastErr is the last publishing failure logged, so that a lasting
	// one (a token without node:write) is logged once.
	lastErr string
}

func newRanks(s *Service) *ranks {
	r := &ranks{pub: ranking.NewPublisher(s.cfg.Nomad, s.log.Named("ranking")),
		writes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpushare", Name: "rank_writes_total",
			Help: "Node metadata writes of placement ranks (gpushare.rank.<class>)."}),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpushare", Name: "rank_write_errors_total",
			Help: "Nodes whose placement ranks could not be read or written."}),
	}
	s.reg.MustRegister(r.writes, r.errs)
	return r
}

// publishRanks writes the ranks of the cycle's snapshot to the nodes
// whose ranks changed. A node held back by the rate limit is a held
// action (the leader retries soon); a failure is logged, once while it
// lasts, and is no reason to retry before the next cycle.
func (s *Service) publishRanks(ctx context.Context, c *cycleData) {
	r := s.ranks
	if r == nil {
		return
	}
	rep, err := r.pub.Publish(ctx, c.view.Snapshot, c.view.Specs)
	if err == nil {
		err = errors.Join(rep.Errors...)
	}
	r.writes.Add(float64(len(rep.Written)))
	r.errs.Add(float64(len(rep.Errors)))
	for _, id := range rep.Deferred {
		c.rep.Skipped = append(c.rep.Skipped, fmt.Sprintf("placement ranks of node %s: written less than %s ago, or %d nodes read or written this cycle", id, r.pub.MinInterval, r.pub.MaxCalls))
	}
	switch {
	case err != nil && err.Error() != r.lastErr:
		s.log.Warn("publishing placement ranks failed (run with -publish-ranks=false to stop publishing)", "error", err)
		r.lastErr = err.Error()
	case err == nil && r.lastErr != "":
		s.log.Info("publishing placement ranks works again")
		r.lastErr = ""
	}
}
