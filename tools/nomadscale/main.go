// Command nomadscale measures a real Nomad server (the pinned agent) with
// GPU nodes in the device plugin's layout: how its memory and the latency
// of placing a GPU share grow with the number of nodes, for each
// shares_per_gpu. Nodes are registered through Nomad's own client RPC
// (Node.Register, as every Nomad client does), each with 8 simulated H100s
// published by the plugin's real publication code (device.SimulatedLayout:
// 4 GPUs in shares, 4 whole); heartbeats are made unnecessary by a long
// minimum heartbeat TTL, so nothing but the server runs. One line per step:
//
//	nomad_scale shares_per_gpu=100 nodes=1000 rss_mib=... heap_mib=... place_ms_p50=... place_ms_max=...
//
// rss_mib is the server's VmRSS, heap_mib Go's heap in use (nomad.runtime.
// alloc_bytes) after a GC settle; place_ms is from registering a batch job
// asking for 10% of one GPU (nvidia/gpu-share) until its allocation exists.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/device"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/helper/pool"
	"github.com/hashicorp/nomad/helper/uuid"
	"github.com/hashicorp/nomad/nomad/mock"
	"github.com/hashicorp/nomad/nomad/structs"
	dev "github.com/hashicorp/nomad/plugins/device"
	psstructs "github.com/hashicorp/nomad/plugins/shared/structs"
)

func main() {
	steps := flag.String("steps", "0,250,500,1000,2000", "node counts to measure at, ascending")
	shares := flag.String("shares-per-gpu", "100,10", "shares_per_gpu values, one server each")
	placements := flag.Int("placements", 5, "share placements timed per step")
	flag.Parse()
	var counts, pers []int
	for _, s := range strings.Split(*steps, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "nomadscale: -steps:", err)
			os.Exit(2)
		}
		counts = append(counts, n)
	}
	for _, s := range strings.Split(*shares, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "nomadscale: -shares-per-gpu:", err)
			os.Exit(2)
		}
		pers = append(pers, n)
	}
	for _, per := range pers {
		if err := measure(per, counts, *placements); err != nil {
			fmt.Fprintln(os.Stderr, "nomadscale:", err)
			os.Exit(1)
		}
	}
}

// server is a running Nomad server agent.
type server struct {
	cmd     *exec.Cmd
	http    string
	rpcAddr string
	client  *api.Client
	rpc     *rpc.Client
	dir     string
}

func measure(per int, counts []int, placements int) error {
	s, err := startServer()
	if err != nil {
		return err
	}
	defer s.stop()
	groups, err := device.SimulatedLayout(gpu.SimOptions{Preset: gpu.PresetH100}, per, 4)
	if err != nil {
		return err
	}
	registered := 0
	for _, n := range counts {
		if err := s.register(registered, n, groups); err != nil {
			return err
		}
		registered = n
		rss, heap, err := s.memory()
		if err != nil {
			return err
		}
		var lat []time.Duration
		if n > 0 {
			for i := range placements {
				d, err := s.place(fmt.Sprintf("share-%d-%d-%d", per, n, i), per)
				if err != nil {
					return err
				}
				lat = append(lat, d)
			}
		}
		slices.Sort(lat)
		p50, worst := 0.0, 0.0
		if len(lat) > 0 {
			p50, worst = ms(lat[len(lat)/2]), ms(lat[len(lat)-1])
		}
		fmt.Printf("nomad_scale shares_per_gpu=%d nodes=%d rss_mib=%.0f heap_mib=%.0f place_ms_p50=%.0f place_ms_max=%.0f\n", per, n, rss, heap, p50, worst)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func freePorts(n int) ([]int, error) {
	var out []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// startServer starts a server-only Nomad agent with a long minimum
// heartbeat TTL and waits for its leader.
func startServer() (*server, error) {
	bin, err := localcluster.AgentBinary("nomad")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpushare-nomadscale-")
	if err != nil {
		return nil, err
	}
	p, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`
data_dir = %q
bind_addr = "127.0.0.1"
log_level = "WARN"
advertise { http = "127.0.0.1", rpc = "127.0.0.1", serf = "127.0.0.1" }
ports { http = %d, rpc = %d, serf = %d }
server {
  enabled = true
  bootstrap_expect = 1
  min_heartbeat_ttl = "1h"
  heartbeat_grace = "1h"
}
client { enabled = false }
telemetry { disable_hostname = true, collection_interval = "1s" }
`, filepath.Join(dir, "data"), p[0], p[1], p[2])
	path := filepath.Join(dir, "nomad.hcl")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "nomad.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "agent", "-config", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, dir: dir, http: fmt.Sprintf("http://127.0.0.1:%d", p[0]), rpcAddr: fmt.Sprintf("127.0.0.1:%d", p[1])}
	if s.client, err = api.NewClient(&api.Config{Address: s.http}); err != nil {
		s.stop()
		return nil, err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if l, err := s.client.Status().Leader(); err == nil && l != "" {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			s.stop()
			return nil, fmt.Errorf("nomad server without a leader after 60 s; its log ends:\n%s", log[max(0, len(log)-2000):])
		}
		time.Sleep(100 * time.Millisecond)
	}
	conn, err := net.Dial("tcp", s.rpcAddr)
	if err != nil {
		s.stop()
		return nil, err
	}
	if _, err := conn.Write([]byte{byte(pool.RpcNomad)}); err != nil {
		s.stop()
		return nil, err
	}
	s.rpc = rpc.NewClientWithCodec(pool.NewClientCodec(conn))
	return s, nil
}

func (s *server) stop() {
	if s.rpc != nil {
		s.rpc.Close()
	}
	localcluster.StopProcess(s.cmd, 15*time.Second)
	os.RemoveAll(s.dir)
}

// register registers nodes from..to-1 with the plugin's device groups.
func (s *server) register(from, to int, groups []*dev.DeviceGroup) error {
	var wg sync.WaitGroup
	errs := make(chan error, to-from)
	sem := make(chan struct{}, 8)
	for i := from; i < to; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			n := mock.Node()
			n.ID, n.SecretID, n.Name = uuid.Generate(), uuid.Generate(), fmt.Sprintf("gpu-%05d", i)
			n.Drivers = map[string]*structs.DriverInfo{"raw_exec": {Detected: true, Healthy: true}}
			n.Attributes["driver.raw_exec"] = "1"
			n.NodeResources.Devices = nodeDevices(groups)
			if err := n.ComputeClass(); err != nil {
				errs <- err
				return
			}
			req := structs.NodeRegisterRequest{Node: n, WriteRequest: structs.WriteRequest{Region: "global"}}
			var resp structs.NodeUpdateResponse
			if err := s.rpc.Call("Node.Register", &req, &resp); err != nil {
				errs <- fmt.Errorf("registering node %d: %w", i, err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// nodeDevices converts the plugin's groups to the server's node devices,
// as the client's device manager does.
func nodeDevices(groups []*dev.DeviceGroup) []*structs.NodeDeviceResource {
	out := make([]*structs.NodeDeviceResource, 0, len(groups))
	for _, g := range groups {
		r := &structs.NodeDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name, Attributes: map[string]*psstructs.Attribute{}}
		for k, a := range g.Attributes {
			r.Attributes[k] = a.Copy()
		}
		for _, d := range g.Devices {
			nd := &structs.NodeDevice{ID: d.ID, Healthy: d.Healthy, HealthDescription: d.HealthDesc}
			if d.HwLocality != nil {
				nd.Locality = &structs.NodeDeviceLocality{PciBusID: d.HwLocality.PciBusID}
			}
			r.Instances = append(r.Instances, nd)
		}
		out = append(out, r)
	}
	return out
}

// memory returns the server's VmRSS and Go heap in MiB, after a few
// seconds for the registrations to settle.
func (s *server) memory() (rss, heap float64, err error) {
	time.Sleep(5 * time.Second)
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			rss = kb / 1024
		}
	}
	resp, err := http.Get(s.http + "/v1/metrics")
	if err != nil {
		return rss, 0, err
	}
	defer resp.Body.Close()
	var m struct {
		Gauges []struct {
			Name  string
			Value float64
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return rss, 0, err
	}
	for _, g := range m.Gauges {
		if g.Name == "nomad.runtime.alloc_bytes" {
			heap = g.Value / (1 << 20)
		}
	}
	return rss, heap, nil
}

// place registers a batch job asking for 10% of one GPU and returns the
// time until its allocation exists; the job is then purged.
func (s *server) place(name string, per int) (time.Duration, error) {
	count := uint64(max(per/10, 1))
	task := api.NewTask("t", "raw_exec")
	task.Config = map[string]any{"command": "/bin/true"}
	task.Resources = &api.Resources{CPU: ptr(100), MemoryMB: ptr(64), Devices: []*api.RequestedDevice{{Name: "nvidia/gpu-share", Count: &count}}}
	job := api.NewBatchJob(name, name, "global", 50)
	job.Datacenters = []string{"*"}
	job.AddTaskGroup(api.NewTaskGroup("g", 1).AddTask(task))
	start := time.Now()
	if _, _, err := s.client.Jobs().Register(job, nil); err != nil {
		return 0, fmt.Errorf("registering %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		allocs, _, err := s.client.Jobs().Allocations(name, false, nil)
		if err == nil && len(allocs) > 0 {
			d := time.Since(start)
			_, _, _ = s.client.Jobs().Deregister(name, true, nil)
			return d, nil
		}
		time.Sleep(2 * time.Millisecond)
	}
	sum, _, _ := s.client.Jobs().Summary(name, nil)
	return 0, fmt.Errorf("job %s not placed within 2 min (summary %+v)", name, sum)
}

func ptr[T any](v T) *T { return &v }
