// Package nodeusage is the per-node GPU usage report: what each tenant of
// a node's GPUs (a task of an allocation holding gpushare devices) is
// guaranteed, may use and really uses, the GPU processes of no tenant, and
// the recent kills and moves. The device plugin serves it as JSON at
// /v1/usage (beside Prometheus metrics at /metrics) on its usage_listen
// address; the quota service reads it from every GPU node to show each
// project's allocated and used GPUs (docs/design.md, "Dynamic fractions
// and the node-level scheduler").
package nodeusage

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Path is where the plugin serves the report.
const Path = "/v1/usage"

// Report is one node's usage, as of the plugin's last monitor cycle.
type Report struct {
	NodeID string    `json:"node_id"`
	At     time.Time `json:"at"`
	// Enforcement is "kill" (the borrowing rule kills) or "report" (it only
	// records what it would kill).
	Enforcement string        `json:"enforcement"`
	GPUs        []GPU         `json:"gpus"`
	Tenants     []Tenant      `json:"tenants"`
	Outside     []Process     `json:"outside"`
	Kills       []Kill        `json:"recent_kills"`
	Moves       []Move        `json:"recent_moves"`
	Totals      Totals        `json:"totals"`
	Errors      []string      `json:"errors,omitempty"`
	Period      time.Duration `json:"period_ns"`
}

// GPU is one physical GPU.
type GPU struct {
	UUID     string `json:"uuid"`
	Index    int    `json:"index"`
	TotalMiB uint64 `json:"total_mib"`
	// UsedMiB is what its processes use (tenants' and others').
	UsedMiB uint64 `json:"used_mib"`
	SMPct   uint32 `json:"sm_pct"`
	// Guests are the keys of tenants running here away from their home.
	Guests []string `json:"guests,omitempty"`
	// ShortMiB: free memory lacks this much for every tenant here to
	// reach its request, and no tenant above its request is left to kill
	// (processes of no tenant hold it).
	ShortMiB uint64 `json:"short_mib,omitempty"`
}

// Tenant is one task holding gpushare devices, with its use of the GPU it
// physically runs on.
type Tenant struct {
	AllocID   string `json:"alloc_id"`
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Group     string `json:"group"`
	Task      string `json:"task"`
	// Whole: it holds whole GPUs (GPU is then the first; request and
	// limit are all of them).
	Whole bool `json:"whole"`
	// Home is the GPU its Nomad instances name; GPU where it runs (they
	// differ for a guest of the node-level scheduler).
	Home  string `json:"home"`
	GPU   string `json:"gpu"`
	Guest bool   `json:"guest"`
	// Request and limit in GPUs (fractions) and MiB of the GPU it runs on.
	Request    float64 `json:"request"`
	Limit      float64 `json:"limit"`
	RequestMiB uint64  `json:"request_mib"`
	LimitMiB   uint64  `json:"limit_mib"`
	// GPUMiB is the memory of one of its GPUs, for converting MiB to GPUs.
	GPUMiB  uint64 `json:"gpu_mib"`
	UsedMiB uint64 `json:"used_mib"`
	// SMPct is the SM utilization of its processes (percent of one GPU;
	// up to 100 per GPU held). Under MPS it reads 0: NVML charges all
	// clients' SM utilization to the MPS server, an outside process
	// (docs/verification.md, "On a GPU").
	SMPct uint32 `json:"sm_pct"`
	PIDs  []int  `json:"pids,omitempty"`
}

// Process is a GPU process of no tenant of its GPU: of no allocation, of
// an allocation whose task holds no gpushare device on that GPU, or of an
// allocation Nomad does not list for this node (yet).
type Process struct {
	PID     int    `json:"pid"`
	GPU     string `json:"gpu"`
	UsedMiB uint64 `json:"used_mib"`
	SMPct   uint32 `json:"sm_pct"`
	Command string `json:"command"`
	AllocID string `json:"alloc_id,omitempty"`
	Task    string `json:"task,omitempty"`
	Why     string `json:"why"`
}

// Kill is one tenant killed (or, with enforcement "report", that would
// have been) by the borrowing rule.
type Kill struct {
	At         time.Time `json:"at"`
	AllocID    string    `json:"alloc_id"`
	Namespace  string    `json:"namespace"`
	Job        string    `json:"job"`
	Task       string    `json:"task"`
	GPU        string    `json:"gpu"`
	PIDs       []int     `json:"pids"`
	UsedMiB    uint64    `json:"used_mib"`
	RequestMiB uint64    `json:"request_mib"`
	LimitMiB   uint64    `json:"limit_mib"`
	Reason     string    `json:"reason"`
	Detail     string    `json:"detail"`
	Enforced   bool      `json:"enforced"`
}

// Move is a guest sent back by the node-level scheduler: its allocation
// is stopped and Nomad places a replacement.
type Move struct {
	At        time.Time `json:"at"`
	AllocID   string    `json:"alloc_id"`
	Namespace string    `json:"namespace"`
	Job       string    `json:"job"`
	Task      string    `json:"task"`
	Host      string    `json:"host"`
	Home      string    `json:"home"`
	Why       string    `json:"why"`
	Error     string    `json:"error,omitempty"`
}

// Totals count since the plugin started.
type Totals struct {
	Kills map[string]int `json:"kills"` // by reason
	Moves int            `json:"moves"`
}

// Fetch reads a node's report from the plugin at base (e.g.
// "http://10.0.0.5:9410").
func Fetch(ctx context.Context, c *http.Client, base string) (Report, error) {
	var r Report
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+Path, nil)
	if err != nil {
		return r, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return r, fmt.Errorf("GPU usage from %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return r, fmt.Errorf("GPU usage from %s: %s: %s", base, resp.Status, b)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&r); err != nil {
		return r, fmt.Errorf("GPU usage from %s: %w", base, err)
	}
	return r, nil
}
