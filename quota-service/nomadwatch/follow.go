package nomadwatch

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// streamTopics are the topics the service follows: Node, Allocation and
// Job keep the cache; Evaluation marks system jobs' summaries for a
// re-read; every topic wakes a re-plan.
var streamTopics = map[nomadapi.Topic][]string{
	nomadapi.TopicNode: {"*"}, nomadapi.TopicAllocation: {"*"}, nomadapi.TopicJob: {"*"},
	nomadapi.TopicEvaluation: {"*"}, nomadapi.TopicDeployment: {"*"},
}

// refusedRetry is how long the follower waits before asking again for a
// stream Nomad refused (403): an operator may fix the token's policy.
const refusedRetry = time.Minute

// Follow follows Nomad's event stream until ctx ends, applies its events
// to the cache and calls changed after every batch and whenever the
// stream connects or breaks. While the stream is connected, Build plans on
// the cache; on (re)connect the cache is listed again in full, since
// events in the gap are lost. A stream Nomad refuses (403: the token lacks
// read-job in a namespace, or node:read) leaves Build listing Nomad in
// full every cycle, as polling, with a warning.
func (b *Builder) Follow(ctx context.Context, changed func()) {
	log := b.log.Named("events")
	backoff := 500 * time.Millisecond
	warned := false
	for ctx.Err() == nil {
		// Nomad fixes a wildcard stream's namespaces when it subscribes:
		// read them first, so that one created meanwhile shows as new.
		namespaces, nsErr := b.namespaces(ctx)
		sctx, cancel := context.WithCancel(ctx)
		ch, err := b.nomad.EventStream().Stream(sctx, streamTopics, 0, &nomadapi.QueryOptions{Namespace: "*"})
		if err == nil {
			err = nsErr
		}
		if err != nil {
			cancel()
			wait := backoff
			if StatusCode(err) == http.StatusForbidden {
				wait = refusedRetry
				if !warned {
					log.Warn("Nomad refused the event stream: polling instead, listing Nomad in full every cycle; the token needs read-job in every namespace and node:read (docs/design.md, The service's view of Nomad)", "error", err)
					warned = true
				}
			} else {
				log.Warn("event stream unavailable; listing Nomad in full every cycle meanwhile", "error", err)
				backoff = min(2*backoff, 10*time.Second)
			}
			if !sleep(ctx, wait) {
				return
			}
			continue
		}
		if warned {
			log.Info("event stream accepted; following Nomad's events again")
			warned = false
		}
		backoff = 500 * time.Millisecond
		b.connected(namespaces)
		changed() // events in the gap are lost: the next Build lists in full
		b.consume(ctx, ch, changed)
		cancel()
		b.disconnected()
		changed()
		if !sleep(ctx, backoff) {
			return
		}
	}
}

// consume applies the stream's batches until it breaks or a batch cannot
// be applied (a gap).
func (b *Builder) consume(ctx context.Context, ch <-chan *nomadapi.Events, changed func()) {
	log := b.log.Named("events")
	for {
		var evs *nomadapi.Events
		select {
		case <-b.reconnect:
			log.Info("Nomad has a namespace the event stream does not cover; reconnecting")
			return
		case evs = <-ch:
		}
		if evs == nil {
			return
		}
		if evs.Err != nil {
			if ctx.Err() == nil {
				log.Warn("event stream broke; reconnecting and listing Nomad in full", "error", evs.Err)
			}
			return
		}
		if hook := b.opts.EventHook; hook != nil && !hook(evs) {
			continue
		}
		if err := b.applyBatch(evs); err != nil {
			log.Warn("gap in the event stream; reconnecting and listing Nomad in full", "error", err)
			return
		}
		changed()
	}
}

// namespaces names Nomad's namespaces, sorted, as one string.
func (b *Builder) namespaces(ctx context.Context) (string, error) {
	list, _, err := b.nomad.Namespaces().List((&nomadapi.QueryOptions{AllowStale: true}).WithContext(ctx))
	if err != nil {
		return "", fmt.Errorf("listing Nomad namespaces: %w", err)
	}
	names := make([]string, 0, len(list))
	for _, ns := range list {
		names = append(names, ns.Name)
	}
	sort.Strings(names)
	return strings.Join(names, ","), nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
