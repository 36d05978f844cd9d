package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Error codes shared by every dialect. An adapter maps them to its own
// error type names; Status carries the HTTP status.
const (
	CodeInvalidRequest  = "invalid_request"
	CodeModelNotFound   = "model_not_found"
	CodeNotFound        = "not_found"
	CodeContextExceeded = "context_length_exceeded"
	CodeBodyTooLarge    = "request_too_large"
	CodeUnauthorized    = "unauthorized"
	CodeQueueFull       = "queue_full"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal_error"
	CodePermission      = "permission_denied"
	CodeLoadFailed      = "model_load_failed"
)

// Error is a failure to report to a client. The core returns it for every
// problem a client can cause or see (bad input, unknown model, full queue);
// dialect adapters render it in their own error shape with Status.
type Error struct {
	// Status is the HTTP status code.
	Status int
	// Code is one of the Code constants.
	Code string
	// Param names the offending request field as the client spelled it
	// ("messages[2].content", "max_tokens"), or is empty.
	Param string
	// Message is a human-readable explanation.
	Message string
	// RetryAfter, when positive, tells the client when to try again
	// (the Retry-After header of a 429 or 503).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Param != "" {
		return e.Param + ": " + e.Message
	}
	return e.Message
}

// invalid returns a 400 error naming param.
func invalid(param, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeInvalidRequest, Param: param, Message: fmt.Sprintf(format, args...)}
}

// Invalid returns a 400 invalid-request error naming the request field
// param. Dialect adapters use it for their own validation.
func Invalid(param, format string, args ...any) *Error { return invalid(param, format, args...) }

// errModelNotFound reports an unknown model id.
func errModelNotFound(id string) *Error {
	return &Error{Status: http.StatusNotFound, Code: CodeModelNotFound, Param: "model",
		Message: fmt.Sprintf("the model %q does not exist", id)}
}

var (
	errQueueFull = &Error{Status: http.StatusTooManyRequests, Code: CodeQueueFull,
		Message: "the server is busy: the request queue is full, retry later"}
	errShuttingDown = &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable,
		Message: "the server is shutting down", RetryAfter: shutdownRetryAfter}
	errUnauthorized = &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
		Message: "missing or invalid API key"}
	errAdminUnauthorized = &Error{Status: http.StatusUnauthorized, Code: CodeUnauthorized,
		Message: "missing or invalid admin key (the admin routes take the admin key, not the API key)"}
)

// errBodyTooLarge reports a request body over the limit.
func errBodyTooLarge(limit int64) *Error {
	return &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBodyTooLarge,
		Message: fmt.Sprintf("request body is larger than %d bytes", limit)}
}

// internalError wraps an unexpected failure. Its message is generic; the
// cause is logged, not sent.
func internalError() *Error {
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal server error"}
}

// AsError returns err as an *Error: itself when it is one, otherwise a 500.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return internalError()
}
