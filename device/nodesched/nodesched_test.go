package nodesched

import (
	"reflect"
	"testing"
)

func gpu(uuid string, order, tenants int, offered, bound bool) GPU {
	return GPU{UUID: uuid, Order: order, Model: "H100", MemoryMiB: 81920, OfferedWhole: offered, BoundWhole: bound, Tenants: tenants}
}

func TestPlace(t *testing.T) {
	other := gpu("g3", 3, 0, true, false)
	other.Model = "L4"
	cases := []struct {
		name string
		ask  Ask
		gpus []GPU
		want Placement
	}{
		{"first tenant stays home", Ask{Home: "g1", Burstable: true},
			[]GPU{gpu("g1", 1, 0, false, false), gpu("g2", 2, 0, true, false)}, Placement{GPU: "g1"}},
		{"second tenant spreads to the idle whole GPU (the seeds' story)", Ask{Home: "g1", Burstable: true},
			[]GPU{gpu("g1", 1, 1, false, false), gpu("g2", 2, 0, true, false)}, Placement{GPU: "g2", Guest: true}},
		{"not burstable stays home", Ask{Home: "g1"},
			[]GPU{gpu("g1", 1, 1, false, false), gpu("g2", 2, 0, true, false)}, Placement{GPU: "g1"}},
		{"the lowest-ordered idle whole GPU", Ask{Home: "g0", Burstable: true},
			[]GPU{gpu("g0", 0, 2, false, false), gpu("g3", 3, 0, true, false), gpu("g2", 2, 0, true, false)}, Placement{GPU: "g2", Guest: true}},
		{"a GPU bound whole takes no guest", Ask{Home: "g1", Burstable: true},
			[]GPU{gpu("g1", 1, 1, false, false), gpu("g2", 2, 0, true, true)}, Placement{GPU: "g1"}},
		{"a GPU hosting a guest takes no other", Ask{Home: "g1", Burstable: true},
			[]GPU{gpu("g1", 1, 2, false, false), gpu("g2", 2, 1, true, false)}, Placement{GPU: "g1"}},
		{"a withdrawn GPU takes no guest", Ask{Home: "g1", Burstable: true},
			[]GPU{gpu("g1", 1, 1, false, false), gpu("g2", 2, 0, false, false)}, Placement{GPU: "g1"}},
		{"another model takes no guest", Ask{Home: "g1", Burstable: true},
			[]GPU{gpu("g1", 1, 1, false, false), other}, Placement{GPU: "g1"}},
		{"unknown home stays home", Ask{Home: "gx", Burstable: true},
			[]GPU{gpu("g2", 2, 0, true, false)}, Placement{GPU: "gx"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Place(c.ask, c.gpus)
			if got.Why == "" {
				t.Error("no reason given")
			}
			got.Why = ""
			if got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestMoves(t *testing.T) {
	leaving := gpu("g3", 3, 1, false, false)
	leaving.Leaving = true
	// g5 is not published yet (a plugin start): its guest stays.
	gpus := []GPU{gpu("g1", 1, 2, false, false), gpu("g2", 2, 1, true, true), leaving, gpu("g4", 4, 1, true, false), gpu("g5", 5, 1, false, false)}
	guests := []Guest{{"e", "g1", "g5"}, {"d", "g1", "g4"}, {"c", "g1", "gone"}, {"b", "g1", "g3"}, {"a", "g1", "g2"}}
	var got []string
	for _, m := range Moves(guests, gpus) {
		got = append(got, m.Key+": "+m.Why)
	}
	want := []string{"c: host GPU no longer known", "a: host GPU bound whole by Nomad", "b: host GPU leaving the whole family (switched to shares, or unhealthy)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
