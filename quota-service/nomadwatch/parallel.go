package nomadwatch

import (
	"errors"
	"sync"
)

// readsInFlight bounds the reads of single objects in flight at once: a
// new leader reads every node and every job once, and a cluster has
// thousands of each.
const readsInFlight = 8

// readEach calls read for every item, at most readsInFlight at a time,
// and puts what each read into out under its key. It returns every
// read's error, joined.
func readEach[I, V any](items []I, out map[string]V, read func(I) (string, V, error)) error {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		slot = make(chan struct{}, readsInFlight)
	)
	for _, it := range items {
		wg.Add(1)
		slot <- struct{}{}
		go func() {
			defer func() { <-slot; wg.Done() }()
			key, v, err := read(it)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			out[key] = v
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
