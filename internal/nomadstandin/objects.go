package nomadstandin

import (
	"fmt"
	"time"

	"github.com/hashicorp/nomad/api"
)

func ptr[T any](v T) *T { return &v }

// id makes a UUID-shaped ID from a kind and a number.
func id(kind byte, n int) string {
	return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", uint32(n)*2654435761, n&0xffff, kind, n>>16&0xfff, n)
}

// newNode is GPU node i: an 8 x H100 client with the usual attributes and
// drivers, and the plugin's device groups.
func newNode(i int, devices []*api.NodeDeviceResource) *api.Node {
	name := fmt.Sprintf("gpu-%05d", i)
	attrs := map[string]string{
		"arch": "amd64", "cpu.arch": "amd64", "cpu.frequency": "2400", "cpu.modelname": "Intel(R) Xeon(R) Platinum 8480+",
		"cpu.numcores": "112", "cpu.reservablecores": "112", "cpu.totalcompute": "268800", "cpu.usablecompute": "268800",
		"driver.docker": "1", "driver.docker.version": "27.3.1", "driver.docker.runtimes": "io.containerd.runc.v2,nvidia,runc",
		"driver.exec": "1", "kernel.arch": "x86_64", "kernel.name": "linux", "kernel.version": "6.8.0-49-generic",
		"memory.totalbytes": "2164191363072", "nomad.advertise.address": fmt.Sprintf("10.%d.%d.%d:4646", i>>16&255, i>>8&255, i&255),
		"nomad.bridge.hairpin_mode": "false", "nomad.revision": "e7e3ab8e2e", "nomad.service_discovery": "true", "nomad.version": "1.11.3",
		"os.name": "ubuntu", "os.version": "24.04", "os.signals": "SIGABRT,SIGALRM,SIGBUS,SIGCHLD,SIGCONT,SIGFPE,SIGHUP,SIGILL,SIGINT,SIGIO,SIGKILL,SIGPIPE,SIGPROF,SIGQUIT,SIGSEGV,SIGSTOP,SIGSYS,SIGTERM,SIGTRAP,SIGTSTP,SIGTTIN,SIGTTOU,SIGURG,SIGUSR1,SIGUSR2,SIGVTALRM,SIGWINCH,SIGXCPU,SIGXFSZ",
		"plugins.cni.version.bridge": "v1.6.1", "plugins.cni.version.host-local": "v1.6.1", "plugins.cni.version.loopback": "v1.6.1",
		"unique.cgroup.mountpoint": "/sys/fs/cgroup", "unique.cgroup.version": "v2", "unique.hostname": name,
		"unique.network.ip-address": fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), "unique.storage.bytesfree": "3510218670080",
		"unique.storage.bytestotal": "3840755982336", "unique.storage.volume": "/dev/nvme0n1p1",
		"unique.platform.aws.instance-type": "p5.48xlarge", "platform.aws.placement.availability-zone": "us-east-1a",
	}
	drivers := map[string]*api.DriverInfo{}
	for _, d := range []string{"docker", "exec", "raw_exec", "java", "qemu"} {
		drivers[d] = &api.DriverInfo{Detected: d == "docker" || d == "exec", Healthy: d == "docker" || d == "exec",
			HealthDescription: "Healthy", UpdateTime: time.Unix(1764000000, 0).UTC(), Attributes: map[string]string{"driver." + d: "1"}}
	}
	return &api.Node{
		ID: id('n', i), Name: name, Datacenter: "dc1", NodePool: "gpu", NodeClass: "p5", HTTPAddr: attrs["nomad.advertise.address"],
		Attributes: attrs, Meta: map[string]string{"connect.log_level": "info", "rack": fmt.Sprintf("r%03d", i/40)},
		NodeResources: &api.NodeResources{
			Cpu:      api.NodeCpuResources{CpuShares: 268800, TotalCpuCores: 112},
			Memory:   api.NodeMemoryResources{MemoryMB: 2063936},
			Disk:     api.NodeDiskResources{DiskMB: 3347568},
			Networks: []*api.NetworkResource{{Mode: "host", Device: "eth0", CIDR: attrs["unique.network.ip-address"] + "/32", IP: attrs["unique.network.ip-address"], MBits: ptr(100000)}},
			Devices:  devices, MinDynamicPort: 20000, MaxDynamicPort: 32000,
		},
		ReservedResources: &api.NodeReservedResources{Cpu: api.NodeReservedCpuResources{CpuShares: 2400}, Memory: api.NodeReservedMemoryResources{MemoryMB: 16384}},
		Drivers:           drivers, SchedulingEligibility: "eligible", Status: "ready", StatusDescription: "",
		StatusUpdatedAt: 1764000000, Events: []*api.NodeEvent{{Message: "Node registered", Subsystem: "Cluster", Timestamp: time.Unix(1764000000, 0).UTC()}},
		CreateIndex: uint64(10 + i), ModifyIndex: uint64(10 + i),
	}
}

// nodeStub is the node as /v1/nodes?resources=true lists it.
func nodeStub(n *api.Node) *api.NodeListStub {
	return &api.NodeListStub{Address: n.Attributes["unique.network.ip-address"], ID: n.ID, Attributes: nil, Datacenter: n.Datacenter,
		Name: n.Name, NodeClass: n.NodeClass, NodePool: n.NodePool, Version: "1.11.3", SchedulingEligibility: n.SchedulingEligibility,
		Status: n.Status, Drivers: n.Drivers, NodeResources: n.NodeResources, ReservedResources: n.ReservedResources,
		CreateIndex: n.CreateIndex, ModifyIndex: n.ModifyIndex}
}

// jobSpec is a service job of one group of count instances, each with one
// task asking for count GPU devices (whole or share).
func (w *world) jobSpec(name, ns string, count int, whole bool, devCount int) *api.Job {
	typ := "nvidia/gpu-share"
	if whole {
		typ = "nvidia/gpu"
	}
	idx := uint64(100000 + len(w.jobs))
	task := &api.Task{Name: "main", Driver: "docker",
		Config: map[string]any{"image": "nvcr.io/nvidia/pytorch:24.10-py3", "command": "python", "args": []string{"train.py", "--epochs", "90"}},
		Env:    map[string]string{"NCCL_DEBUG": "WARN"},
		Resources: &api.Resources{CPU: ptr(8000), MemoryMB: ptr(65536),
			Devices: []*api.RequestedDevice{{Name: typ, Count: ptr(uint64(devCount))}}},
		KillTimeout: ptr(30 * time.Second), LogConfig: &api.LogConfig{MaxFiles: ptr(10), MaxFileSizeMB: ptr(10)},
	}
	tg := &api.TaskGroup{Name: ptr("train"), Count: ptr(count), Tasks: []*api.Task{task},
		RestartPolicy: &api.RestartPolicy{Attempts: ptr(2), Interval: ptr(30 * time.Minute), Delay: ptr(15 * time.Second), Mode: ptr("fail")},
		EphemeralDisk: &api.EphemeralDisk{SizeMB: ptr(300)}}
	return &api.Job{ID: ptr(name), Name: ptr(name), Namespace: ptr(ns), Type: ptr("service"), Priority: ptr(50),
		Region: ptr("global"), Datacenters: []string{"*"}, NodePool: ptr("gpu"), TaskGroups: []*api.TaskGroup{tg},
		Meta: map[string]string{"team": ns}, Stop: ptr(false), Version: ptr(uint64(0)), SubmitTime: ptr(w.created.UnixNano()),
		CreateIndex: ptr(idx), ModifyIndex: ptr(idx), JobModifyIndex: ptr(idx)}
}

// jobStub is the job as /v1/jobs?meta=true lists it.
func jobStub(j *api.Job, running, pending int) *api.JobListStub {
	return &api.JobListStub{ID: *j.ID, Name: *j.Name, Namespace: *j.Namespace, Datacenters: j.Datacenters, Type: *j.Type,
		Priority: *j.Priority, Stop: *j.Stop, Status: *j.Status, Meta: j.Meta,
		JobSummary: &api.JobSummary{JobID: *j.ID, Namespace: *j.Namespace,
			Summary:     map[string]api.TaskGroupSummary{"train": {Running: running, Queued: pending}},
			CreateIndex: *j.CreateIndex, ModifyIndex: *j.ModifyIndex},
		CreateIndex: *j.CreateIndex, ModifyIndex: *j.ModifyIndex, JobModifyIndex: *j.JobModifyIndex, SubmitTime: *j.SubmitTime}
}

// newAlloc is allocation i of the cluster, instance instance of job j,
// on node n, holding devs.
func newAlloc(i, instance int, j *api.Job, n *api.Node, devs *api.AllocatedDeviceResource, created time.Time) *api.AllocationListStub {
	started := created.Add(-time.Duration(i%3600) * time.Second)
	events := []*api.TaskEvent{
		{Type: "Received", Time: started.UnixNano(), DisplayMessage: "Task received by client"},
		{Type: "Task Setup", Time: started.UnixNano(), DisplayMessage: "Building Task Directory", Message: "Building Task Directory"},
		{Type: "Driver", Time: started.UnixNano(), DisplayMessage: "Downloading image", Details: map[string]string{"image": "nvcr.io/nvidia/pytorch:24.10-py3"}},
		{Type: "Started", Time: started.UnixNano(), DisplayMessage: "Task started by client"},
	}
	return &api.AllocationListStub{ID: id('a', i), EvalID: id('e', i), Name: fmt.Sprintf("%s.train[%d]", *j.ID, instance),
		Namespace: *j.Namespace, NodeID: n.ID, NodeName: n.Name, JobID: *j.ID, JobType: "service", JobVersion: 0, TaskGroup: "train",
		AllocatedResources: &api.AllocatedResources{
			Tasks:  map[string]*api.AllocatedTaskResources{"main": {Cpu: api.AllocatedCpuResources{CpuShares: 8000}, Memory: api.AllocatedMemoryResources{MemoryMB: 65536}, Devices: []*api.AllocatedDeviceResource{devs}}},
			Shared: api.AllocatedSharedResources{DiskMB: 300}},
		DesiredStatus: "run", ClientStatus: "running", ClientDescription: "Tasks are running",
		TaskStates:  map[string]*api.TaskState{"main": {State: "running", StartedAt: started, Events: events}},
		CreateIndex: uint64(200000 + i), ModifyIndex: uint64(200000 + i), CreateTime: started.UnixNano(), ModifyTime: started.UnixNano()}
}

// fullAlloc is the allocation as the event stream carries it (Nomad
// strips the job from allocation events).
func fullAlloc(s *api.AllocationListStub) *api.Allocation {
	return &api.Allocation{ID: s.ID, Namespace: s.Namespace, EvalID: s.EvalID, Name: s.Name, NodeID: s.NodeID, NodeName: s.NodeName,
		JobID: s.JobID, TaskGroup: s.TaskGroup, AllocatedResources: s.AllocatedResources, DesiredStatus: s.DesiredStatus,
		ClientStatus: s.ClientStatus, ClientDescription: s.ClientDescription, TaskStates: s.TaskStates,
		CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex, AllocModifyIndex: s.CreateIndex, CreateTime: s.CreateTime, ModifyTime: s.ModifyTime,
		Metrics: &api.AllocationMetric{NodesEvaluated: 1, NodesAvailable: map[string]int{"dc1": 5000}}}
}
