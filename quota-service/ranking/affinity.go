package ranking

import (
	"fmt"

	"github.com/gpushare/nomad-gpushare/device/ids"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
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
// tasks.
func Class(tg *nomadapi.TaskGroup) (string, error) {
	ask, _, err := groupAsk(tg)
	if err != nil {
		return "", err
	}
	return placement.ClassKey(task(ask)), nil
}

// groupAsk is what one instance of tg asks for; gpu reports a gpushare
// GPU request.
func groupAsk(tg *nomadapi.TaskGroup) (ask model.Ask, gpu bool, err error) {
	for _, task := range tg.Tasks {
		if task == nil || task.Resources == nil {
			continue
		}
		if task.Resources.CPU != nil {
			ask.CPUMilli += int64(*task.Resources.CPU)
		}
		if task.Resources.MemoryMB != nil {
			ask.MemoryMiB += int64(*task.Resources.MemoryMB)
		}
		for _, d := range task.Resources.Devices {
			if d == nil {
				continue
			}
			switch req := ids.ParseRequest(d); {
			case req.Whole():
				ask.WholeGPUs += req.Count
				gpu = true
			case req.Share():
				ask.Shares += model.Shares(req.Count)
				gpu = true
			}
		}
	}
	if err := ask.Validate(); err != nil {
		return model.Ask{}, false, fmt.Errorf("group %q: %w", name(tg), err)
	}
	return ask, gpu, nil
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

func name(tg *nomadapi.TaskGroup) string {
	if tg.Name == nil {
		return ""
	}
	return *tg.Name
}
