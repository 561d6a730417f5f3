package kubernetes

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/spillway-llm/spillway/discovery"
)

// An API server that refuses connections must make Run fail (or stop at the
// context's end), never hang, and never mark the store synced.
func TestRunUnreachableAPIServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	s, err := NewPoolSource(Config{RestConfig: &rest.Config{Host: "http://" + addr, Timeout: time.Second}, Namespace: "ns", PoolName: "p"})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := discovery.NewStore()
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx, store) }()
	select {
	case err = <-done:
	case <-ctx.Done():
		err = <-done
	}
	require.Error(t, err)
	assert.False(t, store.Synced())
	assert.Error(t, s.Run(ctx, store), "a second Run after the first returned fails the same way")
}
