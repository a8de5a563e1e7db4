package nomadwatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/backoff"
	nomadapi "github.com/hashicorp/nomad/api"
)

// streamTopics are the topics the service follows: Node, Allocation and
// Job keep the cache; Evaluation marks system jobs' summaries for a
// re-read. A batch wakes a re-plan when it changed something the View
// reads (cache.news).
var streamTopics = map[nomadapi.Topic][]string{
	nomadapi.TopicNode: {"*"}, nomadapi.TopicAllocation: {"*"}, nomadapi.TopicJob: {"*"},
	nomadapi.TopicEvaluation: {"*"}, nomadapi.TopicDeployment: {"*"},
}

// refusedRetry is how long the follower waits before asking again for a
// stream Nomad refused (403): an operator may fix the token's policy.
const refusedRetry = time.Minute

// Follow follows Nomad's event stream until ctx ends, applies its events
// to the cache and calls changed after every batch that was news to the
// View (an event that only moved a modify index is not) and whenever the
// stream connects or breaks. While the stream is connected, Build plans on
// the cache; on (re)connect the cache is listed again in full, since
// events in the gap are lost. Without the stream, Build lists Nomad in
// full every cycle, as polling. Nomad refuses a stream whose token lacks
// read-job in a namespace or node:read: with a 403, or (Nomad 1.11) by
// closing it at once without a word; either is logged once as a warning
// and asked for again every refusedRetry.
func (b *Builder) Follow(ctx context.Context, changed func()) {
	log := b.log.Named("events")
	retry := backoff.Backoff{Min: 2 * reconnectWait, Max: 10 * time.Second}
	refused := false
	for ctx.Err() == nil {
		flowed, quick, err := b.session(ctx, changed)
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		switch {
		case flowed:
			if refused {
				log.Info("Nomad accepts the event stream again; following its events")
			}
			refused, wait = false, reconnectWait
			retry.Waited(wait)
		case StatusCode(err) == http.StatusForbidden || quick:
			if !refused {
				log.Warn("Nomad refused or closed the event stream at once: polling instead, listing Nomad in full every cycle; the service's token needs read-job in every namespace and node:read (docs/design.md, The service's view of Nomad)", "error", err)
			}
			refused, wait = true, refusedRetry
			retry.Waited(wait)
		default:
			wait = retry.Next()
		}
		if err != nil && !refused {
			log.Warn("event stream broke or unavailable; listing Nomad in full every cycle until it is back", "error", err)
		}
		if !backoff.Sleep(ctx, wait) {
			return
		}
	}
}

// reconnectWait is how long the follower waits before subscribing again
// after a stream that delivered events ended; a failure after it waits
// twice as long, then longer up to 10 s.
const reconnectWait = 500 * time.Millisecond

// quickClose is how soon after connecting a stream that ends without a
// batch counts as refused.
const quickClose = 3 * time.Second

// session connects the stream once and consumes it: flowed says a batch
// arrived, quick that it ended without one right after connecting, err
// why it ended (nil when Build asked for a new subscription).
func (b *Builder) session(ctx context.Context, changed func()) (flowed, quick bool, err error) {
	// Nomad fixes a wildcard stream's namespaces when it subscribes:
	// read them first, so that one created meanwhile shows as new.
	namespaces, err := b.namespaces(ctx)
	if err != nil {
		return false, false, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := b.nomad.EventStream().Stream(sctx, streamTopics, 0, &nomadapi.QueryOptions{Namespace: "*"})
	if err != nil {
		return false, false, fmt.Errorf("subscribing to Nomad's event stream: %w", err)
	}
	start := time.Now()
	b.connected(namespaces)
	changed() // events before it are lost: the next Build lists in full
	defer changed()
	defer b.disconnected()
	flowed, err = b.consume(ctx, ch, changed)
	return flowed, !flowed && err != nil && time.Since(start) < quickClose, err
}

// consume applies the stream's batches until it breaks, a batch cannot be
// applied (a gap) or Build asks for a new subscription.
func (b *Builder) consume(ctx context.Context, ch <-chan *nomadapi.Events, changed func()) (flowed bool, err error) {
	for {
		var evs *nomadapi.Events
		select {
		case <-b.reconnect:
			b.log.Named("events").Info("Nomad has a namespace the event stream does not cover; subscribing again")
			return flowed, nil
		case <-ctx.Done():
			return flowed, nil
		case evs = <-ch:
		}
		if evs == nil {
			return flowed, errors.New("event stream closed")
		}
		if evs.Err != nil {
			return flowed, fmt.Errorf("reading Nomad's event stream: %w", evs.Err)
		}
		flowed = true
		if hook := b.opts.EventHook; hook != nil && !hook(evs) {
			continue
		}
		news, err := b.applyBatch(evs)
		if err != nil {
			return flowed, fmt.Errorf("gap in the event stream: %w", err)
		}
		if news {
			changed()
		}
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
