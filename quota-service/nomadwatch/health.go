package nomadwatch

import (
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// gpuHealth is what the instances of one GPU, in both device families, say
// of its health. A GPU the gpushare plugin withdraws from both families on
// purpose (vocab.IsWithdrawn: while it switches the GPU between whole and
// shared, settles before the first publication, has not yet read the
// GPU's usage, or sees the GPU held both ways) is capacity, merely in
// transit: it comes back in one family within seconds. Any other unhealthy
// GPU (an NVML error, an Xid, a GPU no longer reported, a view the plugin
// cannot prove complete, another plugin's reason) is unavailable until it
// is healthy again.
type gpuHealth struct {
	model string
	// mig is, for a MIG device, the part of its GPU it is (see migShares);
	// 0 for a GPU.
	mig cluster.Shares
	// healthy is set when some instance of the GPU is healthy (it is
	// published in one family); reason is the first other health
	// description.
	healthy bool
	reason  string
}

func (h *gpuHealth) add(inst *nomadapi.NodeDevice) {
	switch {
	case inst.Healthy:
		h.healthy = true
	case h.reason == "" || vocab.IsWithdrawn(h.reason) && !vocab.IsWithdrawn(inst.HealthDescription):
		h.reason = inst.HealthDescription
	}
}

// unavailable says why the GPU takes no work, or "" when it is published
// in one family or withdrawn only for a switch.
func (h *gpuHealth) unavailable() string {
	switch {
	case h.healthy || vocab.IsWithdrawn(h.reason):
		return ""
	case h.reason == "":
		return "unhealthy"
	}
	return "unhealthy: " + h.reason
}
