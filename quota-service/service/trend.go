package service

import (
	"strconv"
	"time"
)

// The trend keeps one sample every trendEvery for trendKeep: what the
// dashboard draws as each project's allocated and used GPUs over the
// last hour. It lives in the instance's memory (a new instance starts an
// empty one); Prometheus keeps the long history.
const (
	trendEvery = 30 * time.Second
	trendKeep  = time.Hour
)

// TrendPoint is one sample: each project's allocated GPUs (what Nomad
// shows its allocations hold) and, when the device plugins report usage,
// the GPUs its tasks use (the larger of memory and compute).
type TrendPoint struct {
	At       time.Time                `json:"at"`
	Projects map[string]ProjectSample `json:"projects"`
}

// ProjectSample is one project's figures in a TrendPoint, in GPUs.
type ProjectSample struct {
	Allocated float64  `json:"allocated"`
	Used      *float64 `json:"used,omitempty"`
}

// trendDue says a sample is due: the last is trendEvery old.
func trendDue(trend []TrendPoint, now time.Time) bool {
	n := len(trend)
	return n == 0 || now.Sub(trend[n-1].At) >= trendEvery
}

// sampleTrend appends a sample when one is due, and drops those older
// than trendKeep. used is nil without usage reports.
func sampleTrend(trend []TrendPoint, now time.Time, views []ProjectView, used map[string]float64) []TrendPoint {
	if !trendDue(trend, now) {
		return trend
	}
	p := TrendPoint{At: now, Projects: map[string]ProjectSample{}}
	for _, v := range views {
		alloc, _ := strconv.ParseFloat(v.Allocated, 64)
		s := ProjectSample{Allocated: alloc}
		if used != nil {
			u := used[v.Project]
			s.Used = &u
		}
		p.Projects[v.Project] = s
	}
	trend = append(trend, p)
	for len(trend) > 0 && now.Sub(trend[0].At) > trendKeep {
		trend = trend[1:]
	}
	return trend
}

// usedByProject is what the last usage sweep says each project uses, nil
// when the service reads no usage.
func (s *Service) usedByProject() map[string]float64 {
	u := s.Utilization()
	if u == nil {
		return nil
	}
	out := map[string]float64{}
	for _, p := range u.Projects {
		out[p.Project] = max(p.UsedMemory, p.UsedCompute)
	}
	return out
}
