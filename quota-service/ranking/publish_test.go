package ranking

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestPublishComputesAtMostEveryComputeEvery: a Publish within
// ComputeEvery of the last one that computed sends Nomad nothing; one
// after it, and one after Forget (a new leader), computes and reads the
// nodes again.
func TestPublishComputesAtMostEveryComputeEvery(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(client, nil)
	now := time.Unix(1_000, 0)
	p.now = func() time.Time { return now }
	var skipped bool
	publish := func(step time.Duration) int64 {
		t.Helper()
		now = now.Add(step)
		before := calls.Load()
		rep, err := p.Publish(context.Background(), twoNodes(), nil)
		if err != nil {
			t.Fatal(err)
		}
		skipped = rep.Skipped
		return calls.Load() - before
	}
	if n := publish(0); n == 0 {
		t.Fatal("the first Publish read no node")
	}
	if n := publish(p.ComputeEvery / 2); n != 0 || !skipped {
		t.Errorf("a Publish within ComputeEvery sent %d requests (report skipped: %v), want none", n, skipped)
	}
	if n := publish(p.ComputeEvery); n == 0 {
		t.Error("a Publish after ComputeEvery read no node")
	}
	p.Forget()
	if n := publish(time.Millisecond); n == 0 {
		t.Error("a Publish after Forget read no node")
	}
}

// TestPublishBoundsEachCall: a node whose metadata call hangs (Nomad
// forwards it to a client agent that no longer answers) costs one
// CallTimeout and an error naming it; the other node is published, and
// the cycle that publishes goes on.
func TestPublishBoundsEachCall(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("node_id") == "x" {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"Meta": {}}`))
	}))
	defer srv.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p := NewPublisher(client, nil)
	p.CallTimeout = 100 * time.Millisecond
	done := make(chan Report, 1)
	go func() {
		rep, _ := p.Publish(context.Background(), twoNodes(), nil)
		done <- rep
	}()
	select {
	case rep := <-done:
		if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0].Error(), "node x") {
			t.Errorf("errors %v: want one, naming node x", rep.Errors)
		}
		if len(rep.Written) != 1 || rep.Written[0] != "y" {
			t.Errorf("written %v: want node y", rep.Written)
		}
	case <-time.After(30 * time.Second): // a liveness bound, far above the 100 ms timeout
		t.Fatal("Publish still waits on the node that does not answer")
	}
}
