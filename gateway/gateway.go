// Package gateway is spillway's built-in OpenAI-compatible HTTP gateway for
// deployments without Envoy: it runs the same director pipeline as the
// ext_proc server and proxies the request to the chosen endpoint, streaming
// the response back with a flush per chunk.
package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spillway-llm/spillway/director"
	"github.com/spillway-llm/spillway/profiles"
)

// Options configure a Gateway.
type Options struct {
	// Transport sends upstream requests; a tuned http.Transport when nil.
	Transport http.RoundTripper
	// DialTimeout bounds connecting to an endpoint (default 2s) before the
	// next fallback is tried.
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// Gateway is an http.Handler that routes and proxies OpenAI requests.
type Gateway struct {
	d   *director.Director
	rt  http.RoundTripper
	log *slog.Logger
}

// New returns a gateway running d.
func New(d *director.Director, o Options) *Gateway {
	if o.DialTimeout <= 0 {
		o.DialTimeout = 2 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	rt := o.Transport
	if rt == nil {
		dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
		rt = &http.Transport{
			DialContext:         dialer.DialContext,
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			// Streams are long; compression would buffer SSE chunks.
			DisableCompression: true,
		}
	}
	return &Gateway{d: d, rt: rt, log: o.Logger}
}

// hopHeaders are connection-scoped (RFC 9110 §7.6.1) and never forwarded.
var hopHeaders = map[string]bool{
	"connection": true, "proxy-connection": true, "keep-alive": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}

// ServeHTTP implements http.Handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	max := g.d.MaxBodyBytes()
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
	if err != nil {
		g.d.ObserveRejected(499)
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	if len(body) > max {
		g.d.ObserveRejected(http.StatusRequestEntityTooLarge)
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds the limit of %d bytes", max))
		return
	}
	hdrs := make(map[string]string, len(r.Header))
	for k, vs := range r.Header {
		hdrs[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	x, err := g.d.Route(r.Context(), director.Inbound{Method: r.Method, Path: r.URL.RequestURI(), Headers: hdrs, Body: body})
	if err != nil {
		code := profiles.HTTPStatus(err)
		if code >= 500 && code != http.StatusServiceUnavailable {
			g.log.Error("routing failed", "path", r.URL.Path, "err", err)
		}
		writeError(w, code, profiles.ClientMessage(err))
		return
	}
	g.proxy(w, r, x)
}

// proxy sends the request to the first target that accepts a connection and
// streams its response back.
func (g *Gateway) proxy(w http.ResponseWriter, r *http.Request, x *director.Exchange) {
	body, _ := x.Body()
	var resp *http.Response
	var lastErr error
	for _, addr := range x.Targets() {
		out, err := g.outbound(r, x, addr, body)
		if err != nil {
			x.Fail(http.StatusInternalServerError, err)
			writeError(w, http.StatusInternalServerError, "building the upstream request")
			return
		}
		resp, err = g.rt.RoundTrip(out)
		if err == nil {
			x.SetServed(addr)
			break
		}
		lastErr = err
		if r.Context().Err() != nil {
			x.Fail(499, r.Context().Err())
			return
		}
		if !connectFailed(err) {
			// Bytes may have reached the endpoint: retrying could run the
			// request twice.
			break
		}
		g.log.Warn("endpoint refused the connection; trying the next", "endpoint", addr, "err", err)
	}
	if resp == nil {
		x.Fail(http.StatusBadGateway, lastErr)
		writeError(w, http.StatusBadGateway, "no endpoint could be reached: "+errString(lastErr))
		return
	}
	defer resp.Body.Close()

	for k, vs := range resp.Header {
		if !hopHeaders[strings.ToLower(k)] {
			w.Header()[k] = vs
		}
	}
	if dbg := x.DebugHeader(); dbg != "" {
		w.Header().Set(director.HeaderDecision, dbg)
	}
	x.ResponseHeaders(resp.StatusCode, func(k string) string { return resp.Header.Get(k) })
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			x.ResponseBody(buf[:n], false)
			if _, werr := w.Write(buf[:n]); werr != nil {
				x.Fail(499, fmt.Errorf("writing to the client: %w", werr))
				return
			}
			if ferr := rc.Flush(); ferr != nil && !errors.Is(ferr, http.ErrNotSupported) {
				x.Fail(499, fmt.Errorf("flushing to the client: %w", ferr))
				return
			}
		}
		if errors.Is(rerr, io.EOF) {
			x.ResponseBody(nil, true)
			return
		}
		if rerr != nil {
			if r.Context().Err() != nil {
				x.Fail(499, r.Context().Err())
			} else {
				x.Fail(http.StatusBadGateway, fmt.Errorf("reading the upstream response from %s: %w", x.Served(), rerr))
			}
			// Abort the client response so it sees a truncated stream,
			// not a clean end.
			panic(http.ErrAbortHandler)
		}
	}
}

func (g *Gateway) outbound(r *http.Request, x *director.Exchange, addr string, body []byte) (*http.Request, error) {
	u := *r.URL
	u.Scheme, u.Host = "http", addr
	var rd io.Reader = http.NoBody
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	out, err := http.NewRequestWithContext(r.Context(), r.Method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		if hopHeaders[lk] || director.IsRoutingHeader(lk) || lk == "content-length" {
			continue
		}
		out.Header[k] = vs
	}
	out.Header.Set(director.HeaderDestination, addr)
	for k, v := range x.RoutingHeaders() {
		out.Header.Set(k, v)
	}
	out.ContentLength = int64(len(body))
	out.Host = r.Host
	if fwd := r.Header.Get("X-Forwarded-For"); fwd != "" {
		out.Header.Set("X-Forwarded-For", fwd+", "+clientIP(r))
	} else {
		out.Header.Set("X-Forwarded-For", clientIP(r))
	}
	return out, nil
}

func clientIP(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}

// connectFailed reports whether err happened while connecting, so that no
// byte of the request reached the endpoint and the next one may be tried.
func connectFailed(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, context.DeadlineExceeded) && strings.Contains(err.Error(), "dial")
}

func errString(err error) string {
	if err == nil {
		return "no target"
	}
	return err.Error()
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(director.ErrorBody(code, msg))
}
