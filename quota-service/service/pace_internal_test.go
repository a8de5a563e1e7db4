package service

import (
	"testing"
	"time"
)

// TestNextCycleAt: the leader's next cycle waits for the latest of the
// settle time after its trigger, the gap after the last cycle began and
// an idle time as long as the last cycle took.
func TestNextCycleAt(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	gap := 75 * time.Millisecond
	for _, tc := range []struct {
		name            string
		now, start, end time.Time
		want            time.Time
	}{
		{"long after a short cycle: the settle time", ms(1000), ms(0), ms(10), ms(1020)},
		{"right after a short cycle: the gap", ms(12), ms(0), ms(10), ms(75)},
		{"right after a long cycle: as long idle", ms(82), ms(0), ms(80), ms(160)},
		{"during the idle time of a long cycle", ms(150), ms(0), ms(80), ms(170)},
		{"a cycle longer than the gap, then idle for its length", ms(300), ms(0), ms(300), ms(600)},
		{"the first trigger (no cycle yet)", ms(5), time.Time{}, time.Time{}, ms(25)},
	} {
		if got := nextCycleAt(tc.now, cycleSpan{start: tc.start, end: tc.end}, gap); !got.Equal(tc.want) {
			t.Errorf("%s: next cycle at +%s, want +%s", tc.name, got.Sub(t0), tc.want.Sub(t0))
		}
	}
}
