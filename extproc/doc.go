// Package extproc is spillway's Envoy external-processing (ext_proc) server:
// the endpoint picker protocol of the Gateway API Inference Extension
// (protocols.md §1). It buffers the request body (FULL_DUPLEX_STREAMED),
// runs the director, answers the request headers with the destination
// header and identical envoy.lb metadata, streams the body back, and
// observes the response to drive the request's lifecycle hooks.
package extproc
