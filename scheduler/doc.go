// Package scheduler is the decision logic of gpushare: fair share, reclaim
// and preempt planning, and GPU placement. It does no I/O and imports
// neither Nomad nor Consul; for a given input and seed every decision is the
// same. The subpackages each hold one part:
//
//   - placement: where a task goes inside a cluster (policies behind one
//     interface, for GPU shares and whole GPUs).
//   - trace and sim: the openb trace format and the trace-driven simulator
//     behind the placement benchmark (cmd/tracesim).
//   - model, fairshare and plan: the cluster snapshot, deserved shares, and
//     reclaim/preempt planning, gangs (placed whole or not at all) and
//     elastic groups (shrunk before any whole job is suspended) included.
//   - scenario: declarative scheduling scenarios run through the planner
//     over several rounds.
package scheduler
