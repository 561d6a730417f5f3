package profiles

import (
	"errors"
	"fmt"
	"net/http"
)

// StatusError is an error that the front doors (ext_proc, gateway) turn into
// an HTTP status and message for the client.
type StatusError struct {
	Code    int    // HTTP status
	Message string // shown to the client
	Err     error  // optional cause
}

func (e *StatusError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %s: %v", e.Code, http.StatusText(e.Code), e.Message, e.Err)
	}
	return fmt.Sprintf("%d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

func (e *StatusError) Unwrap() error { return e.Err }

// BadRequest returns a 400 error with a precise message.
func BadRequest(format string, args ...any) error {
	return &StatusError{Code: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// ErrNoEndpoints is returned when no endpoint is eligible; it maps to 503.
var ErrNoEndpoints = &StatusError{Code: http.StatusServiceUnavailable, Message: "no ready endpoint"}

// ErrShed is returned when the request is shed because the pool is saturated;
// it maps to 429.
var ErrShed = &StatusError{Code: http.StatusTooManyRequests, Message: "request shed: pool saturated"}

// HTTPStatus returns the status code an error should be answered with.
func HTTPStatus(err error) int {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code
	}
	return http.StatusInternalServerError
}

// ClientMessage returns the message to show a client for err.
func ClientMessage(err error) string {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Message
	}
	return "internal error"
}
