package device_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// narrowPolicy is what an operator might give the plugin by mistake: the
// shipped policy's node and agent rules, but read-job in one namespace.
const narrowPolicy = `
namespace "default" { capabilities = ["read-job"] }
node { policy = "read" }
agent { policy = "read" }
`

// TestPluginUnderACLs runs the plugin on a real Nomad agent with ACLs on.
// With the shipped policy it publishes and partitions as usual. With a
// token that cannot read namespace "secret", a GPU held whole there looks
// idle: the plugin must not switch it to shares although waiting share
// work wants one, so the GPU is never double-booked. With the shipped
// policy again it sees the holder, and once the holder stops, the GPU is
// switched and the waiting work lands.
func TestPluginUnderACLs(t *testing.T) {
	c, gate := startGatedCluster(t, localcluster.Options{ACL: true})
	defer func() {
		if t.Failed() {
			logPluginLines(t, c)
		}
	}()
	shipped := aclToken(t, c, "gpushare-plugin", readFile(t, "../jobspecs/acl/nomad-gpushare-plugin.policy.hcl"))
	narrow := aclToken(t, c, "default-only", narrowPolicy)
	if _, err := c.Nomad.Namespaces().Register(&nomadapi.Namespace{Name: "secret"}, nil); err != nil {
		t.Fatal(err)
	}

	// The shipped policy: the plugin publishes three whole GPUs and a
	// share landing place.
	gate.useToken(shipped)
	gate.open(t, c)
	waitLayout(t, c, 3, 1)

	// A job of namespace "secret" holds one GPU whole, two default jobs
	// the two others: every whole GPU is busy.
	gpuJobIn(t, c, "secret", "hidden", "gpu", 1)
	hidden := runningIn(t, c, "secret", "hidden")
	held, _ := gpuOf(t, hidden)
	gpuJob(t, c, "wa", "gpu", 1)
	gpuJob(t, c, "wb", "gpu", 1)
	runningEnv(t, c, "wa")
	runningEnv(t, c, "wb")

	// The plugin's token now reads "default" only: the GPU held in
	// "secret" looks idle to it. 70 shares fill the landing place past its
	// room and 60 more wait: with a complete view that would switch an
	// idle GPU to shares, and the only one that looks idle is held.
	gate.useToken(narrow)
	gpuJob(t, c, "fill", "gpu-share", 70)
	runningEnv(t, c, "fill")
	gpuJob(t, c, "s60", "gpu-share", 60)
	waitBlocked(t, c, "s60")
	neverSwitched(t, c, gate, narrow, held)

	// The shipped policy again: the plugin sees the holder and still does
	// not switch; once the holder stops, the GPU is switched and the
	// waiting work lands on it.
	gate.useToken(shipped)
	neverSwitched(t, c, gate, shipped, held)
	if _, _, err := c.Nomad.Jobs().Deregister("hidden", true, &nomadapi.WriteOptions{Namespace: "secret"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a := runningAfter(t, c, "s60", start)
	if u, _ := gpuOf(t, a); u != held {
		t.Errorf("s60 landed on %s, want the GPU freed in secret (%s)", u, held)
	}
	for _, j := range []string{"wa", "wb", "fill", "s60"} {
		stopJob(t, c, j)
	}
}

// neverSwitched checks that the GPU stays offered whole, and the waiting
// share job unplaced, for switchBound after the plugin first read the node
// with the token: a plugin that would switch the GPU withdraws it at the
// first complete read that sees the demand (each poll reads the node while
// the last read was incomplete), and the servers show the withdrawal
// within a client update, well inside switchBound.
func neverSwitched(t *testing.T, c *localcluster.Cluster, gate *nomadGate, token, gpu string) {
	t.Helper()
	from := gate.allocReads(token)
	var readAt time.Time
	testcluster.Eventually(t, 3*liveWindow, func() error {
		fam, err := familyOf(c, gpu)
		if err != nil {
			return err
		}
		if fam != "whole" {
			t.Fatalf("GPU %s, held whole in a namespace the plugin's token may not read, is offered %s", gpu, fam)
		}
		if a, _, err := runningAllocation(c, "s60"); err != nil || a != nil {
			t.Fatalf("s60 placed while GPU %s is held whole: %v", gpu, err)
		}
		if gate.allocReads(token) == from {
			return fmt.Errorf("the plugin has not read the node with the token yet")
		}
		if readAt.IsZero() {
			readAt = time.Now()
		}
		if watched := time.Since(readAt); watched < switchBound {
			return fmt.Errorf("watched for %s of %s", watched.Round(time.Second), switchBound)
		}
		return nil
	})
	t.Logf("GPU %s stayed whole for %s after the plugin read the node with the token", gpu, switchBound)
}

// waitBlocked waits until the job has a blocked evaluation and no
// allocation.
func waitBlocked(t *testing.T, c *localcluster.Cluster, job string) {
	t.Helper()
	waitUnplaced(t, c, job, "blocked", func(e *nomadapi.Evaluation) bool { return e.Status == "blocked" })
}

// aclToken creates a policy with the rules and a client token that has
// it, and returns the token's secret.
func aclToken(t *testing.T, c *localcluster.Cluster, name, rules string) string {
	t.Helper()
	if _, err := c.Nomad.ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: name, Rules: rules}, nil); err != nil {
		t.Fatalf("policy %s: %v", name, err)
	}
	tok, _, err := c.Nomad.ACLTokens().Create(&nomadapi.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
	if err != nil {
		t.Fatalf("token %s: %v", name, err)
	}
	return tok.SecretID
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// runningIn waits for the job of the namespace to run and returns its
// allocation.
func runningIn(t *testing.T, c *localcluster.Cluster, namespace, job string) *nomadapi.Allocation {
	t.Helper()
	q := &nomadapi.QueryOptions{Namespace: namespace}
	var alloc *nomadapi.Allocation
	testcluster.Eventually(t, liveWindow, func() error {
		stubs, _, err := c.Nomad.Jobs().Allocations(job, false, q)
		if err != nil {
			return err
		}
		for _, s := range stubs {
			if s.ClientStatus == "running" {
				alloc, _, err = c.Nomad.Allocations().Info(s.ID, q)
				return err
			}
		}
		return fmt.Errorf("%s/%s not running (%d allocations)", namespace, job, len(stubs))
	})
	return alloc
}
