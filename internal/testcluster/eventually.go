package testcluster

import (
	"testing"
	"time"
)

// Eventually polls cond every 100 ms until it returns nil, and fails the
// test with cond's last error when timeout passes first. It is the way
// tests wait: never a bare sleep.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
