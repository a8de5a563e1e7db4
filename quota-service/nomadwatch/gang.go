package nomadwatch

import (
	"fmt"
	"strconv"
	"strings"

	nomadapi "github.com/hashicorp/nomad/api"
)

// MetaGang is the meta key that makes a job a gang: its GPU task groups
// run all together or not at all (docs/design.md, Gangs and elastic
// groups). It is read from the job's meta and from every task group's
// meta: "true" on either makes the whole job a gang.
const MetaGang = "gpushare.gang"

// gangOf reports whether job is a gang (MetaGang). A value that is not a
// boolean is an error naming where it was set; the job is then not a gang.
func gangOf(job *nomadapi.Job) (bool, error) {
	if job == nil {
		return false, nil
	}
	gang, err := metaBool(job.Meta, MetaGang)
	if err != nil {
		return false, fmt.Errorf("job meta: %w", err)
	}
	for _, tg := range job.TaskGroups {
		g, err := metaBool(tg.Meta, MetaGang)
		if err != nil {
			name := ""
			if tg.Name != nil {
				name = *tg.Name
			}
			return false, fmt.Errorf("task group %q meta: %w", name, err)
		}
		gang = gang || g
	}
	return gang, nil
}

// metaBool reads meta[key] as a boolean; absent or empty is false.
func metaBool(meta map[string]string, key string) (bool, error) {
	v, ok := meta[key]
	if !ok || strings.TrimSpace(v) == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(strings.TrimSpace(v))
	if err != nil {
		return false, fmt.Errorf("%s = %q: set it to \"true\" or \"false\"", key, v)
	}
	return b, nil
}
