package ranking_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/ranking"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// snapshotOn is a snapshot of the real node id with two GPUs, running the
// i-th ask on GPU i.
func snapshotOn(id string, asks ...cluster.Ask) *cluster.Snapshot {
	s := &cluster.Snapshot{
		Nodes:    []cluster.Node{{Name: id, CPUMilli: 8000, MemoryMiB: 16384, GPUs: []cluster.GPU{{Model: "H100"}, {Model: "H100"}}}},
		Projects: []cluster.Project{{Name: "p"}},
	}
	for i, a := range asks {
		s.Allocations = append(s.Allocations, cluster.Allocation{ID: fmt.Sprint(i), Project: "p", Job: fmt.Sprint(i), Node: id, GPUs: []int{i}, Ask: a})
	}
	return s
}

// TestPublisherWritesOnlyChanges: on a real Nomad node, the publisher
// writes the ranks once, writes nothing while they stay the same (nor
// after a restart of the leader, which reads them back), leaves nodes for
// later beyond MaxCalls, holds a change back within MinInterval, and
// unsets the key of a class that left.
func TestPublisherWritesOnlyChanges(t *testing.T) {
	c := testcluster.Start(t, localcluster.Options{})
	ctx := context.Background()
	id := c.NodeID
	share := cluster.Ask{CPUMilli: 100, MemoryMiB: 64, Shares: 50}
	whole := cluster.Ask{CPUMilli: 100, MemoryMiB: 64, WholeGPUs: 1}

	pub := ranking.NewPublisher(c.Nomad, nil)
	pub.MinInterval, pub.ComputeEvery = time.Hour, 0
	publish := func(p *ranking.Publisher, s *cluster.Snapshot) ranking.Report {
		t.Helper()
		rep, err := p.Publish(ctx, s, nil)
		if err != nil || len(rep.Errors) > 0 {
			t.Fatalf("publish: %v %v", err, rep.Errors)
		}
		return rep
	}
	if rep := publish(pub, snapshotOn(id, share)); !slices.Equal(rep.Written, []string{id}) {
		t.Fatalf("first publish wrote %v, want node %s", rep.Written, id)
	}
	waitMeta(t, c, id, map[string]string{ranking.Prefix + "s50-c1": "1"})
	if rep := publish(pub, snapshotOn(id, share)); len(rep.Written)+len(rep.Deferred) > 0 {
		t.Errorf("unchanged ranks: wrote %v, deferred %v; want nothing", rep.Written, rep.Deferred)
	}
	limited := ranking.NewPublisher(c.Nomad, nil)
	limited.MaxCalls = 0
	if rep := publish(limited, snapshotOn(id, share)); len(rep.Written) > 0 || !slices.Equal(rep.Deferred, []string{id}) {
		t.Errorf("no calls allowed: wrote %v, deferred %v; want the node deferred", rep.Written, rep.Deferred)
	}
	fresh := ranking.NewPublisher(c.Nomad, nil)
	if rep := publish(fresh, snapshotOn(id, share)); len(rep.Written) > 0 {
		t.Errorf("a new leader rewrote ranks the node already carries: %v", rep.Written)
	}

	// A whole-GPU job joins: a new class, held back within MinInterval.
	changed := snapshotOn(id, share, whole)
	if rep := publish(pub, changed); len(rep.Written) > 0 || !slices.Equal(rep.Deferred, []string{id}) {
		t.Errorf("change within MinInterval: wrote %v, deferred %v; want deferred", rep.Written, rep.Deferred)
	}
	pub.MinInterval = 0
	if rep := publish(pub, changed); !slices.Equal(rep.Written, []string{id}) {
		t.Errorf("change after MinInterval: wrote %v, want node %s", rep.Written, id)
	}
	// The share leaves: its key is unset.
	if rep := publish(pub, snapshotOn(id, whole)); !slices.Equal(rep.Written, []string{id}) {
		t.Errorf("class left: wrote %v, want node %s", rep.Written, id)
	}
	waitMeta(t, c, id, map[string]string{ranking.Prefix + "w1-c1": "1", ranking.Prefix + "s50-c1": ""})
}

// waitMeta waits until the servers show node id's metadata with want's
// values ("" for absent).
func waitMeta(t *testing.T, c *localcluster.Cluster, id string, want map[string]string) {
	t.Helper()
	testcluster.Eventually(t, 60*time.Second, func() error {
		node, _, err := c.Nomad.Nodes().Info(id, nil)
		if err != nil {
			return err
		}
		return metaHas(node, want)
	})
}

func metaHas(node *nomadapi.Node, want map[string]string) error {
	for k, v := range want {
		got, ok := node.Meta[k]
		if v == "" && ok || v != "" && got != v {
			return fmt.Errorf("node %s: %s=%q (present %t), want %q", node.ID, k, got, ok, v)
		}
	}
	return nil
}
