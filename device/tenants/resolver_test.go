package tenants

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// fakeProc writes a /proc entry for pid under root.
func fakeProc(t *testing.T, root string, pid int, start uint64, environ, cgroup string) {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := strconv.Itoa(pid) + " (python3) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 " + strconv.FormatUint(start, 10) + " 20"
	for name, content := range map[string]string{"stat": stat, "environ": environ, "cgroup": cgroup} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestResolverFindsOwnerAndNoticesRecycledPIDs(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 10, 100, string(environ("NOMAD_ALLOC_ID="+allocID, "NOMAD_TASK_NAME=main")), "")
	fakeProc(t, root, 11, 100, string(environ("HOME=/")), "0::/nomad.slice/share.slice/"+allocID+".side.scope\n")
	fakeProc(t, root, 12, 100, "", "0::/user.slice\n")
	r := NewResolver(root)

	for pid, want := range map[int]Owner{
		10: {AllocID: allocID, Task: "main", Source: "environ"},
		11: {AllocID: allocID, Task: "side", Source: "cgroup"},
		12: {},
	} {
		id, err := r.Resolve(pid)
		if err != nil || id.Owner != want || id.StartTicks != 100 || id.Comm != "python3" {
			t.Errorf("pid %d: %+v, %v; want owner %+v", pid, id, err, want)
		}
	}

	// PID 10 is recycled by a process of no allocation: the cached owner
	// must not stick to it.
	fakeProc(t, root, 10, 200, string(environ("HOME=/")), "")
	if id, err := r.Resolve(10); err != nil || id.Owner.Known() || id.StartTicks != 200 {
		t.Errorf("recycled pid 10: %+v, %v", id, err)
	}

	os.RemoveAll(filepath.Join(root, "12"))
	if _, err := r.Resolve(12); !errors.Is(err, ErrGone) {
		t.Errorf("vanished pid 12: %v, want ErrGone", err)
	}
	r.Forget(map[int]bool{10: true})
	if len(r.cache) != 0 {
		t.Errorf("cache after Forget: %v, want empty (only pid 11's owner was cached, and it was not kept)", r.cache)
	}
}

// TestResolverReadsAnUnknownOwnerAgain: a process seen in the middle of
// its exec has an empty environment for a moment; once its environment is
// there, its owner is found.
func TestResolverReadsAnUnknownOwnerAgain(t *testing.T) {
	root := t.TempDir()
	fakeProc(t, root, 20, 300, "", "")
	r := NewResolver(root)
	if id, err := r.Resolve(20); err != nil || id.Owner.Known() {
		t.Fatalf("pid 20 mid-exec: %+v, %v; want no owner", id, err)
	}
	fakeProc(t, root, 20, 300, string(environ("NOMAD_ALLOC_ID="+allocID, "NOMAD_TASK_NAME=main")), "")
	if id, err := r.Resolve(20); err != nil || id.Owner.AllocID != allocID {
		t.Errorf("pid 20 after its exec: %+v, %v; want allocation %s", id, err, allocID)
	}
}

func TestKillSignalsOnlyTheProcessSeen(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r := NewResolver("/proc")
	id, err := r.Resolve(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}

	stale := id
	stale.StartTicks++ // the process seen earlier had this PID and is gone
	if err := r.Kill(stale); err != nil {
		t.Fatalf("kill of a recycled PID: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("a process that only shares the PID was killed: %v", err)
	default:
	}

	if err := r.Kill(id); err != nil {
		t.Fatal(err)
	}
	err = <-done
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("sleep ended with %v, want SIGKILL", err)
	}
	if err := r.Kill(id); err != nil {
		t.Errorf("kill of a process already gone: %v", err)
	}
}
