package service

import (
	"context"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/surplususe"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// surplusSync is how often the leader stores the projects' use of the
// surplus, and how often a standby reads it: every 30 s, and at least
// four times a half-life.
func (s *Service) surplusSync() time.Duration {
	return min(30*time.Second, s.cfg.FairShareHalfLife/4)
}

// surplusState is time-aware fair share's state (Config.FairShareHalfLife):
// the tracker, nil when it is off, and when it was last stored or read.
type surplusState struct {
	tracker      *surplususe.Tracker
	saved, read  time.Time
	lastReadFail string
	// savedProjects is how many projects the stored record names.
	savedProjects int
}

// applySurplusFactors sets every project's surplus factor on the cycle's
// snapshot from the recent use of the surplus. A standby (and a leader
// that has not read it yet) first goes on from the stored record.
func (s *Service) applySurplusFactors(ctx context.Context, c *cycleData, now time.Time) {
	su := &s.surplus
	if su.tracker == nil {
		return
	}
	if (!s.leading() || su.read.IsZero()) && now.Sub(su.read) >= s.surplusSync() {
		s.readSurplusUse(ctx, now)
	}
	snap := c.view.Snapshot
	names := make([]string, len(snap.Projects))
	for i, p := range snap.Projects {
		names[i] = p.Name
	}
	var gpus int
	for _, n := range snap.Nodes {
		if n.Unavailable == "" {
			gpus += len(n.GPUs)
		}
	}
	c.factors = su.tracker.Factors(names, float64(gpus))
	for i := range snap.Projects {
		snap.Projects[i].SurplusFactor = c.factors[snap.Projects[i].Name]
	}
}

// readSurplusUse adopts the stored record when it is newer.
func (s *Service) readSurplusUse(ctx context.Context, now time.Time) {
	su := &s.surplus
	rec, found, err := s.store.SurplusUse(ctx)
	if err == nil && found {
		err = su.tracker.Adopt(rec)
	}
	su.read = now
	if err != nil {
		if msg := err.Error(); msg != su.lastReadFail {
			s.log.Warn("reading the projects' recent use of the surplus", "error", err)
			su.lastReadFail = msg
		}
		return
	}
	su.lastReadFail = ""
}

// noteSurplusUse, on the leader, adds what each project held above its
// guarantee this cycle and stores the record every surplusSync, and at
// once when a project enters or leaves it.
func (s *Service) noteSurplusUse(ctx context.Context, c *cycleData, now time.Time) {
	su := &s.surplus
	if su.tracker == nil || !c.acted {
		return
	}
	above := map[string]float64{}
	for _, sh := range c.res.Shares {
		above[sh.Name] = float64(max(sh.Usage-sh.Guaranteed, 0)) / float64(cluster.SharesPerGPU)
	}
	su.tracker.Observe(now, above)
	rec := su.tracker.Record()
	if now.Sub(su.saved) < s.surplusSync() && len(rec.Projects) == su.savedProjects {
		return
	}
	if err := s.store.PutSurplusUse(ctx, rec); err != nil {
		s.log.Warn("storing the projects' recent use of the surplus", "error", err)
		return
	}
	su.saved, su.savedProjects = now, len(rec.Projects)
}
