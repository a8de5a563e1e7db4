package service

import (
	"context"
	"time"
)

// pacedCycle is a cycle and when it ran, for nextCycleAt.
func (s *Service) pacedCycle(ctx context.Context) (held bool, span cycleSpan) {
	span.start = time.Now()
	held = s.cycle(ctx)
	span.end = time.Now()
	return held, span
}

// cycleSettle is how long the leader waits after a trigger before it
// cycles, so that the events that come together (a job's registration,
// its evaluation, its allocations) make one cycle.
const cycleSettle = 20 * time.Millisecond

// cycleSpan is when one cycle began and ended.
type cycleSpan struct{ start, end time.Time }

// nextCycleAt is when the leader may begin the cycle for a trigger
// noticed at now, the last cycle having run over last: cycleSettle after
// the trigger, gap after the last cycle began (at most one cycle per gap
// however busy Nomad is), and after an idle time as long as the last
// cycle took (cycles take at most half of the leader's time, so a cycle
// that grows with the cluster slows their pace instead of running back
// to back); whichever is latest (docs/design.md, Pacing the leader's
// cycles).
func nextCycleAt(now time.Time, last cycleSpan, gap time.Duration) time.Time {
	at := now.Add(cycleSettle)
	for _, t := range []time.Time{last.start.Add(gap), last.end.Add(last.end.Sub(last.start))} {
		if t.After(at) {
			at = t
		}
	}
	return at
}
