package nomadwatch

import (
	"testing"
	"time"
)

// TestSignal: raises while the receiver is busy wake it once, and Since
// says when the first of them came, once.
func TestSignal(t *testing.T) {
	s := NewSignal()
	if !s.Since().IsZero() {
		t.Fatal("a signal never raised has a time")
	}
	before := time.Now()
	s.Raise()
	first := s.since
	s.Raise()
	select {
	case <-s.C():
	default:
		t.Fatal("a raised signal does not wake its receiver")
	}
	select {
	case <-s.C():
		t.Fatal("two raises before the receiver looked woke it twice")
	default:
	}
	if got := s.Since(); got != first || got.Before(before) {
		t.Errorf("Since = %v, want the first raise's time %v", got, first)
	}
	if !s.Since().IsZero() {
		t.Error("Since did not forget the burst it returned")
	}
}
