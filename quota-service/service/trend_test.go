package service

import (
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// TestSampleTrend: one sample every 30 s, an hour kept, used only with
// usage reports.
func TestSampleTrend(t *testing.T) {
	views := []ProjectView{{ProjectStatus: state.ProjectStatus{Project: "a", Allocated: "1.50"}}}
	start := time.Unix(0, 0)
	var trend []TrendPoint
	for s := 0; s <= 7200; s += 10 {
		trend = sampleTrend(trend, start.Add(time.Duration(s)*time.Second), views, nil)
	}
	if len(trend) != 121 || trend[0].At != start.Add(3600*time.Second) {
		t.Fatalf("%d samples from %v; want 121 over the last hour", len(trend), trend[0].At)
	}
	if p := trend[0].Projects["a"]; p.Allocated != 1.5 || p.Used != nil {
		t.Fatalf("sample %+v; want allocated 1.5 and no usage", p)
	}
	trend = sampleTrend(nil, start, views, map[string]float64{"a": 0.75})
	if u := trend[0].Projects["a"].Used; u == nil || *u != 0.75 {
		t.Fatalf("used %v, want 0.75", u)
	}
}
