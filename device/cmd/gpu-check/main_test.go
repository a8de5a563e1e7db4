package main

import (
	"strings"
	"testing"
	"time"
)

// TestRunSimulated: the check passes end to end on a simulated machine.
func TestRunSimulated(t *testing.T) {
	if err := run("simulated", "", 30*time.Second, false); err != nil {
		t.Fatal(err)
	}
}

// TestRunNVML: on this machine's NVML the check passes with a GPU, and
// without a driver it fails with NVML's error and the hint.
func TestRunNVML(t *testing.T) {
	err := run("nvml", "", 30*time.Second, false)
	if err != nil && !strings.Contains(err.Error(), "NVML failed to initialize: ERROR_LIBRARY_NOT_FOUND (libnvidia-ml.so.1 not found") {
		t.Fatalf("without a GPU the check must say NVML failed to initialize: %v", err)
	}
}
