//go:build testhooks

package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"

	"github.com/sandbox-mcp/sandbox-mcp/manage"
)

// withTestHoldLock returns store, wrapped by the hook of testHoldLockEnv
// when that variable is set.
func withTestHoldLock(store manage.Store, log *slog.Logger) manage.Store {
	marker := os.Getenv(testHoldLockEnv)
	if marker == "" {
		return store
	}
	return holdLockStore{Store: store, marker: marker, log: log}
}

// holdLockStore is a Store whose first creation lock (across the processes
// sharing marker) is held until the process is killed.
type holdLockStore struct {
	manage.Store
	marker string
	log    *slog.Logger
}

// Lock implements manage.Store.
func (s holdLockStore) Lock(ctx context.Context, key string) (context.Context, func(), error) {
	held, unlock, err := s.Store.Lock(ctx, key)
	if err != nil {
		return held, unlock, err
	}
	f, ferr := os.OpenFile(s.marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(ferr, fs.ErrExist) {
		return held, unlock, nil
	}
	if ferr == nil {
		ferr = f.Close()
	}
	s.log.Warn("test hook: holding the creation lock until killed", "key", key, "env", testHoldLockEnv, "marker_err", ferr)
	select {}
}
