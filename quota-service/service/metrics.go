package service

import (
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the service's Prometheus metrics.
type metrics struct {
	Guaranteed *prometheus.GaugeVec
	Allocated  *prometheus.GaugeVec
	Deserved   *prometheus.GaugeVec
	Pending    *prometheus.GaugeVec
	Suspended  *prometheus.GaugeVec
	// Department* are the per-department gauges (departments.go).
	DepartmentGuaranteed *prometheus.GaugeVec
	DepartmentAllocated  *prometheus.GaugeVec
	DepartmentDeserved   *prometheus.GaugeVec
	Queue                prometheus.Gauge
	Leader               prometheus.Gauge
	LastRelist           prometheus.Gauge
	CycleOK              prometheus.Gauge
	PlansReused          prometheus.Counter
	Reclaims             *prometheus.CounterVec
	Resumes              *prometheus.CounterVec
	ReclaimLatency       prometheus.Histogram
	Cycle                prometheus.Histogram
	CycleErrors          *prometheus.CounterVec
	Triggers             *prometheus.CounterVec
	RecordErrors         prometheus.Gauge
	Relists              *prometheus.CounterVec
	Corrections          *prometheus.CounterVec
}

// newMetrics registers the metrics with reg.
func newMetrics(reg prometheus.Registerer) *metrics {
	gv := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "gpushare", Name: name, Help: help}, []string{"project"})
	}
	dv := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "gpushare", Name: name, Help: help}, []string{"department"})
	}
	m := &metrics{
		Guaranteed:           gv("project_guaranteed_gpus", "GPUs guaranteed to the project."),
		Allocated:            gv("project_allocated_gpus", "GPUs the project's running allocations hold."),
		Deserved:             gv("project_deserved_gpus", "The project's fair share this cycle, in GPUs."),
		Pending:              gv("project_pending_gpus", "GPUs the project's pending and suspended work asks for."),
		Suspended:            gv("project_suspended_jobs", "Jobs of the project suspended by the service."),
		DepartmentGuaranteed: dv("department_guaranteed_gpus", "GPUs guaranteed to the department (its projects' guarantees fit within it)."),
		DepartmentAllocated:  dv("department_allocated_gpus", "GPUs the running allocations of the department's projects hold."),
		DepartmentDeserved:   dv("department_deserved_gpus", "The department's fair share this cycle (its projects' together), in GPUs."),
		Queue:                prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpushare", Name: "pending_workloads", Help: "Pending GPU workloads (task groups) including suspended ones."}),
		Leader:               prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpushare", Name: "leader", Help: "1 when this instance acts."}),
		LastRelist:           prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpushare", Name: "last_relist_timestamp_seconds", Help: "When Nomad was last listed successfully."}),
		CycleOK: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpushare", Name: "cycle_ok",
			Help: "1 when the last cycle read Nomad and Consul and planned; 0 while the service is blind (it takes no action then)."}),
		PlansReused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "gpushare", Name: "plans_reused_total",
			Help: "Cycles that took the last plan again: Nomad and the quotas had changed nothing the plan reads since it was made."}),
		Reclaims: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpushare", Name: "suspensions_total", Help: "Jobs suspended, by victim project and kind (reclaim or preempt)."}, []string{"project", "kind"}),
		Resumes:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpushare", Name: "resumes_total", Help: "Suspended jobs resumed, by project."}, []string{"project"}),
		ReclaimLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "gpushare", Name: "reclaim_latency_seconds",
			Help: "From the first suspension made for a workload until the workload is no longer pending.", Buckets: prometheus.ExponentialBuckets(0.25, 2, 10)}),
		Cycle: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "gpushare", Name: "cycle_seconds",
			Help: "Duration of one re-list, plan and act cycle.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 12)}),
		CycleErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpushare", Name: "cycle_errors_total", Help: "Cycles that took no action, by cause."}, []string{"cause"}),
		Triggers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpushare", Name: "cycle_triggers_total",
			Help: "Leader cycles by what started them (nomad-event, quota-change, follow-up, interval)."}, []string{"trigger"}),
		RecordErrors: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "gpushare", Name: "record_errors",
			Help: "Suspension records the service does not act on (Nomad does not corroborate them); see record_errors in /v1/status."}),
		Relists: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpushare", Name: "view_relists_total",
			Help: "Full listings of Nomad, by reason: start (stream connected), gap (stream broke or an event did not decode), index (Nomad's index ahead of the events), resync (periodic check), poll (no stream)."}, []string{"reason"}),
		Corrections: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "gpushare", Name: "view_resync_corrections_total",
			Help: "Objects the periodic resync found wrong in the view the event stream keeps, by kind (node, allocation, job) and change (added, removed, changed); should stay 0."}, []string{"kind", "change"}),
	}
	reg.MustRegister(m.Guaranteed, m.Allocated, m.Deserved, m.Pending, m.Suspended, m.DepartmentGuaranteed, m.DepartmentAllocated, m.DepartmentDeserved, m.Queue, m.Leader, m.LastRelist, m.CycleOK,
		m.PlansReused, m.Reclaims, m.Resumes, m.ReclaimLatency, m.Cycle, m.CycleErrors, m.Triggers, m.RecordErrors,
		m.Relists, m.Corrections)
	return m
}

// noteRelist counts a listing of Nomad and what a resync corrected.
func (s *Service) noteRelist(reason string, corrected []nomadwatch.Change) {
	s.metrics.Relists.WithLabelValues(reason).Inc()
	for _, c := range corrected {
		for change, n := range map[string]int{"added": c.Added, "removed": c.Removed, "changed": c.Changed} {
			s.metrics.Corrections.WithLabelValues(c.Kind, change).Add(float64(n))
			if n > 0 {
				s.log.Warn("the periodic resync corrected the view of Nomad", "kind", c.Kind, "change", change, "count", n)
			}
		}
	}
}
