// Package nodedemand is the quota service's side of the published demand
// (docs/design.md, Partition protocol, "Published demand"): Compute turns a
// cycle's plan into the demand each node's idle GPUs should serve, and
// Publisher writes it as Nomad Variables (wire format in
// vocab/nodedemand) once per change, with a heartbeat that tells the
// plugins the leader is alive. A plugin that sees a fresh heartbeat reads
// its node's variable instead of listing the cluster's blocked evaluations.
package nodedemand
