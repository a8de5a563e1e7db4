package service

import (
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// DepartmentView is one department's line in /v1/status: its settings,
// what its projects demand, deserve, hold and will hold after the plan,
// together, and its projects' names (docs/operator.md, Quotas).
type DepartmentView struct {
	Name            string `json:"name"`
	Guaranteed      string `json:"guaranteed"`
	Limit           string `json:"limit,omitempty"`
	Priority        int    `json:"priority"`
	OverQuotaWeight int64  `json:"over_quota_weight"`
	Demand          string `json:"demand"`
	Deserved        string `json:"deserved"`
	// Allocated is what its projects' allocations hold (their usage),
	// Planned what they hold once the plan is carried out.
	Allocated string `json:"allocated"`
	Planned   string `json:"planned"`
	// Projects are its projects' names, sorted.
	Projects []string `json:"projects"`
	// Error says why the department's document, or its projects', are
	// not taken (also at <root>/status/quota-errors/departments/<name>).
	Error string `json:"error,omitempty"`
	// Partial: the request may not see all of the department's projects,
	// so only its name and the projects it may see are given
	// (httpapi.visibleStatus).
	Partial bool `json:"partial,omitempty"`
}

// departmentViews are the departments' lines of the cycle, in the plan's
// department order.
func (s *Service) departmentViews(c *cycleData) []DepartmentView {
	errs := s.watcher.DepartmentErrors()
	limits := map[string]string{}
	for _, d := range c.departments {
		if d.HasLimit {
			limits[d.Name] = d.Limit.String()
		}
	}
	members := map[string][]string{}
	for _, p := range c.view.Snapshot.Projects { // sorted by name
		if p.Department != "" {
			members[p.Department] = append(members[p.Department], p.Name)
		}
	}
	var out []DepartmentView
	for i, sh := range c.res.Departments {
		d := c.view.Snapshot.Departments[i]
		v := DepartmentView{Name: sh.Name, Guaranteed: d.Guaranteed.String(), Limit: limits[sh.Name], Priority: d.Priority, OverQuotaWeight: d.Weight(),
			Demand: sh.Demand.String(), Deserved: sh.Deserved.String(), Allocated: sh.Usage.String(), Planned: sh.Planned.String(),
			Projects: members[sh.Name]}
		if v.Projects == nil {
			v.Projects = []string{}
		}
		if fe, ok := errs[sh.Name]; ok {
			v.Error = fe.Error()
		}
		out = append(out, v)
	}
	return out
}

// setDepartmentMetrics sets the per-department gauges (in GPUs) and drops
// those of departments gone.
func (s *Service) setDepartmentMetrics(c *cycleData) {
	gpus := func(x cluster.Shares) float64 { return float64(x) / float64(cluster.SharesPerGPU) }
	seen := map[string]bool{}
	for i, sh := range c.res.Departments {
		seen[sh.Name] = true
		s.metrics.DepartmentGuaranteed.WithLabelValues(sh.Name).Set(gpus(c.view.Snapshot.Departments[i].Guaranteed))
		s.metrics.DepartmentAllocated.WithLabelValues(sh.Name).Set(gpus(sh.Usage))
		s.metrics.DepartmentDeserved.WithLabelValues(sh.Name).Set(gpus(sh.Deserved))
	}
	for name := range s.metricDepartments {
		if !seen[name] {
			s.metrics.DepartmentGuaranteed.DeleteLabelValues(name)
			s.metrics.DepartmentAllocated.DeleteLabelValues(name)
			s.metrics.DepartmentDeserved.DeleteLabelValues(name)
		}
	}
	s.metricDepartments = seen
}
