package surplususe

import (
	"math"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestObserveDecaysAndAccumulates: GPU-hours above guarantee add up over
// time and halve every half-life.
func TestObserveDecaysAndAccumulates(t *testing.T) {
	tr, err := New(time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	tr.Observe(t0, map[string]float64{"a": 2})
	if tr.Used("a") != 0 {
		t.Fatalf("first observation counted %v, want 0 (it only sets the clock)", tr.Used("a"))
	}
	tr.Observe(t0.Add(30*time.Minute), map[string]float64{"a": 2, "b": 0})
	if !near(tr.Used("a"), 1) || tr.Used("b") != 0 {
		t.Fatalf("after 30 min at 2 GPUs: a %v, b %v; want 1 GPU-hour and 0", tr.Used("a"), tr.Used("b"))
	}
	tr.Observe(t0.Add(90*time.Minute), nil)
	if !near(tr.Used("a"), 0.5) {
		t.Fatalf("one half-life later: %v, want 0.5", tr.Used("a"))
	}
	tr.Observe(t0.Add(60*time.Minute), map[string]float64{"a": 100})
	if !near(tr.Used("a"), 0.5) {
		t.Fatalf("a clock that went back changed the usage to %v", tr.Used("a"))
	}
}

// TestFactors: on 4 GPUs shared by two projects with a half-life of ln 2
// hours, a project's fair history is 2 GPU-hours (its equal part, 2 GPUs,
// held all along).
func TestFactors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		used   map[string]float64
		weight float64
		want   map[string]float64
	}{
		{"nobody used any", nil, 1, map[string]float64{"a": 1, "b": 1}},
		{"one held its equal part all along", map[string]float64{"a": 2}, 1, map[string]float64{"a": 0.5, "b": 1}},
		{"one held the whole cluster all along", map[string]float64{"a": 4}, 1, map[string]float64{"a": 1.0 / 3, "b": 1}},
		{"a fresh history barely counts", map[string]float64{"a": 0.002}, 1, map[string]float64{"a": 1 / 1.001, "b": 1}},
		{"equal use, equal factors", map[string]float64{"a": 2, "b": 2}, 1, map[string]float64{"a": 0.5, "b": 0.5}},
		{"weight 2 counts the history twice", map[string]float64{"a": 2}, 2, map[string]float64{"a": 1.0 / 3, "b": 1}},
		{"weight 0 turns it off", map[string]float64{"a": 10}, 0, map[string]float64{"a": 1, "b": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			halfLife := math.Ln2 * float64(time.Hour)
			tr, _ := New(time.Duration(halfLife), tc.weight)
			if err := tr.Adopt(Record{At: time.Unix(1, 0), Projects: tc.used}); err != nil {
				t.Fatal(err)
			}
			got := tr.Factors([]string{"a", "b"}, 4)
			for p, w := range tc.want {
				if math.Abs(got[p]-w) > 1e-6 {
					t.Errorf("factor of %s = %v, want %v", p, got[p], w)
				}
			}
		})
	}
}

// TestAdopt: a newer stored record replaces what the tracker remembers, an
// older one does not, and bad values are dropped and named.
func TestAdopt(t *testing.T) {
	tr, _ := New(time.Hour, 1)
	tr.Observe(time.Unix(100, 0), nil)
	if err := tr.Adopt(Record{At: time.Unix(50, 0), Projects: map[string]float64{"a": 9}}); err != nil || tr.Used("a") != 0 {
		t.Fatalf("an older record was adopted (%v, %v)", tr.Used("a"), err)
	}
	err := tr.Adopt(Record{At: time.Unix(200, 0), Projects: map[string]float64{"a": 3, "bad": -1, "nan": math.NaN()}})
	if err == nil || tr.Used("a") != 3 || tr.Used("bad") != 0 || tr.Used("nan") != 0 {
		t.Fatalf("adopting: a %v, bad %v, error %v; want a 3, the bad values dropped and named", tr.Used("a"), tr.Used("bad"), err)
	}
	if r := tr.Record(); !r.At.Equal(time.Unix(200, 0)) || len(r.Projects) != 1 {
		t.Errorf("record %+v", r)
	}
}

func TestNewRejectsBadSettings(t *testing.T) {
	if _, err := New(0, 1); err == nil {
		t.Error("half-life 0 accepted")
	}
	if _, err := New(time.Hour, -1); err == nil {
		t.Error("negative weight accepted")
	}
}
