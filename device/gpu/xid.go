package gpu

import (
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// XidEvent is an Xid critical error NVML reported for a GPU (and, on a
// MIG-enabled GPU, possibly for one of its MIG devices).
type XidEvent struct {
	// UUID is the GPU's UUID; "" when NVML named no GPU.
	UUID string
	// Xid is the error number (e.g. 79: the GPU has fallen off the bus).
	Xid uint64
	// GPUInstance and ComputeInstance name the MIG device the error is
	// about; both are -1 when it is about the whole GPU.
	GPUInstance, ComputeInstance int
}

// noInstance is what NVML puts in an event's instance IDs when the event is
// not about a MIG device.
const noInstance = 0xFFFFFFFF

// xidWaitMS is how long one EventSetWait blocks: how long Close may wait
// for the watch to stop.
const xidWaitMS = 500

// xidWatch is a running Xid watch: the event set and how to stop it.
type xidWatch struct {
	set  nvml.EventSet
	stop chan struct{}
	done chan struct{}
}

// WatchXid starts, once per initialization of NVML, a goroutine that
// reports every Xid critical error event of the GPUs to report; Close
// stops it. report must not wait for anything that may wait for Close. It
// needs NVML initialized: before, and while a watch runs, it does nothing
// (started is false). It returns the GPUs that cannot report Xid events,
// and an error when no event set could be created. GPUs that appear later
// are not watched.
func (s *Source) WatchXid(report func(XidEvent)) (started bool, unsupported []string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.inited || s.xid != nil {
		return false, nil, nil
	}
	set, ret := s.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return false, nil, fmt.Errorf("NVML could not create an event set for Xid errors: %v", ret)
	}
	unsupported = s.registerXid(set)
	w := &xidWatch{set: set, stop: make(chan struct{}), done: make(chan struct{})}
	s.xid = w
	go w.run(report)
	return true, unsupported, nil
}

// registerXid registers every GPU of the machine for Xid critical errors
// and returns those that refused.
func (s *Source) registerXid(set nvml.EventSet) []string {
	var refused []string
	n, ret := s.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return []string{fmt.Sprintf("all (could not count GPUs: %v)", ret)}
	}
	for i := 0; i < n; i++ {
		d, ret := s.lib.DeviceGetHandleByIndex(i)
		if ret == nvml.SUCCESS {
			ret = d.RegisterEvents(nvml.EventTypeXidCriticalError, set)
		}
		if ret != nvml.SUCCESS {
			refused = append(refused, fmt.Sprintf("GPU %d (%v)", i, ret))
		}
	}
	return refused
}

// run waits for events until stopped.
func (w *xidWatch) run(report func(XidEvent)) {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		data, ret := w.set.Wait(xidWaitMS)
		select {
		case <-w.stop: // stopped while waiting: report nothing more
			return
		default:
		}
		switch {
		case ret == nvml.SUCCESS && data.EventType&nvml.EventTypeXidCriticalError != 0:
			report(xidEvent(data))
		case ret == nvml.SUCCESS, ret == nvml.ERROR_TIMEOUT:
		default:
			// A GPU that fell off the bus may make every wait fail: do
			// not spin.
			select {
			case <-w.stop:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

func xidEvent(data nvml.EventData) XidEvent {
	e := XidEvent{Xid: data.EventData, GPUInstance: -1, ComputeInstance: -1}
	if data.Device != nil {
		if u, ret := data.Device.GetUUID(); ret == nvml.SUCCESS {
			e.UUID = u
		}
	}
	if data.GpuInstanceId != noInstance {
		e.GPUInstance, e.ComputeInstance = int(data.GpuInstanceId), int(data.ComputeInstanceId)
	}
	return e
}

// stopXid stops the watch, if any, without waiting for it: its goroutine
// frees the event set once its last wait returns (NVML must not free a set
// being waited on), then runs after. s.mu must be held.
func (s *Source) stopXid(after func()) {
	w := s.xid
	s.xid = nil
	if w == nil {
		after()
		return
	}
	close(w.stop)
	go func() {
		<-w.done
		w.set.Free()
		after()
	}()
}
