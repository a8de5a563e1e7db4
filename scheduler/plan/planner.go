package plan

import "github.com/gpushare/nomad-gpushare/scheduler/cluster"

// Planner plans one snapshot after another, each exactly as Plan does,
// and keeps from one plan to the next what a plan derives from the
// running cluster alone (the snapshot's lookup tables and free capacity,
// the running jobs and what their allocations hold) while the nodes,
// allocations, projects and departments stay the same
// (cluster.Snapshot.EqualRunning): new or changed pending work on an
// unchanged cluster is then indexed and planned without going through
// every allocation again. The zero Planner is ready; it is not safe for
// concurrent use.
type Planner struct {
	// last is the snapshot the kept tables were made from, index its
	// Index and running its running jobs as newRunningJobs made them
	// (never changed: each plan changes a clone).
	last    *cluster.Snapshot
	index   *cluster.Index
	running runningJobs
}

// Plan is Plan(snap, opts), reusing what the last snapshot planned shares
// with snap.
func (p *Planner) Plan(snap *cluster.Snapshot, opts Options) (Result, error) {
	x, reused, err := snap.IndexAfter(p.last, p.index)
	if err != nil {
		return Result{}, err
	}
	if reused {
		// snap runs as the older one did, which may go now; x shares
		// the kept tables.
		p.last, p.index = snap, x
	} else {
		p.last, p.index, p.running = snap, x, newRunningJobs(snap, x)
	}
	s := newStateOn(snap, x, p.running.clone(additionsOf(snap)), opts)
	if err := s.run(); err != nil {
		return Result{}, err
	}
	return s.result(), nil
}
