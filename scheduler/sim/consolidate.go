package sim

import (
	"cmp"
	"math/rand"

	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// mover places arriving tasks with the run's policy and, when consolidation
// is on (Config.Movable), places a task that fits nowhere by moving
// movable tasks already placed (placement.Consolidate).
type mover struct {
	policy  placement.Policy
	movable float64
	limits  placement.ConsolidationLimits
	// draws decides which arrivals are movable; it is its own stream, so
	// the arrivals are those of the run without consolidation.
	draws  *rand.Rand
	pieces []placement.Placed
}

func newMover(cfg Config) *mover {
	lim := cfg.Consolidation
	lim.MaxMoves = cmp.Or(lim.MaxMoves, placement.DefaultConsolidationLimits.MaxMoves)
	lim.MaxNodes = cmp.Or(lim.MaxNodes, placement.DefaultConsolidationLimits.MaxNodes)
	return &mover{policy: cfg.Policy, movable: cfg.Movable, limits: lim, draws: rand.New(rand.NewSource(cfg.Seed ^ 0x6d6f7665))}
}

// place places t on c, by the policy or else by moving movable tasks, and
// counts the moves in res. It reports whether t was placed.
func (m *mover) place(c *placement.Cluster, t placement.Task, res *Result) (bool, error) {
	isMovable := m.movable > 0 && t.GPUCount > 0 && m.draws.Float64() < m.movable
	ch, ok := m.policy.Place(c, t)
	if !ok && m.movable > 0 {
		var moves []placement.Move
		if moves, ch, ok = placement.Consolidate(c, t, m.pieces, m.policy, m.limits); ok {
			if err := m.apply(c, moves); err != nil {
				return false, err
			}
			res.Moves += len(moves)
			res.Consolidated++
		}
	}
	if !ok {
		return false, nil
	}
	if err := c.Assign(ch, t); err != nil {
		return false, err
	}
	if isMovable {
		m.pieces = append(m.pieces, placement.Placed{Task: t, Choice: ch})
	}
	return true, nil
}

// apply moves the pieces as moves say.
func (m *mover) apply(c *placement.Cluster, moves []placement.Move) error {
	for _, mv := range moves {
		p := &m.pieces[mv.Piece]
		c.Release(p.Choice, p.Task)
	}
	for _, mv := range moves {
		p := &m.pieces[mv.Piece]
		if err := c.Assign(mv.To, p.Task); err != nil {
			return err
		}
		p.Choice = mv.To
	}
	return nil
}
