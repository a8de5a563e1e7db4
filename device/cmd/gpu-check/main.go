// Command gpu-check runs the gpushare device plugin against this machine's
// GPUs and prints what it would give Nomad: the device groups of its
// fingerprint, one round of statistics, and a Reserve (a quarter of the
// first GPU offered as shares, else the first whole GPU or MIG device).
// `make gpu-check` runs it on a GPU host. Without an NVIDIA driver it
// fails with NVML's error.
//
// The plugin reads GPU usage from Nomad; by default it reads an empty node
// from a stand-in served in this process, so no Nomad agent is needed and
// nothing is placed. With -nomad-address it reads the local agent (read
// only: the check publishes nothing to Nomad).
//
// Two more checks serve a hand test on a GPU host: -env-file writes the
// reservation's environment (what a task would get, MPS limits included
// with -mps-pipe-dir) for a CUDA program to run under, and -watch lists the
// GPUs' compute processes as the plugin reads them from NVML (PID, memory,
// SM utilization) once a second.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/gpushare/nomad-gpushare/device"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	"github.com/hashicorp/nomad/plugins/base"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// standInNode is the node ID of the in-process Nomad stand-in.
const standInNode = "gpu-check"

// options are the check's flags.
type options struct {
	backend   string
	nomadAddr string
	timeout   time.Duration
	verbose   bool
	// shares is how many share instances the Reserve asks for.
	shares int
	// mpsPipeDir, when set, turns on MPS isolation with this pipe directory.
	mpsPipeDir string
	// envFile, when set, receives the reservation's environment as
	// KEY=VALUE lines.
	envFile string
	// watch is how long to list the GPUs' compute processes after the
	// Reserve (0: not at all).
	watch time.Duration
}

func main() {
	var o options
	flag.StringVar(&o.backend, "backend", device.BackendNVML, `"nvml" (this machine's GPUs) or "simulated" (go-nvml mock machines, for a check without a GPU)`)
	flag.StringVar(&o.nomadAddr, "nomad-address", "", "read GPU usage from this Nomad agent instead of an empty stand-in node")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for GPUs to be offered")
	flag.BoolVar(&o.verbose, "v", false, "print the plugin's log")
	flag.IntVar(&o.shares, "shares", 25, "share instances to reserve (of one GPU's 100)")
	flag.StringVar(&o.mpsPipeDir, "mps-pipe-dir", "", "isolate shares with the MPS control daemon answering in this pipe directory")
	flag.StringVar(&o.envFile, "env-file", "", "write the reservation's environment to this file (KEY=VALUE lines)")
	flag.DurationVar(&o.watch, "watch", 0, "after the Reserve, list the GPUs' compute processes every second for this long")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "gpu-check: %v\n", err)
		os.Exit(1)
	}
}

// run configures the plugin and runs the checks.
func run(o options) error {
	cfg := device.DefaultConfig()
	cfg.Backend, cfg.SwitchSettlePeriod, cfg.NomadPollPeriod = o.backend, "0s", "200ms"
	if o.mpsPipeDir != "" {
		cfg.MPSEnabled, cfg.MPSPipeDirectory = true, o.mpsPipeDir
	}
	if o.nomadAddr == "" {
		stand := standIn()
		defer stand.Close()
		cfg.NomadAddress, cfg.NodeID = stand.URL, standInNode
	} else {
		cfg.NomadAddress = o.nomadAddr
	}
	level := hclog.Off
	if o.verbose {
		level = hclog.Debug
	}
	p := device.New(hclog.New(&hclog.LoggerOptions{Output: os.Stderr, Level: level}))
	defer p.Shutdown()
	var buf []byte
	if err := base.MsgPackEncode(&buf, &cfg); err != nil {
		return err
	}
	if err := p.SetConfig(&base.Config{PluginConfig: buf}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	groups, err := fingerprint(ctx, p)
	if err != nil {
		return err
	}
	printGroups(groups)
	if err := stats(ctx, p); err != nil {
		return err
	}
	envs, err := reserve(p, groups, o.shares)
	if err != nil {
		return err
	}
	if o.envFile != "" {
		if err := writeEnv(o.envFile, envs); err != nil {
			return err
		}
	}
	if o.watch > 0 {
		return watchProcesses(o.backend, o.watch)
	}
	return nil
}

// standIn serves the Nomad endpoints the plugin reads for an empty node:
// ACLs off, no allocation, no waiting work.
func standIn() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Nomad-Index", "1")
		var body any
		switch r.URL.Path {
		case "/v1/acl/token/self":
			body = &api.ACLToken{AccessorID: "acls-disabled", Type: "client"}
		case "/v1/node/" + standInNode:
			body = &api.Node{ID: standInNode, Datacenter: "dc1", NodePool: "default", NodeResources: &api.NodeResources{}}
		case "/v1/node/" + standInNode + "/allocations":
			body = []*api.Allocation{}
		case "/v1/evaluations":
			body = []*api.Evaluation{}
		default:
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
}

// fingerprint waits for the first fingerprint that offers a device, or
// that reports NVML's failure.
func fingerprint(ctx context.Context, p *device.Plugin) ([]*dev.DeviceGroup, error) {
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: %w", err)
	}
	var last []*dev.DeviceGroup
	for {
		select {
		case <-ctx.Done():
			printGroups(last)
			return nil, errors.New("no device offered in time (see the health of the groups above; -v prints the plugin's log)")
		case r, ok := <-ch:
			if !ok {
				return nil, errors.New("fingerprint stream ended")
			}
			if r.Error != nil {
				return nil, fmt.Errorf("fingerprint: %w", r.Error)
			}
			last = r.Devices
			for _, g := range r.Devices {
				if g.Name == device.UnavailableGroup {
					return nil, fmt.Errorf("no GPU: %s", g.Devices[0].HealthDesc)
				}
				for _, d := range g.Devices {
					if d.Healthy {
						return r.Devices, nil
					}
				}
			}
		}
	}
}
