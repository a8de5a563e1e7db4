// Package quotaservice is the gpushare quota service: guaranteed GPU quotas
// per project with fair, automatic suspension and resumption of Nomad jobs.
//
// The service reads project quotas from Consul KV (package quota), observes
// Nomad (package nomadwatch), plans with scheduler/plan, and acts through
// package actuator, which records every suspension in Consul KV (package
// state) before it stops a job. Package leader makes sure only one of
// several instances acts; package httpapi serves status and metrics;
// package service wires it all into one loop and cmd/gpushare-quota is the
// daemon.
//
// Consul KV layout under the root prefix (default "gpushare"):
//
//	<root>/quotas/<project>               project settings (JSON, written by people)
//	<root>/departments/<department>       department settings (JSON, written by people)
//	<root>/status/quota-errors/<project>  why a quota document is rejected
//	<root>/status/quota-errors/departments/<department>  why a department's document, or its projects' guarantees, are not taken
//	<root>/status/projects/<project>      per-project status (JSON, written by the service)
//	<root>/status/record-errors/<namespace>/<job>  a suspension record the service does not act on, and why
//	<root>/suspended/<namespace>/<job>    a suspension: phase, reason, the suspended version's spec
//	<root>/shrunk/<namespace>/<job>       elastic groups the service scaled down: owner's and current counts
//	<root>/history/<time>-<event>-<namespace>-<job>  what the service did (bounded)
//	<root>/leader                         the Consul lock held by the acting instance
package quotaservice
