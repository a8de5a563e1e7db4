package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/device/gpu/simproc"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
)

const gpu = "GPU-0000"

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

// simulate runs the program until the test ends and returns a function
// that reads its current state.
func simulate(t *testing.T, args []string, getenv func(string) string) func() (simproc.State, bool) {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, append([]string{"-state-dir", dir}, args...), getenv, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		if states, _ := simproc.List(dir); len(states) != 0 {
			t.Errorf("state left behind: %+v", states)
		}
	})
	return func() (simproc.State, bool) {
		states, _ := simproc.List(dir)
		if len(states) != 1 {
			return simproc.State{}, false
		}
		return states[0], true
	}
}

func waitState(t *testing.T, read func() (simproc.State, bool), mib uint64, sm uint32) {
	t.Helper()
	testcluster.Eventually(t, 10*time.Second, func() error {
		s, ok := read()
		if !ok || s.UsedMiB != mib || s.SMPct != sm || s.GPU != gpu || s.PID != os.Getpid() {
			return errors.New("state not written as expected")
		}
		return nil
	})
}

func TestUsesWhatItIsTold(t *testing.T) {
	control := filepath.Join(t.TempDir(), "control")
	read := simulate(t, []string{"-mib", "request", "-sm", "30", "-control", control},
		env(map[string]string{"NVIDIA_VISIBLE_DEVICES": gpu + ",GPU-other", "GPUSHARE_REQUEST_MIB": "20480", "GPUSHARE_LIMIT_MIB": "61440"}))
	waitState(t, read, 20480, 30)
	os.WriteFile(control, []byte("mib=limit sm=90\n"), 0o644)
	waitState(t, read, 61440, 90)
	os.Remove(control)
	waitState(t, read, 20480, 30)
}

func TestRestartUsesTheRestartFigures(t *testing.T) {
	taskDir := t.TempDir()
	os.WriteFile(filepath.Join(taskDir, ".gpushare-simload-ran"), nil, 0o644)
	read := simulate(t, []string{"-gpu", gpu, "-mib", "70000", "-sm", "80", "-restart-mib", "30000"},
		env(map[string]string{"NOMAD_TASK_DIR": taskDir}))
	waitState(t, read, 30000, 80)
}

func TestRequireExclusive(t *testing.T) {
	dir := t.TempDir()
	other, _ := simproc.StartTicks(os.Getppid())
	simproc.Write(dir, simproc.State{PID: os.Getppid(), StartTicks: other, GPU: gpu, UsedMiB: 5})
	err := run(context.Background(), []string{"-state-dir", dir, "-gpu", gpu, "-require-exclusive"}, env(nil), io.Discard)
	var ex exitError
	if !errors.As(err, &ex) || ex.code != 3 || !strings.Contains(ex.msg, "not exclusive") {
		t.Fatalf("got %v, want exit 3", err)
	}
}

func TestBadFlagsNameTheFix(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "-state-dir is required"},
		{[]string{"-state-dir", "/tmp"}, "NVIDIA_VISIBLE_DEVICES is empty"},
		{[]string{"-state-dir", "/tmp", "-gpu", gpu, "-mib", "lots"}, `-mib: "lots" is not MiB`},
		{[]string{"-state-dir", "/tmp", "-gpu", gpu, "-mib", "limit"}, "GPUSHARE_LIMIT_MIB is not set"},
	} {
		err := run(context.Background(), c.args, env(nil), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}
