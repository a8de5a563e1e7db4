package service

import (
	"testing"
	"time"
)

// TestCyclePace: the leader's next cycle waits for the latest of the
// settle time after its trigger, the gap after the last cycle began and
// an idle time as long as its recent cycles took, so one long cycle
// among short ones delays the next less than cycles that all take long,
// and a cycle that waited on a fault counts as one second at most.
func TestCyclePace(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	d := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	gap := d(75)
	for _, tc := range []struct {
		name   string
		took   []int // the cycles so far, back to back from t0, in ms
		now    int
		wantAt int
	}{
		{"the first trigger (no cycle yet)", nil, 5, 25},
		{"long after a short cycle: the settle time", []int{10}, 1000, 1020},
		{"right after a short cycle: the gap", []int{10}, 12, 75},
		{"right after a first long cycle: as long idle", []int{80}, 82, 160},
		{"cycles that all take long: as long idle", []int{300, 300, 300}, 905, 1200},
		{"one long cycle after short ones: idle for a quarter of it and more", []int{20, 20, 20, 120}, 185, 225},
		{"a first cycle that waited 20 s on a fault: idle 1 s at most", []int{20000}, 20001, 21000},
		{"a cycle that waited 20 s among short ones: idle as if it took 1 s", []int{20, 20, 20000}, 20045, 20040 + 265},
	} {
		var p cyclePace
		at := t0
		for _, took := range tc.took {
			p.note(at, at.Add(d(took)))
			at = at.Add(d(took))
		}
		if got := p.next(ms(tc.now), gap); !got.Equal(ms(tc.wantAt)) {
			t.Errorf("%s: next cycle at +%s, want +%s", tc.name, got.Sub(t0), ms(tc.wantAt).Sub(t0))
		}
	}
}
