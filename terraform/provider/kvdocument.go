package provider

import (
	"context"
	"fmt"

	consulapi "github.com/hashicorp/consul/api"
)

// kvDocument is what the document resources (gpushare_quota,
// gpushare_department) do with their Consul key: create only over nothing
// or a document the service rejects (a valid one is another owner's),
// read, overwrite, delete.
type kvDocument struct {
	c *clients
	// holds names a document for errors, before its name: "a quota for
	// project", "department".
	holds string
	// valid says whether the service's parser takes the document of name.
	valid func(name string, value []byte) bool
}

// create writes value at key for name, where there is no document or one
// the service rejects (Read drops such a document from state so that apply
// replaces it).
func (d kvDocument) create(ctx context.Context, name, key string, value []byte) error {
	pair, _, err := d.c.consul.KV().Get(key, (&consulapi.QueryOptions{RequireConsistent: true}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("reading Consul key %s: %w", key, err)
	}
	var index uint64
	if pair != nil {
		if d.valid(name, pair.Value) {
			return fmt.Errorf("%s already holds %s %q: import it (%s) or delete the key first", key, d.holds, name, importCommand(name))
		}
		index = pair.ModifyIndex
	}
	ok, _, err := d.c.consul.KV().CAS(&consulapi.KVPair{Key: key, Value: value, ModifyIndex: index}, (&consulapi.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("writing Consul key %s: %w (is the token allowed to write it?)", key, err)
	}
	if !ok {
		return fmt.Errorf("%s changed while it was being written; run plan again", key)
	}
	return nil
}

// read returns the document at key, or found false.
func (d kvDocument) read(ctx context.Context, key string) (value []byte, found bool, err error) {
	pair, _, err := d.c.consul.KV().Get(key, (&consulapi.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return nil, false, fmt.Errorf("reading Consul key %s: %w", key, err)
	}
	if pair == nil {
		return nil, false, nil
	}
	return pair.Value, true, nil
}

// put overwrites the document at key.
func (d kvDocument) put(ctx context.Context, key string, value []byte) error {
	if _, err := d.c.consul.KV().Put(&consulapi.KVPair{Key: key, Value: value}, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("writing Consul key %s: %w", key, err)
	}
	return nil
}

// delete removes the document at key.
func (d kvDocument) delete(ctx context.Context, key string) error {
	if _, err := d.c.consul.KV().Delete(key, (&consulapi.WriteOptions{}).WithContext(ctx)); err != nil {
		return fmt.Errorf("deleting Consul key %s: %w", key, err)
	}
	return nil
}
