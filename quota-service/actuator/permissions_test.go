package actuator

import (
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/aclpolicy"
	"github.com/hashicorp/nomad/acl"
	nomadapi "github.com/hashicorp/nomad/api"
)

func policyACL(t *testing.T, rules ...string) *acl.ACL {
	t.Helper()
	var pols []*acl.Policy
	for _, r := range rules {
		p, err := acl.Parse(r, acl.PolicyParseStrict)
		if err != nil {
			t.Fatalf("parsing policy: %v\n%s", err, r)
		}
		pols = append(pols, p)
	}
	a, err := acl.NewACL(false, pols)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// gpuJobWith is a GPU job in namespace ns with the given volumes.
func gpuJobWith(ns string, vols map[string]*nomadapi.VolumeRequest) *nomadapi.Job {
	j := nomadapi.NewBatchJob("j", "j", "global", 50)
	j.Namespace = &ns
	task := nomadapi.NewTask("t", "raw_exec")
	task.Resources = &nomadapi.Resources{Devices: []*nomadapi.RequestedDevice{{Name: "nvidia/gpu"}}}
	tg := nomadapi.NewTaskGroup("g", 1).AddTask(task)
	tg.Volumes = vols
	j.AddTaskGroup(tg)
	return j
}

// TestMayRegister: the may-it-come-back check decides as Nomad's register
// endpoint does, and the shipped policy lets the service resume GPU jobs
// with host and CSI volumes.
func TestMayRegister(t *testing.T) {
	// The shipped policy as assembled for one project namespace, team-a.
	shipped, err := aclpolicy.QuotaNomad("../..", []string{"team-a"})
	if err != nil {
		t.Fatal(err)
	}
	narrow := `namespace "team-a" { capabilities = ["list-jobs", "read-job", "submit-job"] }
host_volume "scratch" { policy = "read" }`
	hostRW := map[string]*nomadapi.VolumeRequest{"data": {Name: "data", Type: "host", Source: "datasets"}}
	hostRO := map[string]*nomadapi.VolumeRequest{"data": {Name: "data", Type: "host", Source: "scratch", ReadOnly: true}}
	csi := map[string]*nomadapi.VolumeRequest{"ckpt": {Name: "ckpt", Type: "csi", Source: "checkpoints"}}
	tests := []struct {
		name   string
		policy string
		job    *nomadapi.Job
		want   string // part of the reason; "" when it may
	}{
		{"shipped policy, plain job", shipped, gpuJobWith("team-a", nil), ""},
		{"shipped policy, host volume read-write", shipped, gpuJobWith("team-a", hostRW), ""},
		{"shipped policy, CSI volume", shipped, gpuJobWith("team-a", csi), ""},
		{"shipped policy, namespace that is no project", shipped, gpuJobWith("team-z", nil), "may not submit jobs in namespace team-z"},
		{"narrow policy, other namespace", narrow, gpuJobWith("team-b", nil), "may not submit jobs in namespace team-b"},
		{"narrow policy, host volume read-write", narrow, gpuJobWith("team-a", hostRW), `host volume "datasets"`},
		{"narrow policy, read-only host volume it may read", narrow, gpuJobWith("team-a", hostRO), ""},
		{"narrow policy, CSI volume", narrow, gpuJobWith("team-a", csi), "csi-mount-volume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MayRegister(policyACL(t, tt.policy), tt.job)
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Fatalf("MayRegister = %q, want %q", got, tt.want)
			}
		})
	}
	if got := MayRegister(nil, gpuJobWith("any", csi)); got != "" {
		t.Fatalf("without ACLs MayRegister = %q, want allowed", got)
	}
}
