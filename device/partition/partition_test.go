package partition

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// gpu builds a healthy, shareable, idle GPU observation with its servers'
// view; holdings and flags are set by small option letters to keep tables
// short.
//
//	"W"  held whole        "S25" 25 shares held
//	"pw" servers publish it whole   "ps" servers publish it as shares
//	"x"  unhealthy         "m"   MIG (not shareable)
//	"G"  hosts a guest of the node-level scheduler
func gpu(order int, flags ...string) GPUObs {
	g := GPUObs{Order: order, Healthy: true, Shareable: true}
	for _, f := range flags {
		switch {
		case f == "W":
			g.WholeHeld = true
		case strings.HasPrefix(f, "S"):
			fmt.Sscanf(f, "S%d", &g.ShareUnits)
		case f == "pw":
			g.ServerWhole = true
		case f == "ps":
			g.ServerShare = true
		case f == "x":
			g.Healthy = false
		case f == "m":
			g.Shareable = false
		case f == "G":
			g.Guests++
		default:
			panic("unknown flag " + f)
		}
	}
	return g
}

type step struct {
	at    time.Duration // since t0
	blind bool
	// incomplete: the holdings may leave allocations out.
	incomplete bool
	gpus       map[string]GPUObs
	// demand waiting for the node.
	demand []Demand
	// want maps UUID to the published family: "whole", "share" or "none".
	want map[string]string
	// index is the node modify index of the servers' view; applied the
	// observation's Applied.
	index   uint64
	applied map[Mode]uint64
}

func pubString(p Publication) string {
	if p.Family == Unknown {
		return "none"
	}
	return p.Family.String()
}

// run feeds the steps and checks publications after each.
func run(t *testing.T, pol Policy, steps []step) *Machine {
	t.Helper()
	m := New(pol)
	for i, st := range steps {
		o := Observation{At: t0.Add(st.at), Blind: st.blind, GPUs: st.gpus, Demand: st.demand, NodeIndex: st.index, Applied: st.applied}
		if st.incomplete {
			o.Incomplete = "token cannot read namespace secret"
		}
		ev := m.Step(o)
		got := map[string]string{}
		for u, p := range m.Publications() {
			got[u] = pubString(p)
			checkReason(t, p)
		}
		for u, w := range st.want {
			if got[u] != w {
				t.Fatalf("step %d (t=%v): GPU %s published %q, want %q\nall: %v\nevents: %v", i, st.at, u, got[u], w, got, ev)
			}
		}
	}
	return m
}

// checkReason fails the test when a GPU published nowhere says why in
// words the quota service would not read as the plugin means them: every
// such reason is a withdrawal (vocab.IsWithdrawn: the GPU is capacity in
// transit) or BlindReason.
func checkReason(t *testing.T, p Publication) {
	t.Helper()
	if p.Family == Unknown && !vocab.IsWithdrawn(p.Reason) && !strings.HasPrefix(p.Reason, BlindReason) {
		t.Fatalf("GPU published nowhere because %q: neither a vocab withdrawal nor BlindReason", p.Reason)
	}
}

// TestWithdrawalsSpeakTheContract: each state in which the plugin
// withdraws a GPU only to move it or to learn where it belongs is
// described as a withdrawal the quota service recognises
// (vocab.IsWithdrawn), and the blind state is not one.
func TestWithdrawalsSpeakTheContract(t *testing.T) {
	m := New(pol)
	if r := m.publication(&gpuState{}).Reason; !vocab.IsWithdrawn(r) {
		t.Errorf("before the first observation: %q is not a withdrawal", r)
	}
	m.seen = true
	for name, s := range map[string]gpuState{
		"no mode yet":         {Mode: Unknown, Phase: phasePublished},
		"settling first":      {Mode: Unknown, Phase: phaseSettling, Target: Whole},
		"held both ways":      {Mode: Whole, Conflict: true},
		"switch, withdrawing": {Mode: Whole, Phase: phaseWithdrawing, Target: Share},
		"switch, settling":    {Mode: Share, Phase: phaseSettling, Target: Whole},
	} {
		if p := m.publication(&s); p.Family != Unknown || !vocab.IsWithdrawn(p.Reason) {
			t.Errorf("%s: published %s because %q, want a withdrawal vocab.IsWithdrawn recognises", name, p.Family, p.Reason)
		}
	}
	m.incomplete = "token cannot read namespace secret"
	if p := m.publication(&gpuState{Mode: Whole, Phase: phaseWithdrawing, Target: Share}); vocab.IsWithdrawn(p.Reason) || !strings.HasPrefix(p.Reason, BlindReason) {
		t.Errorf("blind: %q, want BlindReason, no withdrawal", p.Reason)
	}
}

var pol = Policy{MinIdleShareGPUs: 1, ShareHeadroom: 50, SettlePeriod: 10 * time.Second}

func TestFirstAssignment(t *testing.T) {
	tests := []struct {
		name string
		pol  Policy
		gpus map[string]GPUObs
		want map[string]string
	}{
		{
			name: "fresh node: highest GPU is the share landing place",
			pol:  pol,
			gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1), "c": gpu(2), "d": gpu(3)},
			want: map[string]string{"a": "whole", "b": "whole", "c": "whole", "d": "share"},
		},
		{
			name: "two landing places",
			pol:  Policy{MinIdleShareGPUs: 2, SettlePeriod: time.Second},
			gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1), "c": gpu(2)},
			want: map[string]string{"a": "whole", "b": "share", "c": "share"},
		},
		{
			name: "no landing place wanted",
			pol:  Policy{MinIdleShareGPUs: 0},
			gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1)},
			want: map[string]string{"a": "whole", "b": "whole"},
		},
		{
			name: "holdings found at start decide; share tenants lacking room keep a landing place",
			pol:  pol,
			gpus: map[string]GPUObs{"a": gpu(0, "S60"), "b": gpu(1, "W"), "c": gpu(2), "d": gpu(3)},
			want: map[string]string{"a": "share", "b": "whole", "c": "whole", "d": "share"},
		},
		{
			name: "share GPU with room: no idle share GPU kept",
			pol:  pol,
			gpus: map[string]GPUObs{"a": gpu(0, "S20"), "b": gpu(1), "c": gpu(2)},
			want: map[string]string{"a": "share", "b": "whole", "c": "whole"},
		},
		{
			name: "what the servers publish is adopted after a plugin restart",
			pol:  pol,
			gpus: map[string]GPUObs{"a": gpu(0, "ps"), "b": gpu(1, "pw"), "c": gpu(2, "pw")},
			want: map[string]string{"a": "share", "b": "whole", "c": "whole"},
		},
		{
			name: "unhealthy and MIG GPUs are whole and never the landing place",
			pol:  pol,
			gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1, "x"), "c": gpu(2, "m")},
			want: map[string]string{"a": "share", "b": "whole", "c": "whole"},
		},
		{
			name: "GPU published in both families is withdrawn first",
			pol:  pol,
			gpus: map[string]GPUObs{"a": gpu(0, "pw", "ps"), "b": gpu(1, "pw")},
			want: map[string]string{"a": "none", "b": "whole"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Idle GPUs published nowhere settle before their first
			// publication; GPUs in use are published at once.
			run(t, tt.pol, []step{{gpus: tt.gpus}, {at: tt.pol.SettlePeriod, gpus: tt.gpus, want: tt.want}})
		})
	}
}

func TestNothingPublishedUntilNomadIsRead(t *testing.T) {
	run(t, pol, []step{
		{blind: true, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1)}, want: map[string]string{"a": "none", "b": "none"}},
		{at: time.Second, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1)}, want: map[string]string{"a": "none", "b": "none"}},
		{at: 10 * time.Second, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1)}, want: map[string]string{"a": "none", "b": "none"}},
		{at: 11 * time.Second, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1)}, want: map[string]string{"a": "whole", "b": "share"}},
	})
}

// TestIncompleteHoldingsAtStart: a plugin that starts with a token that
// cannot see every allocation keeps what the servers publish, and
// publishes nothing anew, however long it waits; once the holdings are
// complete, the rest settle and are published.
func TestIncompleteHoldingsAtStart(t *testing.T) {
	type m = map[string]GPUObs
	type w = map[string]string
	s := time.Second
	run(t, pol, []step{
		{at: 0, incomplete: true, gpus: m{"a": gpu(0, "pw"), "b": gpu(1), "c": gpu(2, "ps")}, want: w{"a": "whole", "b": "none", "c": "share"}},
		{at: 60 * s, incomplete: true, gpus: m{"a": gpu(0, "pw"), "b": gpu(1), "c": gpu(2, "ps")}, want: w{"a": "whole", "b": "none", "c": "share"}},
		// Holdings it can see still win.
		{at: 61 * s, incomplete: true, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "S10"), "c": gpu(2, "ps")}, want: w{"a": "whole", "b": "share", "c": "share"}},
		{at: 62 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps"), "c": gpu(2, "ps")}, want: w{"a": "whole", "b": "none", "c": "share"}},
	})
	p := New(pol)
	p.Step(Observation{At: t0, Incomplete: "token cannot read namespace secret", GPUs: m{"a": gpu(0)}})
	if r := p.Publications()["a"].Reason; !strings.Contains(r, "cannot see every allocation") || !strings.Contains(r, "namespace secret") {
		t.Errorf("reason of a GPU held back while holdings are incomplete: %q", r)
	}
}

func TestInFlightPlacementAfterPluginRestart(t *testing.T) {
	// The plugin restarts and publishes nothing; a whole placement planned
	// against its previous publication lands while GPU a settles.
	run(t, pol, []step{
		{at: 0, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1)}, want: map[string]string{"a": "none", "b": "none"}},
		{at: 5 * time.Second, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1, "W")}, want: map[string]string{"a": "none", "b": "whole"}},
		{at: 10 * time.Second, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1, "W", "pw")}, want: map[string]string{"a": "share", "b": "whole"}},
	})
}

func TestSwitch(t *testing.T) {
	type m = map[string]GPUObs
	type w = map[string]string
	s := time.Second
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "whole to share when the landing place fills: withdraw, servers see it, settle, publish",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
				// A job takes 70 shares of b: it lacks room, a is withdrawn.
				{at: 1 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none", "b": "share"}},
				// Servers still publish a whole: keep waiting.
				{at: 2 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				// Servers see it withdrawn at 3s: settle until 13s.
				{at: 3 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 12 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 13 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "share", "b": "share"}},
			},
		},
		{
			name: "an idle GPU hosting a guest is switched last",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1), "c": gpu(2)}, want: w{"a": "whole", "b": "whole", "c": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw", "G"), "b": gpu(1, "pw"), "c": gpu(2, "ps", "S70")}, want: w{"a": "whole", "b": "none", "c": "share"}},
			},
		},
		{
			name: "a switch of a GPU hosting a guest completes only once the guest is gone",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw", "G"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 3 * s, gpus: m{"a": gpu(0, "G"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 13 * s, gpus: m{"a": gpu(0, "G"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 20 * s, gpus: m{"a": gpu(0, "G"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 21 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "share"}},
			},
		},
		{
			name: "a whole placement in flight lands during the switch: switch aborted, stays whole",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 3 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 5 * s, gpus: m{"a": gpu(0, "W"), "b": gpu(1, "ps", "S70")}, want: w{"a": "whole"}},
				// Freed later: the landing place is needed again, so the switch restarts.
				{at: 30 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
			},
		},
		{
			name: "share tenants keep a GPU shared until the last ends, then it goes whole",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
				// b fills, a is taken whole too: no idle GPU to switch.
				{at: 1 * s, gpus: m{"a": gpu(0, "pw", "W"), "b": gpu(1, "ps", "S90")}, want: w{"a": "whole", "b": "share"}},
				{at: 2 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S90")}, want: w{"a": "none", "b": "share"}},
				{at: 3 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S90")}},
				{at: 13 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S90")}, want: w{"a": "share", "b": "share"}},
				// b's tenant ends: two idle share GPUs, one goes whole (the lowest).
				{at: 14 * s, gpus: m{"a": gpu(0, "ps"), "b": gpu(1, "ps")}, want: w{"a": "none", "b": "share"}},
				{at: 15 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps")}, want: w{"a": "none"}},
				{at: 25 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps")}, want: w{"a": "whole", "b": "share"}},
			},
		},
		{
			name: "a share placement in flight lands on a GPU leaving share mode: aborted",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "ps"), "b": gpu(1, "ps")}, want: w{"a": "none", "b": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps")}, want: w{"a": "none"}},
				{at: 2 * s, gpus: m{"a": gpu(0, "S60"), "b": gpu(1, "ps")}, want: w{"a": "share", "b": "share"}},
				// Its tenant leaves room: the idle landing place is not needed.
				{at: 3 * s, gpus: m{"a": gpu(0, "S5", "ps"), "b": gpu(1, "ps")}, want: w{"a": "share", "b": "none"}},
			},
		},
		{
			name: "blind: no switch starts or completes; the last decisions stay",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 2 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 20 * s, blind: true, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "none", "b": "share"}},
				{at: 30 * s, blind: true, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "none", "b": "share"}},
				{at: 31 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "share", "b": "share"}},
			},
		},
		{
			name: "incomplete holdings: no switch starts or completes; a GPU hidden allocations may hold stays where it is",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
				// b lacks room, but a may be held by an allocation the
				// token cannot see: it stays whole.
				{at: 1 * s, incomplete: true, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S70")}, want: w{"a": "whole", "b": "share"}},
				{at: 2 * s, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 3 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				// A switch in progress waits while holdings are incomplete...
				{at: 20 * s, incomplete: true, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "none", "b": "share"}},
				// ...and completes once it is complete again.
				{at: 21 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "share", "b": "share"}},
			},
		},
		{
			name: "settling restarts when the servers publish the GPU again",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "ps"), "b": gpu(1, "ps")}, want: w{"a": "none"}},
				{at: 1 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps")}},
				{at: 5 * s, gpus: m{"a": gpu(0, "ps"), "b": gpu(1, "ps")}},
				{at: 12 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps")}, want: w{"a": "none"}},
				{at: 21 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps")}, want: w{"a": "none"}},
				{at: 22 * s, gpus: m{"a": gpu(0), "b": gpu(1, "ps")}, want: w{"a": "whole"}},
			},
		},
		{
			name: "held both whole and shared: withdrawn until one side ends",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0, "W", "S10"), "b": gpu(1)}, want: w{"a": "none", "b": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "S10"), "b": gpu(1, "ps")}, want: w{"a": "share"}},
			},
		},
		{
			name: "unhealthy idle GPU is never switched",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw", "x"), "b": gpu(1, "ps", "S90")}, want: w{"a": "whole"}},
			},
		},
		{
			name: "vanished GPU is forgotten",
			steps: []step{
				{at: 0, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
				{at: 1 * s, gpus: m{"a": gpu(0, "pw")}, want: w{"b": ""}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Boot: idle GPUs settle before their first publication; the
			// scenario starts once they are published.
			steps := []step{{gpus: tt.steps[0].gpus}}
			for _, st := range tt.steps {
				st.at += pol.SettlePeriod
				steps = append(steps, st)
			}
			run(t, pol, steps)
		})
	}
}

// TestInvariants drives the machine with pseudo-random holdings and waiting
// demand and checks the safety rules after every step.
// TestSettleEndsWhenPlansAreApplied: a settling GPU is published in its
// new family as soon as an observation proves every placement planned
// before the servers saw it withdrawn applied for the family it leaves
// (both, for a GPU never published by this plugin), else after the settle
// period; usage seen still wins.
func TestSettleEndsWhenPlansAreApplied(t *testing.T) {
	type m = map[string]GPUObs
	type w = map[string]string
	type a = map[Mode]uint64
	s := time.Second
	// The landing place b fills: a is withdrawn (whole -> share), and the
	// servers see it withdrawn at node index 40, at 3s.
	fill := []step{
		{at: 0, index: 10, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "whole", "b": "share"}},
		{at: 1 * s, index: 20, gpus: m{"a": gpu(0, "pw"), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
		{at: 3 * s, index: 40, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, applied: a{Whole: 40, Share: 40}, want: w{"a": "none"}},
	}
	tests := []struct {
		name string
		next []step
	}{
		{"proof for the family it leaves: published at once",
			[]step{{at: 3*s + 100*time.Millisecond, index: 40, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, applied: a{Whole: 40}, want: w{"a": "share"}}}},
		{"proof for a later index: published",
			[]step{{at: 4 * s, index: 41, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, applied: a{Whole: 41}, want: w{"a": "share"}}}},
		{"proof for an older index: waits for the settle period",
			[]step{
				{at: 4 * s, index: 40, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, applied: a{Whole: 39, Share: 40}, want: w{"a": "none"}},
				{at: 13 * s, index: 40, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, applied: a{Whole: 39}, want: w{"a": "share"}},
			}},
		{"proof for the other family only: waits",
			[]step{{at: 4 * s, index: 40, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, applied: a{Share: 40}, want: w{"a": "none"}}}},
		{"no proof: the settle period",
			[]step{
				{at: 12 * s, index: 40, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "none"}},
				{at: 13 * s, index: 40, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, want: w{"a": "share"}},
			}},
		{"a placement planned before lands with the proof: usage wins",
			[]step{{at: 4 * s, index: 40, gpus: m{"a": gpu(0, "W"), "b": gpu(1, "ps", "S70")}, applied: a{Whole: 40}, want: w{"a": "whole"}}}},
		{"a guest still there: waits for it",
			[]step{
				{at: 4 * s, index: 40, gpus: m{"a": gpu(0, "G"), "b": gpu(1, "ps", "S70")}, applied: a{Whole: 40}, want: w{"a": "none"}},
				{at: 5 * s, index: 40, gpus: m{"a": gpu(0), "b": gpu(1, "ps", "S70")}, applied: a{Whole: 40}, want: w{"a": "share"}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Boot: idle GPUs settle before their first publication; the
			// scenario starts once they are published.
			steps := []step{{index: 10, gpus: fill[0].gpus}}
			for _, st := range append(append([]step{}, fill...), tt.next...) {
				st.at += pol.SettlePeriod
				steps = append(steps, st)
			}
			run(t, pol, steps)
		})
	}
	t.Run("never published by this plugin: proof for both families", func(t *testing.T) {
		run(t, pol, []step{
			{at: 0, index: 10, gpus: m{"a": gpu(0), "b": gpu(1)}, want: w{"a": "none", "b": "none"}},
			{at: 1 * s, index: 10, gpus: m{"a": gpu(0), "b": gpu(1)}, applied: a{Whole: 10}, want: w{"a": "none", "b": "none"}},
			{at: 2 * s, index: 10, gpus: m{"a": gpu(0), "b": gpu(1)}, applied: a{Whole: 10, Share: 10}, want: w{"a": "whole", "b": "share"}},
		})
	})
}

func TestInvariants(t *testing.T) {
	uuids := []string{"a", "b", "c", "d"}
	for seed := uint64(1); seed <= 200; seed++ {
		r := seed
		rnd := func(n int) int { r = r*6364136223846793005 + 1442695040888963407; return int((r >> 33) % uint64(n)) }
		p := pol
		p.DemandHold = time.Duration(rnd(3)) * 3 * time.Second
		m := New(p)
		pub := map[string]Publication{}
		for i := 0; i < 60; i++ {
			o := Observation{At: t0.Add(time.Duration(i) * 3 * time.Second), Blind: rnd(10) == 0, GPUs: map[string]GPUObs{}, NodeIndex: uint64(10 * (i + 1))}
			if rnd(3) == 0 {
				// Placements planned before (about) now are proven applied.
				o.Applied = map[Mode]uint64{Whole: o.NodeIndex - uint64(10*rnd(2)), Share: o.NodeIndex - uint64(10*rnd(2))}
			}
			if rnd(8) == 0 {
				o.Incomplete = "hidden"
			}
			for k, n := 0, rnd(4); k < n; k++ {
				d := Demand{Key: fmt.Sprint("d", rnd(6)), Since: t0.Add(time.Duration(rnd(100)) * time.Second)}
				if rnd(2) == 0 {
					d.Whole = 1 + rnd(3)
				} else {
					d.Shares = 1 + rnd(100)
				}
				o.Demand = append(o.Demand, d)
			}
			for j, u := range uuids {
				g := gpu(j)
				// The servers see last step's publication.
				g.ServerWhole = pub[u].Family == Whole
				g.ServerShare = pub[u].Family == Share
				// Holdings may only appear in the family published (or a race).
				switch pub[u].Family {
				case Whole:
					g.WholeHeld = rnd(3) == 0
				case Share:
					g.ShareUnits = rnd(3) * 40
				}
				o.GPUs[u] = g
			}
			m.Step(o)
			next := m.Publications()
			for _, u := range uuids {
				g, p := o.GPUs[u], next[u]
				if o.Blind {
					if p.Family != Unknown && pub[u].Family != p.Family {
						t.Fatalf("seed %d step %d: %s published %v while blind (was %v)", seed, i, u, p.Family, pub[u].Family)
					}
					continue
				}
				// Incomplete holdings publish nothing anew unless the
				// holdings it sees force it.
				if o.Incomplete != "" && p.Family != Unknown && p.Family != pub[u].Family &&
					!(g.WholeHeld && p.Family == Whole || g.ShareUnits > 0 && p.Family == Share) {
					t.Fatalf("seed %d step %d: %s published %v anew while holdings are incomplete (was %v)", seed, i, u, p.Family, pub[u].Family)
				}
				if g.WholeHeld && p.Family == Share || g.ShareUnits > 0 && p.Family == Whole {
					t.Fatalf("seed %d step %d: %s in use %+v but published %v", seed, i, u, g, p.Family)
				}
				// A switch never goes straight from one family to the other.
				if pub[u].Family != Unknown && p.Family != Unknown && pub[u].Family != p.Family {
					t.Fatalf("seed %d step %d: %s switched %v -> %v without withdrawal", seed, i, u, pub[u].Family, p.Family)
				}
			}
			pub = next
		}
	}
}

func TestEventsAreDeterministic(t *testing.T) {
	obs := Observation{At: t0, GPUs: map[string]GPUObs{"a": gpu(0), "b": gpu(1), "c": gpu(2)}}
	var first []string
	for i := 0; i < 20; i++ {
		m := New(pol)
		var got []string
		for _, e := range m.Step(obs) {
			got = append(got, e.UUID+": "+e.Msg)
		}
		sort.Strings(got)
		if i == 0 {
			first = got
		} else if fmt.Sprint(got) != fmt.Sprint(first) {
			t.Fatalf("run %d: %v, want %v", i, got, first)
		}
	}
}

// TestExhaustiveTwoGPUs enumerates every sequence of three observations of
// a two-GPU node (each GPU idle, held whole, or holding 30 or 70 shares,
// in any family, races included; Nomad readable or not) after boot, with
// the servers seeing the previous publication, and checks the safety rules
// after every step.
func TestExhaustiveTwoGPUs(t *testing.T) {
	holdings := []string{"", "W", "S30", "S70"}
	const steps = 3
	choices := len(holdings) * len(holdings) * 2
	total := 1
	for i := 0; i < steps; i++ {
		total *= choices
	}
	for seq := 0; seq < total; seq++ {
		m := New(pol)
		boot := map[string]GPUObs{"a": gpu(0), "b": gpu(1)}
		m.Step(Observation{At: t0, GPUs: boot})
		m.Step(Observation{At: t0.Add(pol.SettlePeriod), GPUs: boot})
		pub := m.Publications()
		code := seq
		var trace []string
		for i := 0; i < steps; i++ {
			c := code % choices
			code /= choices
			ua, ub, blind := holdings[c%4], holdings[c/4%4], c/16 == 1
			o := Observation{At: t0.Add(time.Duration(i+2) * pol.SettlePeriod), Blind: blind, GPUs: map[string]GPUObs{}}
			for u, use := range map[string]string{"a": ua, "b": ub} {
				flags := []string{}
				if use != "" {
					flags = append(flags, use)
				}
				switch pub[u].Family {
				case Whole:
					flags = append(flags, "pw")
				case Share:
					flags = append(flags, "ps")
				}
				order := 0
				if u == "b" {
					order = 1
				}
				o.GPUs[u] = gpu(order, flags...)
			}
			trace = append(trace, fmt.Sprintf("a=%q b=%q blind=%v", ua, ub, blind))
			m.Step(o)
			next := m.Publications()
			for _, u := range []string{"a", "b"} {
				g, p, was := o.GPUs[u], next[u].Family, pub[u].Family
				if blind {
					if p != Unknown && p != was {
						t.Fatalf("%v: %s published %v while blind (was %v)", trace, u, p, was)
					}
					continue
				}
				if g.WholeHeld && p == Share || g.ShareUnits > 0 && p == Whole {
					t.Fatalf("%v: %s in use %+v but published %v", trace, u, g, p)
				}
				forced := g.WholeHeld && p == Whole || g.ShareUnits > 0 && p == Share
				if was != Unknown && p != Unknown && was != p && !forced {
					t.Fatalf("%v: %s switched %v -> %v without withdrawal or holdings", trace, u, was, p)
				}
				if g.idle() && was == Unknown && p != Unknown && m.gpus[u].Phase == phasePublished {
					// An idle GPU published after being withdrawn must have
					// settled: the servers saw it withdrawn a period ago.
					if st := m.gpus[u]; st.Since.Add(pol.SettlePeriod).After(o.At) {
						t.Fatalf("%v: %s published before settling", trace, u)
					}
				}
			}
			pub = next
		}
	}
}

func TestLeavingWholeMarksAGPUWhoseGuestsMustGo(t *testing.T) {
	s := time.Second
	// Boot (the GPUs settle before their first publication), then the
	// landing place fills and the guest's host is withdrawn for shares.
	m := run(t, pol, []step{
		{at: 0, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1)}},
		{at: pol.SettlePeriod, gpus: map[string]GPUObs{"a": gpu(0), "b": gpu(1)}, want: map[string]string{"a": "whole", "b": "share"}},
		{at: pol.SettlePeriod + 1*s, gpus: map[string]GPUObs{"a": gpu(0, "pw", "G"), "b": gpu(1, "ps", "S70")}, want: map[string]string{"a": "none"}},
	})
	if pub := m.Publications()["a"]; !pub.LeavingWhole {
		t.Errorf("a withdrawn for shares: %+v, want LeavingWhole", pub)
	}
	if pub := m.Publications()["b"]; pub.LeavingWhole {
		t.Errorf("b: %+v", pub)
	}
	fresh := New(pol)
	fresh.Step(Observation{At: t0, Blind: true, GPUs: map[string]GPUObs{"a": gpu(0)}})
	if pub := fresh.Publications()["a"]; pub.LeavingWhole {
		t.Errorf("a GPU not published yet after a start is not leaving: %+v", pub)
	}
}

// TestSettlingAsksForFreshReads: the machine says it needs fresh
// observations from the start until every GPU is published in a family,
// again while a switch is under way, and not once it is done.
func TestSettlingAsksForFreshReads(t *testing.T) {
	m := New(pol)
	if !m.Settling() {
		t.Fatal("nothing observed yet: want Settling")
	}
	idle := map[string]GPUObs{"a": gpu(0), "b": gpu(1)}
	m.Step(Observation{At: t0, GPUs: idle})
	if !m.Settling() {
		t.Fatal("first publication settling: want Settling")
	}
	m.Step(Observation{At: t0.Add(pol.SettlePeriod), GPUs: idle})
	if m.Settling() {
		t.Fatalf("every GPU published (%v): want not Settling", m.Publications())
	}
	// A whole request takes the share landing place: it is withdrawn.
	m.Step(Observation{At: t0.Add(2 * pol.SettlePeriod), GPUs: map[string]GPUObs{"a": gpu(0, "W", "pw"), "b": gpu(1, "ps")},
		Demand: []Demand{{Key: "w", Since: t0, Whole: 1}}})
	if !m.Settling() {
		t.Fatalf("a switch under way (%v): want Settling", m.Publications())
	}
}
