package nomadwatch

import (
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
	nomadapi "github.com/hashicorp/nomad/api"
)

// withdrawnPrefixes are the health descriptions the gpushare device plugin
// gives the instances of a GPU it withdraws from both families on purpose
// (device/partition, Machine.publication): while it switches the GPU
// between whole and shared, while it settles before the first
// publication, while it has not yet read the GPU's usage, and while the
// GPU is held both ways. Such a GPU is capacity, merely in transit: it
// comes back in one family within seconds. Any other unhealthy GPU (an
// NVML error, a GPU no longer reported, another plugin's reason) is
// unavailable until it is healthy again.
//
// They are the plugin's own texts: a change there must change them here.
var withdrawnPrefixes = []string{
	"gpushare: switching to ",
	"gpushare: settling before first publication",
	"gpushare: waiting to read GPU usage",
	"gpushare: GPU is held both whole and shared",
}

// gpuHealth is what the instances of one GPU, in both device families, say
// of its health.
type gpuHealth struct {
	model string
	// mig is, for a MIG device, the part of its GPU it is (see migShares);
	// 0 for a GPU.
	mig model.Shares
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
	case h.reason == "" || withdrawn(h.reason) && !withdrawn(inst.HealthDescription):
		h.reason = inst.HealthDescription
	}
}

// unavailable says why the GPU takes no work, or "" when it is published
// in one family or withdrawn only for a switch.
func (h *gpuHealth) unavailable() string {
	switch {
	case h.healthy || withdrawn(h.reason):
		return ""
	case h.reason == "":
		return "unhealthy"
	}
	return "unhealthy: " + h.reason
}

// withdrawn reports whether a health description is the plugin's own
// withdrawal of a healthy GPU (see withdrawnPrefixes).
func withdrawn(desc string) bool {
	for _, p := range withdrawnPrefixes {
		if strings.HasPrefix(desc, p) {
			return true
		}
	}
	return false
}
