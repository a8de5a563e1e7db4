package device

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"syscall"
	"time"
)

// Isolation says what is enforced on a GPU's shares, or on a MIG device:
// the group attribute IsolationAttr and the task variable EnvIsolation.
const (
	IsolationAttr = "isolation"
	// IsolationMPS: CUDA MPS enforces each share's memory and compute
	// limits (mps_enabled, with the control daemon running).
	IsolationMPS = "mps"
	// IsolationNone: the limits are advisory (environment variables the
	// workload may honour).
	IsolationNone = "none"
	// IsolationMIG: the MIG device is a hardware partition.
	IsolationMIG = "mig"
)

// mpsControl is the MPS control daemon's socket in its pipe directory.
const mpsControl = "control"

// probeMPS checks that an MPS control daemon answers in the pipe
// directory: CUDA silently runs without MPS (and without its limits) when
// none does. The socket is a SOCK_SEQPACKET one; a plain stream socket is
// accepted too.
func probeMPS(dir string) error {
	path := filepath.Join(dir, mpsControl)
	c, err := net.DialTimeout("unixpacket", path, time.Second)
	if errors.Is(err, syscall.EPROTOTYPE) {
		c, err = net.DialTimeout("unix", path, time.Second)
	}
	if err != nil {
		return fmt.Errorf("mps_enabled, but no MPS control daemon answers at %s (%v): start it with CUDA_MPS_PIPE_DIRECTORY=%s nvidia-cuda-mps-control -d, or set mps_enabled = false",
			path, errors.Unwrap(err), dir)
	}
	return c.Close()
}

// shareIsolation is what isolates the shares of every GPU: MPS when
// enabled, and why it does not when its control daemon is down.
type shareIsolation struct {
	mps  bool
	down string
}

// mode is the IsolationAttr value of share groups.
func (i shareIsolation) mode() string {
	if i.mps {
		return IsolationMPS
	}
	return IsolationNone
}
