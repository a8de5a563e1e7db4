package partition

import (
	"fmt"
	"testing"
	"time"
)

// wd is whole demand for n GPUs, waiting since t0+since; sd share demand.
func wd(key string, since time.Duration, n int) Demand {
	return Demand{Key: key, Since: t0.Add(since), Whole: n}
}

func sd(key string, since time.Duration, n int) Demand {
	return Demand{Key: key, Since: t0.Add(since), Shares: n}
}

var dpol = Policy{MinIdleShareGPUs: 1, ShareHeadroom: 50, SettlePeriod: 10 * time.Second, DemandHold: 5 * time.Second}

// TestDemand feeds demand shapes after boot (a, b, c whole and d the share
// landing place) and checks the switches; the servers' view is what was
// published before, as the steps spell out.
func TestDemand(t *testing.T) {
	type m = map[string]GPUObs
	type w = map[string]string
	type ds = []Demand
	s := time.Second
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "a 4th whole job waits; the idle share landing place no share demand needs goes whole",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3, "ps")},
					demand: ds{wd("j4", 0, 1)}, want: w{"d": "none"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3)},
					demand: ds{wd("j4", 0, 1)}, want: w{"d": "none"}},
				{at: 11 * s, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3)},
					demand: ds{wd("j4", 0, 1)}, want: w{"d": "whole"}},
				// Placed: the demand is gone, d is held; nothing moves.
				{at: 20 * s, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3, "pw", "W")},
					want: w{"a": "whole", "b": "whole", "c": "whole", "d": "whole"}},
			},
		},
		{
			name: "share GPU with headroom but not enough for 60: an idle whole GPU goes share",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "pw"), "d": gpu(3, "ps", "S50")},
					want: w{"a": "whole", "b": "whole", "c": "whole", "d": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "pw"), "d": gpu(3, "ps", "S50")},
					demand: ds{sd("s60", s, 60)}, want: w{"a": "whole", "b": "whole", "c": "none", "d": "share"}},
				{at: 2 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2), "d": gpu(3, "ps", "S50")},
					demand: ds{sd("s60", s, 60)}, want: w{"c": "none"}},
				{at: 12 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2), "d": gpu(3, "ps", "S50")},
					demand: ds{sd("s60", s, 60)}, want: w{"a": "whole", "b": "whole", "c": "share", "d": "share"}},
				{at: 20 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "ps", "S60"), "d": gpu(3, "ps", "S50")},
					want: w{"a": "whole", "b": "whole", "c": "share", "d": "share"}},
			},
		},
		{
			name: "share demand that fits an in-use share GPU's free shares switches nothing",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "pw"), "d": gpu(3, "ps", "S30")},
					demand: ds{sd("s60", 0, 60)}, want: w{"a": "whole", "b": "whole", "c": "whole", "d": "share"}},
			},
		},
		{
			name: "share demand that fits the idle landing place switches nothing",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "pw"), "d": gpu(3, "ps")},
					demand: ds{sd("s60", 0, 60), sd("s30", 0, 30)}, want: w{"a": "whole", "b": "whole", "c": "whole", "d": "share"}},
			},
		},
		{
			name: "two 60s that fit nowhere open two GPUs, highest first",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "pw"), "d": gpu(3, "ps", "S50")},
					demand: ds{sd("x", 0, 60), sd("y", 0, 60)}, want: w{"a": "whole", "b": "none", "c": "none", "d": "share"}},
			},
		},
		{
			name: "whole demand that needs more GPUs than are idle switches nothing",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw"), "d": gpu(3, "ps")},
					demand: ds{wd("j", 0, 3)}, want: w{"c": "whole", "d": "share"}},
				// Two GPUs wanted, two idle: the landing place goes whole.
				{at: 1 * s, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw"), "d": gpu(3, "ps")},
					demand: ds{wd("j", 0, 2)}, want: w{"c": "whole", "d": "none"}},
			},
		},
		{
			name: "contention for the landing place: the older whole demand wins",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "ps", "S80"), "d": gpu(3, "ps")},
					demand: ds{wd("whole", 0, 1), sd("share", s, 30)}, want: w{"d": "none"}},
			},
		},
		{
			name: "contention for the landing place: the older share demand keeps it",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "ps", "S80"), "d": gpu(3, "ps")},
					demand: ds{wd("whole", s, 1), sd("share", 0, 30)}, want: w{"d": "share"}},
			},
		},
		{
			name: "contention for an idle whole GPU: the older whole demand keeps it",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw"), "d": gpu(3, "ps", "S80")},
					demand: ds{wd("whole", 0, 1), sd("share", s, 30)}, want: w{"c": "whole", "d": "share"}},
				// The whole job lands; now the share demand gets it... once it is idle.
				{at: 1 * s, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3, "ps", "S80")},
					demand: ds{sd("share", s, 30)}, want: w{"c": "whole", "d": "share"}},
				// a is freed: the placed whole demand is still held (it may
				// only be between two evaluations), so a moves only once
				// the hold ends.
				{at: 2 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3, "ps", "S80")},
					demand: ds{sd("share", s, 30)}, want: w{"a": "whole"}},
				{at: 6 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3, "ps", "S80")},
					demand: ds{sd("share", s, 30)}, want: w{"a": "none"}},
			},
		},
		{
			name: "demand that vanishes briefly is held: the GPU switched for it stays",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "pw"), "d": gpu(3, "ps", "S50")},
					demand: ds{sd("s60", 0, 60)}, want: w{"c": "none"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2), "d": gpu(3, "ps", "S50")},
					demand: ds{sd("s60", 0, 60)}},
				{at: 11 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2), "d": gpu(3, "ps", "S50")},
					demand: ds{sd("s60", 0, 60)}, want: w{"c": "share"}},
				// Not observed for a moment: held, c stays.
				{at: 12 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "ps"), "d": gpu(3, "ps", "S50")},
					want: w{"c": "share"}},
				{at: 16 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "ps"), "d": gpu(3, "ps", "S50")},
					want: w{"c": "share"}},
				{at: 17 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "ps"), "d": gpu(3, "ps", "S50")},
					demand: ds{sd("s60", 0, 60)}, want: w{"c": "share"}},
				{at: 22 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "ps"), "d": gpu(3, "ps", "S50")},
					want: w{"c": "share"}},
				// Gone for longer than the hold: back to the plain policy (d has room).
				{at: 23 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "pw"), "c": gpu(2, "ps"), "d": gpu(3, "ps", "S50")},
					want: w{"c": "none"}},
			},
		},
		{
			name: "held demand never starts a switch",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3, "ps", "W")},
					demand: ds{wd("j", 0, 1)}},
				// d freed in share mode (a race) after the demand vanished.
				{at: 1 * s, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3, "pw")},
					want: w{"d": "whole"}},
			},
		},
		{
			name: "blind: demand switches nothing",
			steps: []step{
				{at: 0, blind: true, gpus: m{"a": gpu(0), "b": gpu(1), "c": gpu(2), "d": gpu(3)},
					demand: ds{wd("j", 0, 4)}, want: w{"a": "whole", "b": "whole", "c": "whole", "d": "share"}},
			},
		},
		{
			name: "MIG GPUs serve whole demand first",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "pw", "m"), "b": gpu(1, "pw", "W"), "c": gpu(2, "pw", "W"), "d": gpu(3, "ps")},
					demand: ds{wd("j", 0, 1)}, want: w{"a": "whole", "d": "share"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			boot := map[string]GPUObs{"a": gpu(0), "b": gpu(1), "c": gpu(2), "d": gpu(3)}
			steps := []step{{gpus: boot}, {at: dpol.SettlePeriod, gpus: boot,
				want: map[string]string{"a": "whole", "b": "whole", "c": "whole", "d": "share"}}}
			for _, st := range tt.steps {
				st.at += 2 * dpol.SettlePeriod
				steps = append(steps, st)
			}
			run(t, dpol, steps)
		})
	}
}

// TestDemandNoFlapping simulates a node whose servers see each publication
// one step later, with demand that flickers (an evaluation being retried
// is not blocked for a moment) for many steps, and checks that no GPU is
// withdrawn more than once.
func TestDemandNoFlapping(t *testing.T) {
	tests := []struct {
		name   string
		held   map[string]string // fixed holding flag per GPU
		demand []Demand
	}{
		{"whole demand, landing place", map[string]string{"a": "W", "b": "W", "c": "W"}, []Demand{wd("j", 0, 1)}},
		{"share demand over the headroom", map[string]string{"d": "S50"}, []Demand{sd("s", 0, 60)}},
		{"competing demand", map[string]string{"a": "W", "c": "S80"}, []Demand{wd("w", 0, 1), sd("s", time.Second, 30), sd("t", 2*time.Second, 90)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := New(dpol)
			pub := map[string]Publication{}
			withdrawals := map[string]int{}
			for i := 0; i < 200; i++ {
				at := t0.Add(time.Duration(i) * time.Second)
				o := Observation{At: at, GPUs: map[string]GPUObs{}}
				// Demand is seen two steps in three after boot.
				if i > 15 && i%3 != 0 {
					o.Demand = tt.demand
				}
				for j, u := range []string{"a", "b", "c", "d"} {
					var flags []string
					// Held only once the family it needs is published.
					if f := tt.held[u]; f != "" && (f == "W" && pub[u].Family == Whole || f != "W" && pub[u].Family == Share) {
						flags = append(flags, f)
					}
					g := gpu(j, flags...)
					g.ServerWhole, g.ServerShare = pub[u].Family == Whole, pub[u].Family == Share
					o.GPUs[u] = g
				}
				m.Step(o)
				next := m.Publications()
				for u, p := range next {
					if p.Family == Unknown && pub[u].Family != Unknown {
						withdrawals[u]++
					}
				}
				pub = next
			}
			for u, n := range withdrawals {
				if n > 1 {
					t.Errorf("GPU %s withdrawn %d times", u, n)
				}
			}
			t.Logf("withdrawals %v, final %v", withdrawals, fmt.Sprint(pubs(pub)))
		})
	}
}

func pubs(p map[string]Publication) map[string]string {
	out := map[string]string{}
	for u, x := range p {
		out[u] = pubString(x)
	}
	return out
}
