package gpu

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// go-nvml's mock machines report no errors: the event set and Xid events,
// the ECC counters and row remapping are filled in here, and the Inject
// and Set methods below make them report errors.

// simECC is a simulated GPU's memory error state.
type simECC struct {
	volatile, aggregate uint64
	remapFailure        bool
	// corrected are the corrected volatile counts by memory location.
	corrected map[nvml.MemoryLocation]uint64
}

// InjectXid makes NVML report Xid error xid for GPU i to the event sets
// it is registered with (on a MIG-enabled GPU, about the whole GPU).
func (s *Simulated) InjectXid(i int, xid uint64) {
	s.injectEvent(i, xid, noInstance, noInstance)
}

// InjectMIGXid reports Xid error xid for the MIG device of GPU i with the
// given GPU and compute instance IDs.
func (s *Simulated) InjectMIGXid(i int, gpuInstance, computeInstance int, xid uint64) {
	s.injectEvent(i, xid, uint32(gpuInstance), uint32(computeInstance))
}

func (s *Simulated) injectEvent(i int, xid uint64, gi, ci uint32) {
	s.mu.Lock()
	registered := s.xidRegistered[i]
	s.mu.Unlock()
	if !registered {
		return // NVML reports events only to sets a GPU is registered with
	}
	s.events <- nvml.EventData{Device: s.devs[i], EventType: nvml.EventTypeXidCriticalError, EventData: xid, GpuInstanceId: gi, ComputeInstanceId: ci}
}

// SetECC sets GPU i's uncorrectable ECC counts: volatile (since the driver
// loaded) and aggregate (over its life).
func (s *Simulated) SetECC(i int, volatile, aggregate uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.ecc[i]
	e.volatile, e.aggregate = volatile, aggregate
	s.ecc[i] = e
}

// SetCorrectedECC sets GPU i's corrected volatile ECC count at a memory
// location (the statistics report them).
func (s *Simulated) SetCorrectedECC(i int, loc nvml.MemoryLocation, n uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.ecc[i]
	if e.corrected == nil {
		e.corrected = map[nvml.MemoryLocation]uint64{}
	}
	e.corrected[loc] = n
	s.ecc[i] = e
}

// SetRemapFailure makes GPU i report a row remapping failure.
func (s *Simulated) SetRemapFailure(i int, failed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.ecc[i]
	e.remapFailure = failed
	s.ecc[i] = e
}

// XidRegistered reports whether GPU i is registered for Xid events.
func (s *Simulated) XidRegistered(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.xidRegistered[i]
}

// fillEvents sets the machine's event set calls.
func (s *Simulated) fillEvents() {
	s.events = make(chan nvml.EventData, 64)
	s.Server.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				select {
				case e := <-s.events:
					return e, nvml.SUCCESS
				case <-time.After(time.Duration(ms) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
}

// fillHealth sets GPU i's calls that report errors.
func (s *Simulated) fillHealth(i int, d *server.Device) {
	d.RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
		if r := s.lostRet(i); r != nvml.SUCCESS {
			return r
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.xidRegistered[i] = types&nvml.EventTypeXidCriticalError != 0
		return nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType) (uint64, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		e := s.ecc[i]
		switch {
		case t != nvml.MEMORY_ERROR_TYPE_UNCORRECTED:
			var n uint64
			for _, v := range e.corrected {
				n += v
			}
			return n, nvml.SUCCESS
		case c == nvml.VOLATILE_ECC:
			return e.volatile, nvml.SUCCESS
		default:
			return e.aggregate, nvml.SUCCESS
		}
	}
	d.GetMemoryErrorCounterFunc = func(t nvml.MemoryErrorType, c nvml.EccCounterType, loc nvml.MemoryLocation) (uint64, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if t != nvml.MEMORY_ERROR_TYPE_CORRECTED || c != nvml.VOLATILE_ECC {
			return 0, nvml.SUCCESS
		}
		return s.ecc[i].corrected[loc], nvml.SUCCESS
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return 0, 0, false, s.ecc[i].remapFailure, nvml.SUCCESS
	}
}
