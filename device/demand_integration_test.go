package device_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	hclog "github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// startDemandService runs the quota service in process on c, publishing
// the node demand with a 2 s heartbeat; stop ends it and waits.
func startDemandService(t testing.TB, c *localcluster.Cluster) (stop func()) {
	t.Helper()
	layout := kvlayout.New("gpushare-demand-test")
	svc := service.New(service.Config{Nomad: c.Nomad, Consul: c.Consul, Layout: layout, Instance: "demand-test",
		Log:        hclog.New(&hclog.LoggerOptions{Name: "quota", Level: hclog.Warn, Output: testWriter{t}}),
		SessionTTL: 10 * time.Second, LockDelay: time.Millisecond, PlanInterval: time.Second,
		Demand: service.DemandConfig{Publish: true, Beat: 2 * time.Second}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(func() {
		stop()
		c.Consul.KV().DeleteTree(layout.Root+"/", nil)
	})
	return stop
}

// testWriter writes log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// pluginLogs counts the agent's log lines with what.
func pluginLogs(c *localcluster.Cluster, what string) int {
	return strings.Count(c.NomadLogTail(1000000), what)
}

// startDemandCluster starts the gated cluster of the published-demand
// tests, open, with its node's idle layout (three whole GPUs and a share
// landing place); the plugin's log lines are logged if the test fails.
func startDemandCluster(t *testing.T) (*localcluster.Cluster, *nomadGate) {
	t.Helper()
	c, gate := startGatedClusterWith(t, localcluster.Options{}, pluginConfig)
	gate.open(t, c)
	waitLayout(t, c, 3, 1)
	t.Cleanup(func() {
		if t.Failed() {
			logPluginLines(t, c)
		}
	})
	return c, gate
}

// TestPublishedDemandOnRealNomad: a four-whole-GPU job on the idle node
// (three whole GPUs and a share landing place) runs, first with no quota
// service (the plugin lists the blocked evaluations to learn the demand),
// then with the service publishing the node's demand: the plugin then
// lists no blocked evaluation at all, and the job still runs. When the
// service stops, the plugin reads Nomad itself again.
func TestPublishedDemandOnRealNomad(t *testing.T) {
	c, gate := startDemandCluster(t)

	// No service: the fallback, the plugin's own reads.
	before := gate.demandListings()
	gpuJob(t, c, "alone", "gpu", 4)
	runningEnv(t, c, "alone")
	if gate.demandListings() == before {
		t.Fatal("with no quota service, the plugin learned of the four-GPU job without listing blocked evaluations")
	}
	stopJob(t, c, "alone")
	waitLayout(t, c, 3, 1)

	// The service publishes: the plugin takes its demand.
	const fromService = "taking waiting GPU demand from the quota service"
	const fallback = "published demand is not fresh: listing blocked evaluations"
	stop := startDemandService(t, c)
	testcluster.Eventually(t, liveWindow, func() error {
		if pluginLogs(c, fromService) == 0 {
			return errors.New("the plugin does not take the published demand yet")
		}
		return nil
	})
	before, fellBack := gate.demandListings(), pluginLogs(c, fallback)
	start := time.Now()
	gpuJob(t, c, "published", "gpu", 4)
	runningEnv(t, c, "published")
	t.Logf("four-GPU job ran %s after submission, with the published demand", time.Since(start).Round(100*time.Millisecond))
	if n := gate.demandListings() - before; n != 0 {
		t.Fatalf("with the service publishing, the plugin listed blocked evaluations %d times", n)
	}
	if n := pluginLogs(c, fallback) - fellBack; n != 0 {
		t.Fatalf("the plugin fell back to its own reads %d times while the service ran", n)
	}
	stopJob(t, c, "published")
	waitLayout(t, c, 3, 1)
	checkDemandRepaired(t, c)

	// The service stops (its heartbeat is deleted): the plugin reads
	// Nomad itself again.
	fellBack = pluginLogs(c, fallback)
	stop()
	testcluster.Eventually(t, liveWindow, func() error {
		if pluginLogs(c, fallback) == fellBack {
			return fmt.Errorf("the plugin still takes the published demand (%d demand listings)", gate.demandListings())
		}
		return nil
	})
}

// checkDemandRepaired: the leader leaves its node variable alone while
// nobody else writes it (two beats, each with its check, leave the
// variable's modify index as it was: what the leader's write returned is
// what Nomad lists), and writes it again when an operator deletes it.
func checkDemandRepaired(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	path := nodedemand.NodePath(nodedemand.DefaultPrefix, c.NodeID)
	vars := c.Nomad.Variables()
	read := func() (*nomadapi.Variable, error) {
		v, _, err := vars.Read(path, &nomadapi.QueryOptions{Namespace: nodedemand.DefaultNamespace})
		return v, err
	}
	beat := func() (uint64, error) {
		v, _, err := vars.Read(nodedemand.LeaderPath(nodedemand.DefaultPrefix), &nomadapi.QueryOptions{Namespace: nodedemand.DefaultNamespace})
		if err != nil {
			return 0, err
		}
		l, err := nodedemand.DecodeLeader(v.Items)
		return l.Seq, err
	}
	var before *nomadapi.Variable
	var seq uint64
	testcluster.Eventually(t, liveWindow, func() (err error) {
		if before, err = read(); err != nil {
			return fmt.Errorf("the leader's demand of the node: %w", err)
		}
		seq, err = beat()
		return err
	})
	testcluster.Eventually(t, liveWindow, func() error {
		if now, err := beat(); err != nil || now < seq+2 {
			return fmt.Errorf("heartbeat %d, waiting for %d (%v)", now, seq+2, err)
		}
		return nil
	})
	if after, err := read(); err != nil || after.ModifyIndex != before.ModifyIndex {
		t.Fatalf("the leader wrote its unchanged node demand again (modify index %d, then %v: %v)", before.ModifyIndex, after, err)
	}
	if _, err := vars.Delete(path, &nomadapi.WriteOptions{Namespace: nodedemand.DefaultNamespace}); err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, liveWindow, func() error {
		v, err := read()
		if err != nil {
			return fmt.Errorf("the node's demand deleted by an operator is not written again yet: %w", err)
		}
		if n, err := nodedemand.DecodeNode(v.Items); err != nil || n.Epoch == "" {
			return fmt.Errorf("the node's demand written again reads %+v (%v)", n, err)
		}
		return nil
	})
}
