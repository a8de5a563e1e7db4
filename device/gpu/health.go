package gpu

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// MemoryHealth is what a GPU's memory reports about uncorrectable errors,
// read at every inventory. Counts are nil where NVML does not report them
// (ECC off, or a GPU without ECC).
type MemoryHealth struct {
	// UncorrectedVolatile counts uncorrectable ECC errors since the driver
	// was loaded (a GPU reset clears it).
	UncorrectedVolatile *uint64
	// UncorrectedAggregate counts them over the GPU's life.
	UncorrectedAggregate *uint64
	// RemapFailure is set when row remapping failed: the memory has an
	// error it could not retire (the GPU needs service).
	RemapFailure bool
}

// readMemoryHealth reads a GPU's uncorrectable ECC counts and row
// remapping state.
func readMemoryHealth(d nvml.Device) MemoryHealth {
	var h MemoryHealth
	if n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		h.UncorrectedVolatile = &n
	}
	if n, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC); ret == nvml.SUCCESS {
		h.UncorrectedAggregate = &n
	}
	if _, _, _, failed, ret := d.GetRemappedRows(); ret == nvml.SUCCESS {
		h.RemapFailure = failed
	}
	return h
}
