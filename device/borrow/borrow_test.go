package borrow

import (
	"reflect"
	"testing"
	"time"
)

// The GPU of the tests: 80 GiB.
const total = 81920

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// tenant builds a tenant with a request and limit in GiB and a use in MiB,
// created minutes after t0.
func tenant(key string, reqGiB, limGiB int, usedMiB uint64, minutes int) Tenant {
	return Tenant{Key: key, RequestMiB: uint64(reqGiB) << 10, LimitMiB: uint64(limGiB) << 10, UsedMiB: usedMiB, Since: t0.Add(time.Duration(minutes) * time.Minute)}
}

type kill struct {
	key    string
	reason Reason
}

func TestDecide(t *testing.T) {
	cases := []struct {
		name      string
		other     uint64
		headroom  uint64 // 0: the whole GPU (the strict rule)
		tenants   []Tenant
		want      []kill
		wantShort uint64
	}{
		{name: "alone, bursting to the whole GPU",
			tenants: []Tenant{tenant("a", 40, 80, 80000, 0)}},
		{name: "borrower within what nobody requested",
			tenants: []Tenant{tenant("owner", 40, 40, 10000, 0), tenant("borrower", 20, 80, 40000, 1)}},
		{name: "owner arrives on a GPU a borrower fills: the borrower is killed",
			tenants: []Tenant{tenant("borrower", 40, 80, 70000, 0), tenant("owner", 40, 40, 0, 1)},
			want:    []kill{{"borrower", ReasonReclaim}}},
		{name: "strict rule: a borrower may not use an owner's idle request",
			tenants: []Tenant{tenant("borrower", 20, 80, 50000, 0), tenant("owner", 40, 40, 5000, 1)},
			want:    []kill{{"borrower", ReasonReclaim}}},
		{name: "headroom: a borrower uses an idle request but the owner's headroom",
			headroom: 8192,
			tenants:  []Tenant{tenant("borrower", 20, 80, 60000, 0), tenant("owner", 40, 40, 5000, 1)}},
		{name: "headroom: the owner grows into its headroom and the borrower is killed",
			headroom: 8192,
			tenants:  []Tenant{tenant("borrower", 20, 80, 60000, 0), tenant("owner", 40, 40, 15000, 1)},
			want:     []kill{{"borrower", ReasonReclaim}}},
		{name: "headroom: an owner close to its request needs only the rest",
			headroom: 8192,
			tenants:  []Tenant{tenant("borrower", 20, 80, 40000, 0), tenant("owner", 40, 40, 38000, 1)}},
		{name: "headroom: an owner arriving on a GPU a borrower fills",
			headroom: 8192,
			tenants:  []Tenant{tenant("borrower", 40, 80, 78000, 0), tenant("owner", 40, 40, 0, 1)},
			want:     []kill{{"borrower", ReasonReclaim}}},
		{name: "owner above its request is not protected: most above goes first",
			tenants: []Tenant{tenant("a", 20, 80, 40000, 0), tenant("b", 20, 80, 30000, 1), tenant("c", 30, 30, 10000, 2)},
			want:    []kill{{"a", ReasonReclaim}}},
		{name: "tie on how far above: the newest is killed",
			tenants: []Tenant{tenant("old", 20, 80, 30000, 0), tenant("new", 20, 80, 30000, 5), tenant("c", 30, 30, 0, 1)},
			want:    []kill{{"new", ReasonReclaim}}},
		{name: "one kill is not enough: the next most above goes too",
			tenants: []Tenant{tenant("a", 10, 80, 30000, 0), tenant("b", 10, 80, 25000, 1), tenant("c", 60, 60, 20000, 2)},
			want:    []kill{{"a", ReasonReclaim}, {"b", ReasonReclaim}}},
		{name: "above its limit is killed even when memory is free",
			tenants: []Tenant{tenant("a", 20, 30, 31000, 0)},
			want:    []kill{{"a", ReasonLimit}}},
		{name: "a static share (limit = request) using more is above its limit",
			tenants: []Tenant{tenant("a", 25, 25, 26000, 0), tenant("b", 25, 25, 1000, 1)},
			want:    []kill{{"a", ReasonLimit}}},
		{name: "limit kills come first and count as freed",
			tenants: []Tenant{tenant("over", 20, 40, 45000, 0), tenant("borrower", 10, 80, 30000, 1), tenant("owner", 30, 30, 0, 2)},
			want:    []kill{{"over", ReasonLimit}}},
		{name: "processes of no tenant hold the memory: tenants within their request are never killed",
			other:     60000,
			tenants:   []Tenant{tenant("a", 40, 40, 10000, 0)},
			wantShort: 40960 - 10000 - (total - 60000 - 10000)},
		{name: "a borrower goes before the shortfall is reported",
			other:     40000,
			tenants:   []Tenant{tenant("owner", 40, 40, 0, 0), tenant("borrower", 10, 80, 30000, 1)},
			want:      []kill{{"borrower", ReasonReclaim}},
			wantShort: 40960 + 10240 - (total - 40000)},
		{name: "whole-GPU tenant using all of it", tenants: []Tenant{tenant("whole", 80, 80, total, 0)}},
		{name: "no tenants", other: 1000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := c.headroom
			if h == 0 {
				h = total
			}
			d := Decide(GPU{UUID: "GPU-x", TotalMiB: total, OtherMiB: c.other, HeadroomMiB: h, Tenants: c.tenants})
			var got []kill
			for _, k := range d.Kills {
				got = append(got, kill{k.Tenant.Key, k.Reason})
				if k.Detail == "" {
					t.Errorf("kill of %s has no detail", k.Tenant.Key)
				}
			}
			if !reflect.DeepEqual(got, c.want) || d.ShortMiB != c.wantShort {
				t.Errorf("kills %v short %d, want %v short %d", got, d.ShortMiB, c.want, c.wantShort)
			}
			for _, k := range d.Kills {
				if k.Reason == ReasonReclaim && k.Tenant.Above() == 0 {
					t.Errorf("%s killed within its request", k.Tenant.Key)
				}
			}
		})
	}
}

// TestDecideKeepsEveryRequestReachable checks the rule's promise on many
// random GPUs and headrooms: after the kills, free memory covers what every
// tenant below its request must be able to grow by, unless only tenants
// within their request are left.
func TestDecideKeepsEveryRequestReachable(t *testing.T) {
	seed := uint64(1)
	rnd := func(n uint64) uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return (seed >> 33) % n }
	for i := 0; i < 20000; i++ {
		g := GPU{TotalMiB: total, OtherMiB: rnd(4) * 5000, HeadroomMiB: 1 + rnd(total)}
		var reqSum uint64
		for j := uint64(0); j < 1+rnd(5); j++ {
			req := (1 + rnd(40)) << 10
			if reqSum+req > total {
				break
			}
			reqSum += req
			lim := req + rnd(total-req+1)
			g.Tenants = append(g.Tenants, Tenant{Key: string(rune('a' + j)), RequestMiB: req, LimitMiB: lim, UsedMiB: rnd(lim + 2000), Since: t0.Add(time.Duration(rnd(100)) * time.Second)})
		}
		d := Decide(g)
		killed := map[string]bool{}
		for _, k := range d.Kills {
			killed[k.Tenant.Key] = true
		}
		free, claim := int64(total)-int64(g.OtherMiB), int64(0)
		for _, tn := range g.Tenants {
			if killed[tn.Key] {
				claim += restarted(tn).claim(g.HeadroomMiB)
				continue
			}
			free -= int64(tn.UsedMiB)
			claim += tn.claim(g.HeadroomMiB)
			if tn.UsedMiB > tn.LimitMiB {
				t.Fatalf("%+v: %s above its limit survives", g, tn.Key)
			}
			if d.ShortMiB > 0 && tn.Above() > 0 {
				t.Fatalf("%+v: shortfall reported while %s is above its request", g, tn.Key)
			}
		}
		if d.ShortMiB == 0 && free < claim {
			t.Fatalf("%+v: kills %v leave free %d < claim %d", g, d.Kills, free, claim)
		}
	}
}
