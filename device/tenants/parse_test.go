package tenants

import (
	"strings"
	"testing"
)

const allocID = "5b2e0c8a-1f3d-4c6e-9a7b-0123456789ab"

func environ(kv ...string) []byte { return []byte(strings.Join(kv, "\x00") + "\x00") }

func TestParseEnviron(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want Owner
	}{
		{"task env", environ("PATH=/bin", "NOMAD_ALLOC_ID="+allocID, "NOMAD_TASK_NAME=main", "NOMAD_NAMESPACE=team-a", "NOMAD_JOB_ID=nb"),
			Owner{AllocID: allocID, Task: "main", Namespace: "team-a", Job: "nb", Source: "environ"}},
		{"no trailing NUL", []byte("NOMAD_TASK_NAME=t\x00NOMAD_ALLOC_ID=" + allocID), Owner{AllocID: allocID, Task: "t", Source: "environ"}},
		{"value holds '='", environ("NOMAD_ALLOC_ID="+allocID, "NOMAD_TASK_NAME=a=b"), Owner{AllocID: allocID, Task: "a=b", Source: "environ"}},
		{"not a Nomad task", environ("PATH=/bin", "HOME=/root"), Owner{}},
		{"alloc ID not a UUID", environ("NOMAD_ALLOC_ID=abc", "NOMAD_TASK_NAME=main"), Owner{}},
		{"empty", nil, Owner{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseEnviron(c.in); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseCgroup(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want Owner
	}{
		{"v2 share partition", "0::/nomad.slice/share.slice/" + allocID + ".main.scope\n", Owner{AllocID: allocID, Task: "main", Source: "cgroup"}},
		{"v2 reserve partition", "0::/nomad.slice/reserve.slice/" + allocID + ".train.step.scope\n", Owner{AllocID: allocID, Task: "train.step", Source: "cgroup"}},
		{"v1 controllers", "12:pids:/nomad/" + allocID + ".web\n11:cpuset:/nomad/shared\n", Owner{AllocID: allocID, Task: "web", Source: "cgroup"}},
		{"v1 cpuset only names the partition", "11:cpuset:/nomad/shared\n", Owner{}},
		{"docker container", "0::/system.slice/docker-0123456789abcdef.scope\n", Owner{}},
		{"host process", "0::/user.slice/user-0.slice/session-1.scope\n", Owner{}},
		{"garbage", "no colons here", Owner{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ParseCgroup([]byte(c.in)); got != c.want {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	tail := " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21"
	cases := []struct {
		name, in  string
		wantComm  string
		wantStart uint64
		wantErr   bool
	}{
		{"plain", "42 (python3)" + tail, "python3", 987654, false},
		{"command with spaces and parens", "42 (a (b) c)" + tail, "a (b) c", 987654, false},
		{"truncated", "42 (python3) S 1 2", "", 0, true},
		{"no command", "42 python3 S", "", 0, true},
		{"start not a number", "42 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x 20", "", 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			comm, start, err := ParseStat([]byte(c.in))
			if (err != nil) != c.wantErr || comm != c.wantComm || start != c.wantStart {
				t.Errorf("got %q, %d, %v; want %q, %d, error %v", comm, start, err, c.wantComm, c.wantStart, c.wantErr)
			}
		})
	}
}

func FuzzParsers(f *testing.F) {
	f.Add([]byte("NOMAD_ALLOC_ID=" + allocID + "\x00NOMAD_TASK_NAME=main\x00"))
	f.Add([]byte("0::/nomad.slice/share.slice/" + allocID + ".main.scope\n"))
	f.Add([]byte("42 (a) b) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if o := ParseEnviron(b); o.Known() && !IsUUID(o.AllocID) {
			t.Errorf("environ owner with a bad alloc ID %q", o.AllocID)
		}
		if o := ParseCgroup(b); o.Known() && (!IsUUID(o.AllocID) || o.Task == "") {
			t.Errorf("cgroup owner %+v", o)
		}
		ParseStat(b)
	})
}
