package service

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/utilization"
	"github.com/prometheus/client_golang/prometheus"
)

// UsageConfig says how the service reads the GPU usage the device plugins
// report (package utilization). A zero Port reads nothing.
type UsageConfig struct {
	// Port is the plugins' usage_listen port.
	Port int
	// Period between sweeps of the GPU nodes (utilization.DefaultPeriod).
	Period time.Duration
}

// utilizationState is the usage side of the service: the collector and
// the job-to-project mapping of the last cycle.
type utilizationState struct {
	collector *utilization.Collector
	// jobs are the last view's jobs by "namespace/job" (View.Jobs: read
	// only once built, so shared here without a copy).
	jobs atomic.Pointer[map[string]*nomadwatch.JobInfo]
}

// Utilization is /v1/utilization: per project, what is guaranteed, and
// what the GPU nodes report as allocated (the tasks' requests) and used.
type Utilization struct {
	// At is when the GPU nodes were last read; Nodes how many were to be
	// read, Failed those that could not be, with why (at most 20).
	At       time.Time            `json:"at"`
	Nodes    int                  `json:"nodes"`
	Failed   map[string]string    `json:"failed,omitempty"`
	Error    string               `json:"error,omitempty"`
	Projects []ProjectUtilization `json:"projects"`
	// Outside counts GPU processes of no tenant, and their memory.
	OutsideProcesses int    `json:"outside_processes"`
	OutsideMiB       uint64 `json:"outside_mib"`
}

// ProjectUtilization is one project's line: its guarantee (from its quota,
// "" for a project without one) and its usage as the GPU nodes report it.
type ProjectUtilization struct {
	Guaranteed string `json:"guaranteed"`
	utilization.ProjectUsage
}

// initUtilization starts nothing; it builds the collector when a port is
// configured, and registers the utilization metrics.
func (s *Service) initUtilization() {
	if s.cfg.Usage.Port <= 0 {
		return
	}
	s.util.collector = utilization.New(utilization.Config{Nomad: s.cfg.Nomad, Port: s.cfg.Usage.Port, Period: s.cfg.Usage.Period, Log: s.log.Named("usage")})
	s.reg.MustRegister(&utilizationCollector{s: s})
}

// runUtilization sweeps the GPU nodes until ctx ends (when configured).
func (s *Service) runUtilization(ctx context.Context) {
	if s.util.collector != nil {
		s.util.collector.Run(ctx)
	}
}

// noteProjects keeps the view's job-to-project mapping for the usage.
func (s *Service) noteProjects(v *nomadwatch.View) {
	s.util.jobs.Store(&v.Jobs)
}

// projectOf names the project of a job: the last view's mapping, else its
// namespace (a job the view does not know yet).
func (s *Service) projectOf(namespace, job string) string {
	if m := s.util.jobs.Load(); m != nil {
		if j, ok := (*m)[nomadwatch.Key(namespace, job)]; ok {
			return j.Project
		}
	}
	return namespace
}

// Utilization returns the projects' utilization from the last sweep; nil
// when the service reads no usage.
func (s *Service) Utilization() *Utilization {
	if s.util.collector == nil {
		return nil
	}
	sw := s.util.collector.Last()
	u := &Utilization{At: sw.At, Nodes: sw.Nodes, Error: sw.Err, Failed: map[string]string{}}
	for _, name := range slices.Sorted(maps.Keys(sw.Failed)) {
		if len(u.Failed) == 20 {
			u.Failed["..."] = fmt.Sprintf("%d more", len(sw.Failed)-20)
			break
		}
		u.Failed[name] = sw.Failed[name]
	}
	for _, r := range sw.Reports {
		u.OutsideProcesses += len(r.Outside)
		for _, o := range r.Outside {
			u.OutsideMiB += o.UsedMiB
		}
	}
	views := map[string]ProjectView{}
	for _, pv := range s.Projects() {
		views[pv.Project] = pv
	}
	for _, pu := range utilization.Summarize(sw.Reports, s.projectOf) {
		pv := views[pu.Project]
		u.Projects = append(u.Projects, ProjectUtilization{ProjectUsage: pu, Guaranteed: pv.Guaranteed})
	}
	return u
}

// utilizationCollector exports the last sweep's figures at each scrape, so
// projects that are gone leave no series behind.
type utilizationCollector struct{ s *Service }

var (
	projectLabel    = []string{"project"}
	descUsedMemory  = prometheus.NewDesc("gpushare_project_used_memory_gpus", "GPU memory the project's tasks use, in GPUs of memory (device plugin reports).", projectLabel, nil)
	descUsedCompute = prometheus.NewDesc("gpushare_project_used_compute_gpus", "SM utilization of the project's tasks, in GPUs of compute.", projectLabel, nil)
	descIdle        = prometheus.NewDesc("gpushare_project_idle_gpus", "Part of the project's allocation that neither its memory nor its compute use.", projectLabel, nil)
	descBorrowed    = prometheus.NewDesc("gpushare_project_borrowed_gpus", "GPU memory the project's tasks use above their request (burst), in GPUs.", projectLabel, nil)
	descReported    = prometheus.NewDesc("gpushare_project_reported_allocated_gpus", "The project's allocation as the device plugins report it (requests).", projectLabel, nil)
	descUsageNodes  = prometheus.NewDesc("gpushare_usage_nodes", "GPU nodes whose usage was read (state ok) or not (failed) in the last sweep.", []string{"state"}, nil)
	descUsageAt     = prometheus.NewDesc("gpushare_usage_sweep_timestamp_seconds", "When the GPU nodes' usage was last read.", nil, nil)
)

func (c *utilizationCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func (c *utilizationCollector) Collect(ch chan<- prometheus.Metric) {
	u := c.s.Utilization()
	if u == nil || u.At.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(descUsageAt, prometheus.GaugeValue, float64(u.At.UnixNano())/1e9)
	ch <- prometheus.MustNewConstMetric(descUsageNodes, prometheus.GaugeValue, float64(u.Nodes-len(c.s.util.collector.Last().Failed)), "ok")
	ch <- prometheus.MustNewConstMetric(descUsageNodes, prometheus.GaugeValue, float64(len(c.s.util.collector.Last().Failed)), "failed")
	for _, p := range u.Projects {
		for _, m := range []struct {
			d *prometheus.Desc
			v float64
		}{{descUsedMemory, p.UsedMemory}, {descUsedCompute, p.UsedCompute}, {descIdle, p.Idle}, {descBorrowed, p.Borrowed}, {descReported, p.Allocated}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, m.v, p.Project)
		}
	}
}
