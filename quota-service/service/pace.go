package service

import (
	"context"
	"time"
)

// cycleSettle is how long the leader waits after a trigger before it
// cycles, so that the events that come together (a job's registration,
// its evaluation, its allocations) make one cycle.
const cycleSettle = 20 * time.Millisecond

// cycleIdleMax bounds what one cycle adds to the leader's pace: a cycle
// that waited long on Nomad or Consul (a fault, a timeout) counts as
// this long, so the cycles after it are not slowed for seconds.
const cycleIdleMax = time.Second

// cyclePace is what the leader's pace depends on: when its last cycle
// began and ended, and how long its recent cycles took (a moving
// average, each cycle weighing a quarter, each counted at most
// cycleIdleMax).
type cyclePace struct {
	start, end time.Time
	typical    time.Duration
}

// pacedCycle runs a cycle and notes it in p.
func (s *Service) pacedCycle(ctx context.Context, p *cyclePace) (held bool) {
	start := time.Now()
	held = s.cycle(ctx)
	p.note(start, time.Now())
	return held
}

// note records a cycle that ran from start to end.
func (p *cyclePace) note(start, end time.Time) {
	took := min(end.Sub(start), cycleIdleMax)
	if p.typical == 0 {
		p.typical = took
	} else {
		p.typical += (took - p.typical) / 4
	}
	p.start, p.end = start, end
}

// next is when the leader may begin the cycle for a trigger noticed at
// now: cycleSettle after the trigger, gap after the last cycle began (at
// most one cycle per gap however busy Nomad is), and after an idle time
// as long as its recent cycles took (cycles take at most about half of
// the leader's time, so cycles that grow with the cluster slow their
// pace instead of running back to back, while one long cycle, such as a
// new plan, delays the next little); whichever is latest (docs/design.md,
// Pacing the leader's cycles).
func (p *cyclePace) next(now time.Time, gap time.Duration) time.Time {
	at := now.Add(cycleSettle)
	for _, t := range []time.Time{p.start.Add(gap), p.end.Add(p.typical)} {
		if t.After(at) {
			at = t
		}
	}
	return at
}
