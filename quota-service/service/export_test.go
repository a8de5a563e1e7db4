package service

import (
	"context"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// SetBeforeStop installs the actuator's test hook; call it before Run.
func (s *Service) SetBeforeStop(f func(ctx context.Context, rec state.Suspension)) {
	s.act.BeforeStop = f
}

// SetAfterStop installs the actuator's test hook; call it before Run.
func (s *Service) SetAfterStop(f func(ctx context.Context, rec state.Suspension)) {
	s.act.AfterStop = f
}

// SetSkipTag makes the actuator leave the stopped versions f picks
// untagged, as when tagging fails; call it before Run.
func (s *Service) SetSkipTag(f func(rec state.Suspension) bool) {
	s.act.SkipTag = f
}

// SetBeforeMark installs the actuator's test hook; call it before Run.
func (s *Service) SetBeforeMark(f func(ctx context.Context, rec state.Suspension)) {
	s.act.BeforeMark = f
}
