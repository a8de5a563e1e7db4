package demo

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
)

// syncBuffer is a bytes.Buffer safe for the demo goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDemoComesUpAndStopsCleanly runs the demo as `make demo` does, checks
// that its agents answer and its examples are submitted, then cancels it as
// Ctrl-C does and checks that nothing is left listening.
func TestDemoComesUpAndStopsCleanly(t *testing.T) {
	runDemo(t, false)
}

// TestDemoWithACLs runs the demo as `make demo ACL=1` does: the same story
// with ACLs on, the plugin and the quota service (healthy only if it can
// read Nomad and Consul) on tokens from the shipped policies, and the
// management tokens in the env file for the CLIs.
func TestDemoWithACLs(t *testing.T) {
	runDemo(t, true)
}

func runDemo(t *testing.T, acl bool) {
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	ready := make(chan *localcluster.Cluster, 1)
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() {
		done <- Run(ctx, Config{RepoRoot: root, Dir: dir, Out: &out, ACL: acl,
			Ready: func(c *localcluster.Cluster) { ready <- c }})
	}()

	var cluster *localcluster.Cluster
	select {
	case cluster = <-ready:
	case err := <-done:
		t.Fatalf("demo ended before it was up: %v\n%s", err, out.String())
	case <-time.After(4 * time.Minute):
		t.Fatalf("demo not up after 4 minutes:\n%s", out.String())
	}
	if !strings.Contains(out.String(), readyBanner) {
		t.Fatalf("demo did not print its banner:\n%s", out.String())
	}
	if acl {
		checkACLsOn(t, cluster, dir)
	}
	jobs, _, err := cluster.Nomad.Jobs().List(nil)
	if err != nil {
		t.Fatalf("listing jobs: %v", err)
	}
	examples, _ := filepath.Glob(filepath.Join(root, examplesGlob))
	if len(jobs) != len(examples)+1 {
		t.Fatalf("%d jobs submitted, want one per example (%d) and the quota service", len(jobs), len(examples))
	}
	// The quota service answers on the address the demo printed.
	var quotaURL string
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "Quotas:"); ok {
			quotaURL = strings.Fields(rest)[0]
		}
	}
	if quotaURL == "" {
		t.Fatalf("demo printed no quota service address:\n%s", out.String())
	}
	resp, err := http.Get(quotaURL + "v1/health")
	if err != nil {
		t.Fatalf("quota service at %s: %v", quotaURL, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("quota service health: %s", resp.Status)
	}

	// Every example runs: the whole-GPU training job, the notebook and the
	// four inference replicas on shares.
	testcluster.Eventually(t, 2*time.Minute, func() error {
		for _, j := range jobs {
			summary, _, err := cluster.Nomad.Jobs().Summary(j.ID, nil)
			if err != nil {
				return err
			}
			for group, s := range summary.Summary {
				if s.Queued > 0 || s.Starting > 0 || (s.Running == 0 && s.Complete == 0) {
					return fmt.Errorf("job %s group %s: %d queued, %d starting, %d running",
						j.ID, group, s.Queued, s.Starting, s.Running)
				}
			}
		}
		return nil
	})
	if acl {
		quotaWalkthrough(t, cluster, root, dir)
	} else {
		fractionsStory(t, cluster, root, dir, out.String(), quotaURL)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo stopped with an error: %v\n%s", err, out.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("demo did not stop within a minute of Ctrl-C:\n%s", out.String())
	}
	if !strings.Contains(out.String(), stoppedBanner) {
		t.Fatalf("demo did not report a clean stop:\n%s", out.String())
	}
	for _, addr := range []string{cluster.NomadAddr, cluster.ConsulAddr} {
		if resp, err := http.Get(addr + "/v1/status/leader"); err == nil {
			resp.Body.Close()
			t.Errorf("%s still answers after the demo stopped", addr)
		}
	}
}

// checkACLsOn checks that a request without a token is denied and that
// the env file gives the CLIs the management tokens.
func checkACLsOn(t *testing.T, c *localcluster.Cluster, dir string) {
	t.Helper()
	resp, err := http.Get(c.NomadAddr + "/v1/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Nomad answered a job list without a token: %s", resp.Status)
	}
	env, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NOMAD_TOKEN=\"" + c.NomadToken, "CONSUL_HTTP_TOKEN=\"" + c.ConsulToken} {
		if !strings.Contains(string(env), want) {
			t.Errorf("env file lacks %s...:\n%s", want[:strings.Index(want, "=")], env)
		}
	}
}
