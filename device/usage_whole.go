package device

// wholeHeld reports whether a GPU is held whole: by an allocation the
// Nomad API listed, or by a whole binding Reserve granted since.
func (u *usage) wholeHeld(uuid string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if g := u.gpus[uuid]; g != nil && len(g.WholeAllocs) > 0 {
		return true
	}
	return u.pending[uuid] != nil && u.pending[uuid].whole
}
