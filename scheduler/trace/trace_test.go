package trace

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

const nodesCSV = `sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,2,P100
n1,96000,393216,8,G2
`

func testNodes(t *testing.T) []placement.Node {
	t.Helper()
	nodes, err := ReadNodes("nodes.csv", strings.NewReader(nodesCSV))
	if err != nil {
		t.Fatal(err)
	}
	return nodes
}

func TestReadNodes(t *testing.T) {
	nodes := testNodes(t)
	if len(nodes) != 2 || nodes[1].Name != "n1" || nodes[1].FreeCPUMilli != 96000 || len(nodes[1].GPUs) != 8 ||
		nodes[1].GPUs[7].Model != "G2" || nodes[1].GPUs[7].Free != cluster.SharesPerGPU || nodes[0].FreeMemoryMiB != 262144 {
		t.Fatalf("ReadNodes = %+v", nodes)
	}
}

func TestReadTasks(t *testing.T) {
	// Columns reordered, extra columns, optional gpu_spec; gpu_milli that is
	// not a multiple of ten rounds up to the next share; tasks no node could
	// hold (too much CPU, a model no node has) are read like any other.
	in := `qos,name,num_gpu,gpu_milli,cpu_milli,memory_mib,gpu_spec
LS,p0,1,460,6000,12288,
BE,p1,8,1000,64000,65536,G2
LS,p2,0,0,4000,1024,
LS,p3,1,500,1000,1024,P100|G2
LS,p4,1,1,1000,1024,
LS,p5,1,255,200000,1024,A100
`
	tasks, err := ReadTasks("pods.csv", strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Task{
		{"p0", placement.Task{CPUMilli: 6000, MemoryMiB: 12288, GPUCount: 1, Shares: 46}},
		{"p1", placement.Task{CPUMilli: 64000, MemoryMiB: 65536, GPUCount: 8, Shares: 100, Models: []string{"G2"}}},
		{"p2", placement.Task{CPUMilli: 4000, MemoryMiB: 1024}},
		{"p3", placement.Task{CPUMilli: 1000, MemoryMiB: 1024, GPUCount: 1, Shares: 50, Models: []string{"P100", "G2"}}},
		{"p4", placement.Task{CPUMilli: 1000, MemoryMiB: 1024, GPUCount: 1, Shares: 1}},
		{"p5", placement.Task{CPUMilli: 200000, MemoryMiB: 1024, GPUCount: 1, Shares: 26, Models: []string{"A100"}}},
	}
	if len(tasks) != len(want) {
		t.Fatalf("got %d tasks, want %d", len(tasks), len(want))
	}
	for i := range want {
		g, w := tasks[i], want[i]
		if g.Name != w.Name || g.CPUMilli != w.CPUMilli || g.MemoryMiB != w.MemoryMiB || g.GPUCount != w.GPUCount ||
			g.Shares != w.Shares || strings.Join(g.Models, "|") != strings.Join(w.Models, "|") {
			t.Errorf("task %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestReadErrors(t *testing.T) {
	const header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
	tests := []struct {
		name  string
		nodes bool // parse as a node list
		in    string
		want  error
		msg   string // must appear in the error
	}{
		{"node missing column", true, "sn,cpu_milli,memory_mib,gpu\nn,1,1,1\n", ErrMissingColumn, "nodes.csv:1: field model"},
		{"node non-numeric", true, "sn,cpu_milli,memory_mib,gpu,model\nn,x,1,1,T4\n", ErrBadValue, "nodes.csv:2: field cpu_milli"},
		{"node negative", true, "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,-2,T4\n", ErrBadValue, "nodes.csv:2: field gpu"},
		{"node no model", true, "sn,cpu_milli,memory_mib,gpu,model\nn,1,1,2,\n", ErrBadValue, "field model"},
		{"node empty", true, "", ErrMissingColumn, "nodes.csv:1"},
		{"pod missing column", false, "name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n", ErrMissingColumn, "pods.csv:1: field gpu_milli"},
		{"pod non-numeric", false, header + "p,1,1,1,abc,\n", ErrBadValue, "pods.csv:2: field gpu_milli"},
		{"pod negative", false, header + "p,1,1,1,500,\np,-1,1,1,500,\n", ErrBadValue, "pods.csv:3: field cpu_milli"},
		{"pod gpu_milli above 1000", false, header + "p,1,1,1,1500,\n", ErrBadValue, "pods.csv:2: field gpu_milli"},
		{"pod multi-GPU share", false, header + "p,1,1,2,500,\n", ErrBadValue, "pods.csv:2: field gpu_milli"},
		{"pod GPU without milli", false, header + "p,1,1,1,0,\n", ErrBadValue, "field gpu_milli"},
		{"pod short row", false, header + "p,1,1\n", ErrBadValue, "pods.csv:2: field num_gpu"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.nodes {
				_, err = ReadNodes("nodes.csv", strings.NewReader(tc.in))
			} else {
				_, err = ReadTasks("pods.csv", strings.NewReader(tc.in))
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			var te *Error
			if !errors.As(err, &te) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not name %q", err, tc.msg)
			}
		})
	}
}

func TestOpenMissingFile(t *testing.T) {
	if _, err := OpenNodes("/nonexistent/nodes.csv"); err == nil || !strings.Contains(err.Error(), "/nonexistent/nodes.csv") {
		t.Fatalf("OpenNodes error %v does not name the file", err)
	}
}

func FuzzReadNodes(f *testing.F) {
	f.Add(nodesCSV)
	f.Add("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,-1,\n")
	f.Add("model,gpu,sn\n\"x\n")
	f.Fuzz(func(t *testing.T, in string) {
		nodes, err := ReadNodes("f.csv", strings.NewReader(in))
		if err != nil {
			return
		}
		for _, n := range nodes {
			if n.CPUMilli < 0 || n.MemoryMiB < 0 || len(n.GPUs) > maxGPUs {
				t.Fatalf("accepted bad node %+v", n)
			}
		}
	})
}

func FuzzReadTasks(f *testing.F) {
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1000,1024,1,500,P100|G2\n")
	f.Add("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,8,1000\nq,1,1,0,0\n")
	f.Add("gpu_milli,num_gpu\n2000,2\n")
	f.Fuzz(func(t *testing.T, in string) {
		tasks, err := ReadTasks("f.csv", strings.NewReader(in))
		if err != nil {
			return
		}
		for _, task := range tasks {
			ok := task.GPUCount == 0 && task.Shares == 0 ||
				task.GPUCount == 1 && task.Shares > 0 && task.Shares <= cluster.SharesPerGPU ||
				task.GPUCount > 1 && task.Shares == cluster.SharesPerGPU
			if !ok || task.CPUMilli < 0 || task.MemoryMiB < 0 {
				t.Fatalf("accepted bad task %+v", task)
			}
		}
	})
}
