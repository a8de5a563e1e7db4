package ranking

import (
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
	nomadapi "github.com/hashicorp/nomad/api"
)

// AffinityWeight is the weight of the ranking affinity: Nomad's highest,
// so that a node where the group fragments nothing wins over any
// difference in CPU and memory bin-packing.
const AffinityWeight = 100

// Class is the class key of one instance of task group tg, as the
// published metadata names it ("s25-c1": 25 shares and at most 1000 MHz;
// "w1-c4": one whole GPU and at most 4000 MHz; "cpu-c2": no GPU and at
// most 2000 MHz), from the group's device requests and CPU summed over its
// tasks. A share count is read in shares of the plugin's default
// shares_per_gpu (100).
func Class(tg *nomadapi.TaskGroup) (string, error) {
	ask, _, err := nomadwatch.GroupAsk(tg, 1)
	if err != nil {
		return "", err
	}
	return placement.ClassKey(placement.TaskOf(ask)), nil
}

// Affinity is the ranking affinity of task group tg: its class's key
// equal to "1", with AffinityWeight.
func Affinity(tg *nomadapi.TaskGroup) (*nomadapi.Affinity, error) {
	class, err := Class(tg)
	if err != nil {
		return nil, err
	}
	w := int8(AffinityWeight)
	return &nomadapi.Affinity{LTarget: "${meta." + Prefix + class + "}", Operand: "=", RTarget: "1", Weight: &w}, nil
}
