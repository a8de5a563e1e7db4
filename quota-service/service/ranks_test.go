package service_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/ranking"
)

// checkRanksPublished waits until the servers show placement ranks
// (gpushare.rank.<class>) in the node's metadata: the leader published
// them through the Nomad API.
func checkRanksPublished(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	testcluster.Eventually(t, 60*time.Second, func() error {
		node, _, err := c.Nomad.Nodes().Info(c.NodeID, nil)
		if err != nil {
			return err
		}
		var keys []string
		for k, v := range node.Meta {
			if strings.HasPrefix(k, ranking.Prefix) {
				keys = append(keys, k+"="+v)
			}
		}
		if len(keys) == 0 {
			return fmt.Errorf("node %s has no %s* metadata yet", c.NodeID, ranking.Prefix)
		}
		t.Logf("placement ranks on node %s: %s", c.NodeID, strings.Join(keys, " "))
		return nil
	})
}
