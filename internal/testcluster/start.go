package testcluster

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
)

// Start starts a cluster for the test and stops it when the test ends. It
// fails the test, with the agents' last log lines, when one does not come up.
//
// In -short mode (`make unit-test`) it skips the test instead: integration
// tests run in full in `make test` and CI.
func Start(t testing.TB, opts localcluster.Options) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	c, err := localcluster.New(opts)
	if err != nil {
		t.Fatalf("starting test cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("stopping test cluster: %v", err)
		}
	})
	return c
}
