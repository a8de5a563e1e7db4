// Package surplususe remembers how much of the surplus each project used
// recently, for time-aware fair share (docs/design.md, Projects and fair
// share): GPU-hours held above the project's guarantee, decayed with a
// half-life, so that a project that held most of the idle GPUs all week
// deserves less of them now than one that held none.
//
// A project's surplus factor is 1 / (1 + weight * used / fair), where used
// is its decayed GPU-hours above its guarantee and fair what a project
// holding an equal part of the cluster (capacity / projects) all along
// would have: that part times the half-life over ln 2. So a project that
// held its equal part of the cluster for several half-lives has 1/2 (with
// weight 1), one that held none 1, and projects that used alike keep the
// split their weights give. The factors move no faster than the history
// does: a fresh history (a new cluster) changes nothing at once, so shares
// drift over half-lives rather than flap between cycles. The planner
// multiplies the project's over-quota weight by it
// (cluster.Project.SurplusFactor).
//
// The Tracker does no I/O; its Record is what the service keeps in Consul
// KV so that a new leader goes on from it.
package surplususe

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Record is the remembered usage at a moment: decayed GPU-hours above
// guarantee by project.
type Record struct {
	At       time.Time          `json:"at"`
	Projects map[string]float64 `json:"gpu_hours_above_guarantee"`
}

// Tracker decays and accumulates each project's use of the surplus.
type Tracker struct {
	halfLife time.Duration
	weight   float64
	rec      Record
}

// New returns a tracker with the given half-life (above 0) and weight of
// the past usage in the factors (at least 0).
func New(halfLife time.Duration, weight float64) (*Tracker, error) {
	if halfLife <= 0 {
		return nil, errors.New("surplus use: the half-life must be above 0, such as 24h")
	}
	if weight < 0 || math.IsNaN(weight) || math.IsInf(weight, 0) {
		return nil, fmt.Errorf("surplus use: weight %v: want a number from 0 up", weight)
	}
	return &Tracker{halfLife: halfLife, weight: weight, rec: Record{Projects: map[string]float64{}}}, nil
}

// Observe decays the remembered usage to now and adds what each project
// holds above its guarantee now (GPUs, by project) over the time since the
// last observation. The first observation only sets the clock; a clock
// that went back is taken as no time passed.
func (t *Tracker) Observe(now time.Time, above map[string]float64) {
	if t.rec.At.IsZero() {
		t.rec.At = now
		return
	}
	dt := now.Sub(t.rec.At)
	if dt <= 0 {
		return
	}
	t.decayTo(now)
	for p, gpus := range above {
		if gpus > 0 {
			t.rec.Projects[p] += gpus * dt.Hours()
		}
	}
}

// decayTo decays every project's usage to now and moves the clock there.
func (t *Tracker) decayTo(now time.Time) {
	decay := math.Exp2(-float64(now.Sub(t.rec.At)) / float64(t.halfLife))
	for p, u := range t.rec.Projects {
		if u *= decay; u < 1e-6 {
			delete(t.rec.Projects, p)
		} else {
			t.rec.Projects[p] = u
		}
	}
	t.rec.At = now
}

// Factors are the surplus factors of projects (names) on a cluster of
// capacity GPUs, each in (0, 1].
func (t *Tracker) Factors(projects []string, capacity float64) map[string]float64 {
	out := make(map[string]float64, len(projects))
	fair := capacity / float64(max(len(projects), 1)) * t.halfLife.Hours() / math.Ln2
	for _, p := range projects {
		out[p] = 1
		if fair > 0 {
			out[p] = 1 / (1 + t.weight*t.rec.Projects[p]/fair)
		}
	}
	return out
}

// Used is project's remembered GPU-hours above its guarantee.
func (t *Tracker) Used(project string) float64 { return t.rec.Projects[project] }

// Record is a copy of what the tracker remembers, to store.
func (t *Tracker) Record() Record {
	out := Record{At: t.rec.At, Projects: make(map[string]float64, len(t.rec.Projects))}
	for p, u := range t.rec.Projects {
		out.Projects[p] = u
	}
	return out
}

// Adopt takes over a stored record when it is newer than what the tracker
// remembers (a new leader going on from the last one). Values that are
// not finite numbers from 0 up are dropped, with the projects named in
// the error.
func (t *Tracker) Adopt(r Record) error {
	if r.At.IsZero() || !r.At.After(t.rec.At) {
		return nil
	}
	t.rec = Record{At: r.At, Projects: map[string]float64{}}
	var bad []string
	for p, u := range r.Projects {
		if u < 0 || math.IsNaN(u) || math.IsInf(u, 0) {
			bad = append(bad, p)
			continue
		}
		t.rec.Projects[p] = u
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("surplus use record: dropped projects %v: their GPU-hours are not numbers from 0 up", bad)
	}
	return nil
}
