package device

import "github.com/gpushare/nomad-gpushare/device/gpu"

// processes lists every GPU's compute processes (see gpu.Source.Processes).
func (h *hardware) processes(lastSample map[string]uint64) (map[string][]gpu.Process, map[string]error, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.src == nil {
		return nil, nil, nil
	}
	return h.src.Processes(lastSample)
}
