package service_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// readCounter counts the service's requests to Nomad and the bytes of
// their answers (the event stream's apart); with refuseStream it answers
// the event stream with 403, as Nomad does a token that may not read it.
type readCounter struct {
	refuseStream    bool
	mu              sync.Mutex
	requests, bytes int64
	streamBytes     int64
	next            http.RoundTripper
}

func (c *readCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if c.refuseStream && req.URL.Path == "/v1/event/stream" {
		return &http.Response{StatusCode: http.StatusForbidden, Status: "403 Forbidden", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{}, Body: io.NopCloser(strings.NewReader("Permission denied")), Request: req}, nil
	}
	resp, err := c.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	stream := req.URL.Path == "/v1/event/stream"
	c.mu.Lock()
	if !stream {
		c.requests++
	}
	c.mu.Unlock()
	resp.Body = &countingBody{ReadCloser: resp.Body, add: func(n int) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if stream {
			c.streamBytes += int64(n)
		} else {
			c.bytes += int64(n)
		}
	}}
	return resp, nil
}

// take returns the counts and resets them.
func (c *readCounter) take() (requests, bytes, streamBytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	requests, bytes, streamBytes = c.requests, c.bytes, c.streamBytes
	c.requests, c.bytes, c.streamBytes = 0, 0, 0
	return
}

type countingBody struct {
	io.ReadCloser
	add func(int)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.add(n)
	return n, err
}

// countedNomad is a Nomad client whose reads c counts.
func countedNomad(t testing.TB, addr string, c *readCounter) *nomadapi.Client {
	t.Helper()
	c.next = http.DefaultTransport.(*http.Transport).Clone()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: addr, HttpClient: &http.Client{Transport: c}})
	if err != nil {
		t.Fatal(err)
	}
	return client
}
