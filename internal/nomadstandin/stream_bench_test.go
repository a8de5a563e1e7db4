package nomadstandin

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/go-hclog"
)

// BenchmarkStreamCycleParts is one service cycle's reading (Build on the
// event-stream view) and planning, in process, while the stand-in
// publishes 50 events per second: where a cycle's time goes once Nomad is
// no longer listed every cycle. GPUSHARE_SCALE_NODES sets the cluster's
// size (default 1,000 nodes; 20 allocations and 0.1 projects per node,
// as in make bench-scale); listings/op counts the full listings the
// cycles fell back to (0 when the stream keeps up). Run it with
// -cpuprofile to see what dominates.
func BenchmarkStreamCycleParts(b *testing.B) {
	nodes := 1000
	if v, err := strconv.Atoi(os.Getenv("GPUSHARE_SCALE_NODES")); err == nil && v > 0 {
		nodes = v
	}
	s, client := serveStandIn(b, Config{Nodes: nodes, Allocations: 20 * nodes, Projects: max(nodes/10, 1), Pending: nodes / 5})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var relists atomic.Int64
	builder := nomadwatch.NewBuilder(client, hclog.NewNullLogger(), nomadwatch.Options{ResyncInterval: time.Hour,
		OnRelist: func(string, []nomadwatch.Change) { relists.Add(1) }})
	go builder.Follow(ctx, func() {})
	go s.Run(ctx, 50)
	// The first Builds list Nomad in full (start) until the stream is
	// connected; measure the cycles after.
	for i := 0; i < 3; i++ {
		if _, err := builder.Build(ctx, quota.Set{}, state.Records{}); err != nil {
			b.Fatal(err)
		}
	}
	relists.Store(0)
	measureCycles(b, builder)
	b.ReportMetric(float64(relists.Load())/float64(b.N), "listings/op")
}

// BenchmarkFirstBuild is the quota service's first reading of Nomad (a
// resync: every node, allocation and job listed, every job spec read) on
// the stand-in, in process, without events. GPUSHARE_SCALE_NODES sets the
// cluster's size as for BenchmarkStreamCycleParts. Run it with
// -cpuprofile to see what a resync spends.
func BenchmarkFirstBuild(b *testing.B) {
	nodes := 1000
	if v, err := strconv.Atoi(os.Getenv("GPUSHARE_SCALE_NODES")); err == nil && v > 0 {
		nodes = v
	}
	_, client := serveStandIn(b, Config{Nodes: nodes, Allocations: 20 * nodes, Projects: max(nodes/10, 1), Pending: nodes / 5})
	for b.Loop() {
		builder := nomadwatch.NewBuilder(client, hclog.NewNullLogger(), nomadwatch.Options{ResyncInterval: time.Hour})
		if _, err := builder.Build(context.Background(), quota.Set{}, state.Records{}); err != nil {
			b.Fatal(err)
		}
	}
}
