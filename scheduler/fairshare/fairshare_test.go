package fairshare

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

func TestDeserved(t *testing.T) {
	type proj struct {
		name      string
		g, limit  cluster.Shares
		hasLimit  bool
		priority  int
		weight    int64
		demand    cluster.Shares
		wantShare cluster.Shares
	}
	tests := []struct {
		name     string
		capacity cluster.Shares
		projects []proj
	}{
		{"guarantees then the rest split evenly", 400, []proj{
			{name: "a", g: 100, demand: 400, wantShare: 200},
			{name: "b", g: 100, demand: 400, wantShare: 200},
		}},
		{"demand below guarantee gives the rest away", 400, []proj{
			{name: "a", g: 200, demand: 50, wantShare: 50},
			{name: "b", g: 100, demand: 1000, wantShare: 350},
		}},
		{"weights split the over-quota part", 400, []proj{
			{name: "a", weight: 3, demand: 1000, wantShare: 300},
			{name: "b", weight: 1, demand: 1000, wantShare: 100},
		}},
		{"higher tier first, lower gets what is left", 400, []proj{
			{name: "hi", g: 100, priority: 10, demand: 300, wantShare: 300},
			{name: "lo", g: 50, priority: 1, demand: 1000, wantShare: 100},
		}},
		{"limit caps and the leftover flows on", 400, []proj{
			{name: "a", limit: 120, hasLimit: true, demand: 1000, wantShare: 120},
			{name: "b", demand: 1000, wantShare: 280},
		}},
		{"water-filling inside a tier", 600, []proj{
			{name: "a", demand: 50, wantShare: 50},
			{name: "b", demand: 1000, wantShare: 275},
			{name: "c", demand: 1000, wantShare: 275},
		}},
		{"rounding never exceeds capacity", 100, []proj{
			{name: "a", demand: 100, wantShare: 34},
			{name: "b", demand: 100, wantShare: 33},
			{name: "c", demand: 100, wantShare: 33},
		}},
		{"over-committed guarantees by tier then proportion", 300, []proj{
			{name: "hi", g: 200, priority: 5, demand: 300, wantShare: 200},
			{name: "a", g: 150, demand: 300, wantShare: 60},
			{name: "b", g: 100, demand: 300, wantShare: 40},
		}},
		{"no demand, no share", 800, []proj{
			{name: "a", g: 400, demand: 0, wantShare: 0},
			{name: "b", g: 0, demand: 150, wantShare: 150},
		}},
		{"fractional guarantees", 200, []proj{
			{name: "a", g: 25, demand: 25, wantShare: 25},
			{name: "b", g: 75, demand: 1000, wantShare: 175},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var projects []cluster.Project
			var demand, want []cluster.Shares
			for _, p := range tt.projects {
				projects = append(projects, cluster.Project{Name: p.name, Guaranteed: p.g, Limit: p.limit, HasLimit: p.hasLimit, Priority: p.priority, OverQuotaWeight: p.weight})
				demand = append(demand, p.demand)
				want = append(want, p.wantShare)
			}
			got := Deserved(tt.capacity, projects, demand)
			if !slices.Equal(got, want) {
				t.Errorf("Deserved = %v, want %v", got, want)
			}
		})
	}
}

// TestDeservedInvariants checks, on random inputs, what must always hold:
// the total is min(capacity, capped demand), nobody gets more than its
// capped demand, and anybody whose demand fits in its guarantee gets it when
// the guarantees fit.
func TestDeservedInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		n := 1 + rng.IntN(8)
		capacity := cluster.Shares(rng.IntN(2000))
		projects := make([]cluster.Project, n)
		demand := make([]cluster.Shares, n)
		var wantTotal, guaranteeTotal cluster.Shares
		for i := range projects {
			projects[i] = cluster.Project{
				Name:            string(rune('a' + i)),
				Guaranteed:      cluster.Shares(rng.IntN(400)),
				Priority:        rng.IntN(3),
				OverQuotaWeight: int64(rng.IntN(4)),
			}
			if rng.IntN(3) == 0 {
				projects[i].HasLimit, projects[i].Limit = true, cluster.Shares(rng.IntN(600))
			}
			demand[i] = cluster.Shares(rng.IntN(900))
			wantTotal += min(demand[i], projects[i].Cap())
			guaranteeTotal += min(projects[i].Guaranteed, demand[i], projects[i].Cap())
		}
		got := Deserved(capacity, projects, demand)
		var total cluster.Shares
		for i, d := range got {
			total += d
			if d < 0 || d > min(demand[i], projects[i].Cap()) {
				t.Fatalf("project %d deserved %v, capped demand %v", i, d, min(demand[i], projects[i].Cap()))
			}
			if guaranteeTotal <= capacity && d < min(projects[i].Guaranteed, demand[i], projects[i].Cap()) {
				t.Fatalf("project %d deserved %v below its guarantee", i, d)
			}
		}
		if total != min(capacity, wantTotal) {
			t.Fatalf("total %v, want %v (capacity %v)", total, min(capacity, wantTotal), capacity)
		}
	}
}

// TestDeservedSurplusFactor: a project's SurplusFactor (time-aware fair
// share) scales its weight in the split of the surplus only; guarantees
// stand, and without factors the split is the plain one.
func TestDeservedSurplusFactor(t *testing.T) {
	tests := []struct {
		name     string
		capacity cluster.Shares
		projects []cluster.Project
		demand   []cluster.Shares
		want     []cluster.Shares
	}{
		{"a third of the weight for the project that used the surplus", 400,
			[]cluster.Project{{Name: "busy", SurplusFactor: 1.0 / 3}, {Name: "idle", SurplusFactor: 1}},
			[]cluster.Shares{1000, 1000}, []cluster.Shares{100, 300}},
		{"guarantees first whatever the history", 400,
			[]cluster.Project{{Name: "busy", Guaranteed: 200, SurplusFactor: 0.01}, {Name: "idle"}},
			[]cluster.Shares{1000, 1000}, []cluster.Shares{202, 198}},
		{"weights and factors multiply", 400,
			[]cluster.Project{{Name: "a", OverQuotaWeight: 3, SurplusFactor: 0.5}, {Name: "b", OverQuotaWeight: 1, SurplusFactor: 0.5}},
			[]cluster.Shares{1000, 1000}, []cluster.Shares{300, 100}},
		{"weight 0 stays 0", 400,
			[]cluster.Project{{Name: "a", NoOverQuota: true, SurplusFactor: 1}, {Name: "b", SurplusFactor: 0.2}},
			[]cluster.Shares{1000, 1000}, []cluster.Shares{0, 400}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Deserved(tt.capacity, tt.projects, tt.demand); !slices.Equal(got, tt.want) {
				t.Errorf("Deserved = %v, want %v", got, tt.want)
			}
		})
	}
}
