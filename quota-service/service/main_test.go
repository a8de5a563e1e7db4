package service_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/hashicorp/go-hclog"
)

var agents *localcluster.Cluster

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	c, err := newGPUCluster(wholeOnlyPluginConfig, "nvidia/gpu")
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting test cluster:", err)
		os.Exit(1)
	}
	agents = c
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping test cluster:", err)
	}
	os.Exit(code)
}

func needCluster(t testing.TB) *localcluster.Cluster {
	t.Helper()
	if agents == nil {
		t.Skip("integration test: needs real agents; run without -short")
	}
	return agents
}

func logger(t testing.TB) hclog.Logger {
	level := hclog.Info
	if l := os.Getenv("GPUSHARE_TEST_LOG"); l != "" {
		level = hclog.LevelFromString(l)
	}
	return hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: level, Output: testWriter{t}})
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ptr[T any](v T) *T { return &v }
