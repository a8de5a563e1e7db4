package nodedemand

import (
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	wire "github.com/gpushare/nomad-gpushare/vocab/nodedemand"
)

// Compute is the demand per node ID that the plan's placements put on the
// nodes' GPUs: one request per Place action of GPU work, in the plan's
// order (pending work and resumptions alike, including what suspensions
// make room for). Every node with GPUs has an entry, empty without such a
// placement: a variable that exists answers a plugin's blocking query only
// when it changes (an absent one answers at every variable write of the
// cluster). Epochs are left empty for the publisher to fill in.
func Compute(snap *cluster.Snapshot, res plan.Result) map[string]wire.Node {
	out := map[string]wire.Node{}
	for _, n := range snap.Nodes {
		if len(n.GPUs) > 0 {
			out[n.Name] = wire.Node{}
		}
	}
	for _, a := range res.Actions {
		if a.Kind != plan.Place || a.Node == "" || a.Workload < 0 || a.Workload >= len(snap.Pending) {
			continue
		}
		ask := snap.Pending[a.Workload].Ask
		var r wire.Request
		switch {
		case ask.WholeGPUs > 0:
			r.Whole = ask.WholeGPUs
		case ask.Shares > 0:
			r.Shares = int(ask.Shares)
		default:
			continue // CPU-only work: no GPU family to prepare
		}
		n := out[a.Node]
		n.Requests = append(n.Requests, r)
		out[a.Node] = n
	}
	return out
}
