package service

import (
	"context"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// SetBeforeStop installs the actuator's test hook; call it before Run.
func (s *Service) SetBeforeStop(f func(ctx context.Context, rec state.Suspension)) {
	s.act.BeforeStop = f
}
