package nomadwatch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"

	gojson "github.com/goccy/go-json"
	nomadapi "github.com/hashicorp/nomad/api"
)

// A node as Nomad's API answers it is about 125 KB of JSON on an 8-GPU
// node at 100 shares per GPU (808 device instances), and a listing reads
// every node that changed: at 5,000 nodes, decoding them with
// encoding/json was most of a resync's CPU. getNode decodes them with
// go-json (about four times as fast: BenchmarkDecodeNodeJSON); what it
// refuses, or a panic in it, goes to encoding/json, whose verdict stands.
// FuzzDecodeNodeJSON holds the two to the same node for any valid JSON.

// getNode reads node id from Nomad (stale: any server may answer).
func (b *Builder) getNode(ctx context.Context, id string, stale bool) (*nomadapi.Node, error) {
	body, err := b.nomad.Raw().Response("/v1/node/"+url.PathEscape(id), (&nomadapi.QueryOptions{AllowStale: stale}).WithContext(ctx))
	if err != nil {
		return nil, err
	}
	defer body.Close()
	buf := nodeBuffers.Get().(*bytes.Buffer)
	defer putNodeBuffer(buf)
	buf.Reset()
	if _, err := buf.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	return decodeNodeJSON(buf.Bytes())
}

// nodeBuffers hold node answers while they are decoded (both decoders
// copy what they keep): a resync reads thousands of nodes, and a new
// buffer for each spent more on fresh memory than on decoding.
var nodeBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putNodeBuffer returns buf to the pool unless an outsized answer grew it.
func putNodeBuffer(buf *bytes.Buffer) {
	if buf.Cap() <= 4<<20 {
		nodeBuffers.Put(buf)
	}
}

// decodeNodeJSON decodes one node's JSON.
func decodeNodeJSON(data []byte) (*nomadapi.Node, error) {
	if n, ok := fastDecodeNode(data); ok {
		return n, nil
	}
	n := new(nomadapi.Node)
	if err := json.Unmarshal(data, n); err != nil {
		return nil, fmt.Errorf("decoding the node: %w", err)
	}
	return n, nil
}

// fastDecodeNode decodes data with go-json; false when it fails or
// panics.
func fastDecodeNode(data []byte) (n *nomadapi.Node, ok bool) {
	defer func() {
		if recover() != nil {
			n, ok = nil, false
		}
	}()
	n = new(nomadapi.Node)
	if err := gojson.Unmarshal(data, n); err != nil {
		return nil, false
	}
	return n, true
}
