// Package nomadstandin is a stand-in for Nomad's HTTP API and event stream
// at cluster scale, for the quota service's scale benchmark
// (tools/scalebench): nodes in the device plugin's real layout
// (device.SimulatedLayout), running allocations, jobs in many namespaces
// (one per project), pending groups, and a steady flow of events. Every
// answer is a Nomad 1.11 API type (github.com/hashicorp/nomad/api)
// marshalled to JSON, with the index headers Nomad sends.
//
// It serves what the service reads: node, allocation and job listings,
// node and job reads, namespaces, the ACL self-token (ACLs disabled) and
// the event stream. It applies the quota service's job registrations (a
// stop, a resume: its allocations stop, or run again where they were);
// other writes are acknowledged and otherwise ignored.
package nomadstandin

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/gpushare/nomad-gpushare/device"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/hashicorp/nomad/api"
)

// Config sizes the stand-in's cluster.
type Config struct {
	Nodes       int // GPU nodes, 8 x H100 each
	Allocations int // running GPU allocations, spread over the nodes
	Projects    int // namespaces, one per project
	Pending     int // pending task groups (jobs with no allocation yet)
	// SharesPerGPU is the plugin's shares_per_gpu (0: 100).
	SharesPerGPU int
	// ShareGPUs are the GPUs per node in the share family (the rest whole).
	ShareGPUs int
}

// world is the generated cluster.
type world struct {
	cfg    Config
	nodes  []*api.Node
	allocs []*api.AllocationListStub
	jobs   []*api.Job
	// jobAllocs are the allocation indexes of each job.
	jobAllocs map[string][]int
	created   time.Time
}

// perNode is the number of GPU allocations each node runs: its whole
// GPUs, one allocation each, and the rest as share allocations spread
// over its share GPUs.
func perNode(c Config) int { return (c.Allocations + c.Nodes - 1) / max(c.Nodes, 1) }

// generate builds the world deterministically.
func generate(c Config) (*world, error) {
	if c.SharesPerGPU == 0 {
		c.SharesPerGPU = vocab.DefaultSharesPerGPU
	}
	if c.ShareGPUs == 0 {
		c.ShareGPUs = 4
	}
	w := &world{cfg: c, jobAllocs: map[string][]int{}, created: time.Now()}
	rng := rand.New(rand.NewPCG(42, uint64(c.Nodes)))
	for i := range c.Nodes {
		groups, err := device.SimulatedLayout(gpu.SimOptions{Preset: gpu.PresetH100, Seed: fmt.Sprintf("node-%05d", i)}, c.SharesPerGPU, c.ShareGPUs)
		if err != nil {
			return nil, err
		}
		w.nodes = append(w.nodes, newNode(i, device.NodeDevices(groups)))
	}
	w.placeAllocations(rng)
	w.addPending()
	return w, nil
}

// placeAllocations fills the nodes: on each node, one allocation per whole
// GPU, then share allocations round-robin over its share GPUs, each of
// 10% of a GPU. Allocations belong to jobs of ten allocations each, of
// whole GPUs or of shares (as their specs ask), jobs to random projects.
func (w *world) placeAllocations(rng *rand.Rand) {
	c := w.cfg
	per := perNode(c)
	unit := vocab.UnitsPerGPU / c.SharesPerGPU
	shareCount := max(10/unit, 1)
	next := make([]int, c.ShareGPUs) // next free share instance per share GPU, per node (reset per node)
	var wholeJob, shareJob *api.Job
	for _, node := range w.nodes {
		clear(next)
		whole, shares := gpuIDs(node)
		for k := 0; k < per && len(w.allocs) < c.Allocations; k++ {
			current := &shareJob
			if k < len(whole) {
				current = &wholeJob
			}
			if *current == nil || len(w.jobAllocs[jobKey(*current)]) == 10 {
				*current = w.newJob(len(w.jobs), rng, k < len(whole))
			}
			job := *current
			var devs *api.AllocatedDeviceResource
			if k < len(whole) {
				devs = &api.AllocatedDeviceResource{Vendor: vocab.Vendor, Type: vocab.TypeWhole, Name: "NVIDIA H100 80GB HBM3", DeviceIDs: []string{whole[k]}}
			} else {
				g := (k - len(whole)) % len(shares)
				var idl []string
				for s := 0; s < shareCount && next[g] < c.SharesPerGPU; s++ {
					idl = append(idl, vocab.ShareOf(shares[g], next[g], c.SharesPerGPU))
					next[g]++
				}
				devs = &api.AllocatedDeviceResource{Vendor: vocab.Vendor, Type: vocab.TypeShare, Name: "", DeviceIDs: idl}
			}
			a := newAlloc(len(w.allocs), len(w.jobAllocs[jobKey(job)]), job, node, devs, w.created)
			w.jobAllocs[jobKey(job)] = append(w.jobAllocs[jobKey(job)], len(w.allocs))
			w.allocs = append(w.allocs, a)
		}
	}
}

// gpuIDs returns a node's GPU UUIDs offered whole and offered in shares.
func gpuIDs(n *api.Node) (whole, share []string) {
	for _, g := range n.NodeResources.Devices {
		for _, d := range g.Instances {
			if !d.Healthy {
				continue
			}
			switch g.Type {
			case vocab.TypeWhole:
				whole = append(whole, d.ID)
			case vocab.TypeShare:
				id, _ := vocab.Parse(d.ID)
				if len(share) == 0 || share[len(share)-1] != id.UUID {
					share = append(share, id.UUID)
				}
			}
		}
	}
	return whole, share
}

// addPending adds Pending jobs of one share group each, with no
// allocation: the service's pending groups.
func (w *world) addPending() {
	for i := range w.cfg.Pending {
		j := w.jobSpec(fmt.Sprintf("pending-%05d", i), w.project(i), 1, false, w.shareCount(20))
		j.Status = ptr("pending")
		w.jobs = append(w.jobs, j)
	}
}

// shareCount is the device count that asks for pct hundredths of a GPU.
func (w *world) shareCount(pct int) int {
	return max(pct/(vocab.UnitsPerGPU/w.cfg.SharesPerGPU), 1)
}

func (w *world) project(i int) string { return fmt.Sprintf("project-%03d", i%max(w.cfg.Projects, 1)) }

// newJob adds a running service job of ten allocations.
func (w *world) newJob(i int, rng *rand.Rand, whole bool) *api.Job {
	count := w.shareCount(10)
	if whole {
		count = 1
	}
	j := w.jobSpec(fmt.Sprintf("train-%05d", i), w.project(rng.IntN(max(w.cfg.Projects, 1))), 10, whole, count)
	j.Status = ptr("running")
	w.jobs = append(w.jobs, j)
	return j
}

func jobKey(j *api.Job) string { return *j.Namespace + "/" + *j.ID }
