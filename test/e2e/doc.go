// Package e2e holds spillway's end-to-end tests: the packages that were
// built separately (the front doors, the scheduling framework and its pool
// plugins, the token producer, discovery and scraping, the decode sidecar)
// run together against the vLLM simulator's real HTTP servers and ZMQ KV
// event publishers, all on 127.0.0.1. The tests live in *_test.go files;
// see docs/e2e.md for what each one proves and how to run them.
package e2e
