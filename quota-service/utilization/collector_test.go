package utilization

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
	nomadapi "github.com/hashicorp/nomad/api"
)

// fakePlugin serves a report on ip:port (port 0: any).
func fakePlugin(t *testing.T, ip string, port int, r nodeusage.Report) int {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != nodeusage.Path {
			http.NotFound(w, req)
			return
		}
		json.NewEncoder(w).Encode(r)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return ln.Addr().(*net.TCPAddr).Port
}

func gpuNode(name, ip, status string) *nomadapi.NodeListStub {
	return &nomadapi.NodeListStub{ID: name, Name: name, Address: ip, Status: status, NodeResources: &nomadapi.NodeResources{
		Devices: []*nomadapi.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu-share", Name: "H100"}}}}
}

func TestSweepReadsEveryReadyGPUNode(t *testing.T) {
	now := time.Now()
	port := fakePlugin(t, "127.0.0.1", 0, nodeusage.Report{NodeID: "n1", At: now, Tenants: []nodeusage.Tenant{{Job: "a"}}})
	fakePlugin(t, "127.0.0.2", port, nodeusage.Report{NodeID: "n2", At: now})
	fakePlugin(t, "127.0.0.4", port, nodeusage.Report{NodeID: "n4", At: now.Add(-time.Hour)})
	nodes := []*nomadapi.NodeListStub{
		gpuNode("n1", "127.0.0.1", "ready"), gpuNode("n2", "127.0.0.2", "ready"),
		gpuNode("n3", "127.0.0.3", "ready"), // no plugin answers
		gpuNode("n4", "127.0.0.4", "ready"), // a stuck monitor
		gpuNode("down", "127.0.0.5", "down"),
		{ID: "cpu", Name: "cpu", Address: "127.0.0.6", Status: "ready", NodeResources: &nomadapi.NodeResources{}},
	}
	nomad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/nodes" || r.URL.Query().Get("resources") != "true" {
			http.Error(w, "fake: want /v1/nodes?resources=true", http.StatusBadRequest)
			return
		}
		json.NewEncoder(w).Encode(nodes)
	}))
	defer nomad.Close()
	client, _ := nomadapi.NewClient(&nomadapi.Config{Address: nomad.URL})
	c := New(Config{Nomad: client, Port: port, Timeout: 2 * time.Second})
	s := c.Sweep(context.Background())
	if s.Err != "" || s.Nodes != 4 || len(s.Reports) != 2 {
		t.Fatalf("sweep: %+v", s)
	}
	if !strings.Contains(s.Failed["n3"], "127.0.0.3") || !strings.Contains(s.Failed["n4"], "old") || len(s.Failed) != 2 {
		t.Errorf("failed nodes: %v", s.Failed)
	}
}
