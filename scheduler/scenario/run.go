package scenario

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// Round is one planning round: the snapshot planned on and the plan.
type Round struct {
	Snapshot *cluster.Snapshot
	Result   plan.Result
}

// Outcome is a scenario run: every round, and the state after the last.
type Outcome struct {
	Rounds []Round
	Final  *cluster.Snapshot
}

// roundTime is the start time given to allocations placed in a round, far
// after any start or submit time a scenario names.
func roundTime(r int) int64 { return int64(r) * 1_000_000 }

// Run plans the scenario's rounds one after another, applying each plan's
// decisions (plan.Apply) and the scenario's finishes and arrivals between
// rounds.
func (sc *Scenario) Run(opts plan.Options) (*Outcome, error) {
	snap := cloneSnapshot(&sc.Initial)
	out := &Outcome{}
	for r := 1; r <= sc.Rounds; r++ {
		if r > 1 {
			snap = sc.between(snap, r)
		}
		res, err := plan.Plan(snap, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: round %d: %w", sc.File, r, err)
		}
		out.Rounds = append(out.Rounds, Round{Snapshot: snap, Result: res})
		snap = plan.Apply(snap, res, roundTime(r))
	}
	out.Final = snap
	return out, nil
}

// between applies the finishes and arrivals due before round r.
func (sc *Scenario) between(snap *cluster.Snapshot, r int) *cluster.Snapshot {
	done := map[string]bool{}
	for _, f := range sc.Finishes {
		if f.Round == r {
			done[f.Job] = true
		}
	}
	next := &cluster.Snapshot{Nodes: snap.Nodes, Projects: snap.Projects, Departments: snap.Departments}
	for _, a := range snap.Allocations {
		if !done[a.Job] {
			next.Allocations = append(next.Allocations, a)
		}
	}
	for _, w := range snap.Pending {
		if !done[w.Job] {
			next.Pending = append(next.Pending, w)
		}
	}
	for _, a := range sc.Arrivals {
		if a.Round == r {
			next.Pending = append(next.Pending, a.Pending)
		}
	}
	return next
}

// eventful reports whether the scenario changes anything from outside
// before round r (a finish or an arrival).
func (sc *Scenario) eventful(r int) bool {
	for _, f := range sc.Finishes {
		if f.Round == r {
			return true
		}
	}
	for _, a := range sc.Arrivals {
		if a.Round == r {
			return true
		}
	}
	return false
}

func cloneSnapshot(s *cluster.Snapshot) *cluster.Snapshot {
	return &cluster.Snapshot{
		Nodes:       s.Nodes,
		Projects:    s.Projects,
		Departments: s.Departments,
		Allocations: slices.Clone(s.Allocations),
		Pending:     slices.Clone(s.Pending),
	}
}

// jobEvent is something the planner did to a job in one round.
type jobEvent struct {
	round int
	kind  byte // 'S' suspend, 'R' resume, 'P' place, 'K' shrink, 'G' grow
}

// history lists, per job in first-seen order, what the planner did to it.
func history(out *Outcome) ([]string, map[string][]jobEvent) {
	h := map[string][]jobEvent{}
	var jobs []string
	for i, rd := range out.Rounds {
		seen := map[string]bool{}
		for _, a := range rd.Result.Actions {
			if seen[a.Job] {
				continue
			}
			seen[a.Job] = true
			kind := byte('S')
			switch a.Kind {
			case plan.Place:
				kind = 'P'
				if rd.Snapshot.Pending[a.Workload].Suspended {
					kind = 'R'
				}
			case plan.Shrink:
				kind = 'K'
			}
			if _, ok := h[a.Job]; !ok {
				jobs = append(jobs, a.Job)
			}
			h[a.Job] = append(h[a.Job], jobEvent{i + 1, kind})
		}
		for _, g := range rd.Result.Grow {
			if seen[g.Job] {
				continue
			}
			seen[g.Job] = true
			if _, ok := h[g.Job]; !ok {
				jobs = append(jobs, g.Job)
			}
			h[g.Job] = append(h[g.Job], jobEvent{i + 1, 'G'})
		}
	}
	return jobs, h
}

// stops reports whether the event stops work: a suspension or a shrink.
func (e jobEvent) stops() bool { return e.kind == 'S' || e.kind == 'K' }

// Stability finds oscillation across rounds: a job suspended, then placed
// again, then suspended again, or shrunk, grown and shrunk again. Each
// oscillating job is one error.
func (sc *Scenario) Stability(out *Outcome) []error {
	jobs, h := history(out)
	var errs []error
	for _, job := range jobs {
		var pattern strings.Builder
		for _, e := range h[job] {
			pattern.WriteByte(e.kind)
		}
		if p := pattern.String(); strings.Contains(p, "SRS") || strings.Contains(p, "SPS") || strings.Contains(p, "KGK") {
			errs = append(errs, fmt.Errorf("%s: job %s oscillates: %s over rounds %v", sc.File, job, p, h[job]))
		}
	}
	return errs
}

// Churn finds jobs placed (or resumed, or grown) in one round and suspended
// or shrunk in a later one although nothing arrived or finished in between:
// not an oscillation, but wasted work. Hand-written scenarios must have
// none.
func (sc *Scenario) Churn(out *Outcome) []error {
	jobs, h := history(out)
	var errs []error
	for _, job := range jobs {
		events := h[job]
		for k := 1; k < len(events); k++ {
			if !events[k].stops() || events[k-1].stops() {
				continue
			}
			quiet := true
			for r := events[k-1].round + 1; r <= events[k].round; r++ {
				quiet = quiet && !sc.eventful(r)
			}
			if quiet {
				errs = append(errs, fmt.Errorf("%s: job %s placed in round %d and stopped in round %d with nothing changed in between",
					sc.File, job, events[k-1].round, events[k].round))
			}
		}
	}
	return errs
}
