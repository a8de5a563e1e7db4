package placement

import (
	"math/rand"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab"
)

// This file models what the gpushare device plugin publishes on a node and
// how Nomad picks devices among what is published (device/partition's
// rules with the plugin's default configuration, device/config.go; Nomad's
// scheduler/feasible/device.go createOffer):
//
//   - Each GPU is published in one family: whole (one instance; the GPUs of
//     a model form one device group) or share (its own device group of
//     cluster.SharesPerGPU instances), or in neither while it is full.
//   - A GPU with share tenants stays share; a GPU held whole stays whole.
//     Of the idle GPUs, the highest-numbered one is kept in share mode as a
//     landing place while no in-use share GPU has pluginShareHeadroom free
//     shares; the others are whole.
//   - A request that no node can serve as published waits (a blocked
//     evaluation); every plugin that could serve it moves idle GPUs to the
//     family it needs (a whole request takes idle GPUs, a share request
//     opens one), and Nomad then places it. The simulator has no clock, so
//     this happens at once: the task is placed, not dropped.
//   - Nomad takes all instances of a request from one device group, the
//     group with the highest device-affinity score among those with enough
//     free instances; equal groups are taken in map order, that is at
//     random. So a share lands on a random share-mode GPU that has room.

// The plugin's defaults (vocab, which device/config.go's DefaultConfig
// takes): one landing place, kept while no in-use share GPU has 50 free
// shares.
const (
	pluginLandingPlaces = vocab.DefaultMinIdleShareGPUs
	pluginShareHeadroom = vocab.DefaultShareHeadroom
)

// family is how a GPU is offered to Nomad.
type family uint8

const (
	offeredNone family = iota
	offeredWhole
	offeredShare
)

// publish fills fam with the family of each GPU of n as the plugin
// publishes it when nothing waits.
func publish(n *Node, fam []family) []family {
	fam = fam[:0]
	landing := pluginLandingPlaces
	for i := range n.GPUs {
		f := n.GPUs[i].Free
		switch {
		case f == 0:
			fam = append(fam, offeredNone)
		case f < cluster.SharesPerGPU:
			fam = append(fam, offeredShare)
			if f >= pluginShareHeadroom {
				landing = 0
			}
		default:
			fam = append(fam, offeredWhole)
		}
	}
	for i := len(fam) - 1; i >= 0 && landing > 0; i-- {
		if n.GPUs[i].Free == cluster.SharesPerGPU {
			fam[i] = offeredShare
			landing--
		}
	}
	return fam
}

// publishForDemand fills fam as the plugin publishes once a waiting request
// of t's kind has moved the idle GPUs: every idle GPU is offered in the
// family t needs.
func publishForDemand(n *Node, t Task, fam []family) []family {
	fam = publish(n, fam)
	want := offeredWhole
	if isShare(t) {
		want = offeredShare
	}
	for i := range n.GPUs {
		if n.GPUs[i].Free == cluster.SharesPerGPU {
			fam[i] = want
		}
	}
	return fam
}

// gpuScorer is a device-affinity score of a share-mode GPU for share t, in
// [0, 1]; nil when the request carries no device affinity.
type gpuScorer func(g *GPU, t Task) float64

// offerDevices is Nomad's device choice for t on n given the families:
// the GPUs it gets, the device-affinity score of the choice (when score is
// not nil and t is a share) and whether the request fits at all.
func offerDevices(rng *rand.Rand, n *Node, t Task, fam []family, score gpuScorer, buf []int) ([]int, float64, bool) {
	buf = buf[:0]
	if t.GPUCount == 0 {
		return buf, 0, true
	}
	if !isShare(t) {
		for i := range n.GPUs {
			if fam[i] == offeredWhole && t.MayUse(n.GPUs[i].Model, n.GPUs[i].Mode) {
				buf = append(buf, i)
			}
		}
		if len(buf) < t.GPUCount {
			return nil, 0, false
		}
		// All idle whole GPUs are alike: take them in order.
		return buf[:t.GPUCount], 0, true
	}
	best, ties := -1, 0
	bestScore := 0.0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if fam[i] != offeredShare || g.Free < t.Shares || !t.MayUse(g.Model, g.Mode) {
			continue
		}
		s := 0.0
		if score != nil {
			s = score(g, t)
		}
		switch {
		case best < 0 || s > bestScore:
			best, bestScore, ties = i, s, 1
		case s == bestScore:
			ties++
			if rng.Intn(ties) == 0 {
				best = i
			}
		}
	}
	if best < 0 {
		return nil, 0, false
	}
	return append(buf, best), bestScore, true
}
