package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunSimulated: the check passes end to end on a simulated machine.
func TestRunSimulated(t *testing.T) {
	env := filepath.Join(t.TempDir(), "env")
	if err := run(options{backend: "simulated", timeout: 30 * time.Second, shares: 25, envFile: env}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "GPUSHARE_FRACTION=0.25\n") {
		t.Errorf("-env-file should hold the reservation's environment with the fraction of 25 shares, got:\n%s", b)
	}
}

// TestRunNVML: on this machine's NVML the check passes with a GPU, and
// without a driver it fails with NVML's error and the hint.
func TestRunNVML(t *testing.T) {
	err := run(options{backend: "nvml", timeout: 30 * time.Second, shares: 25})
	if err != nil && !strings.Contains(err.Error(), "NVML failed to initialize: ERROR_LIBRARY_NOT_FOUND (libnvidia-ml.so.1 not found") {
		t.Fatalf("without a GPU the check must say NVML failed to initialize: %v", err)
	}
}
