package wire

import (
	"errors"
	"fmt"
)

// Code is a wire error code. The numbers are part of felix/1 (every client
// and broker speaking it agrees on them) and travel as u16 in binary acks;
// never renumber one.
type Code uint16

// NOTE: when adding a code, add it to codeNames and defaultRetry too.
const (
	CodeUnauthenticated  Code = 1
	CodeForbidden        Code = 2
	CodeNotFound         Code = 3
	CodeInvalidRequest   Code = 4
	CodeShardUnavailable Code = 5
	CodeNotLeader        Code = 6
	CodeQuorumTimeout    Code = 7
	CodeLeadershipLost   Code = 8
	CodeUnacknowledged   Code = 9
	CodeOverloaded       Code = 10
	CodeLimitExceeded    Code = 11
	CodeDraining         Code = 12
	CodeInternal         Code = 13
	CodeStorage          Code = 14
	CodeStaleClaim       Code = 15
)

var codeNames = map[Code]string{
	CodeUnauthenticated: "unauthenticated", CodeForbidden: "forbidden", CodeNotFound: "not_found",
	CodeInvalidRequest: "invalid_request", CodeShardUnavailable: "shard_unavailable", CodeNotLeader: "not_leader",
	CodeQuorumTimeout: "quorum_timeout", CodeLeadershipLost: "leadership_lost", CodeUnacknowledged: "unacknowledged",
	CodeOverloaded: "overloaded", CodeLimitExceeded: "limit_exceeded", CodeDraining: "draining",
	CodeInternal: "internal", CodeStorage: "storage", CodeStaleClaim: "stale_claim",
}

// String returns the code's wire name.
func (c Code) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return fmt.Sprintf("code(%d)", uint16(c))
}

// RetryClass tells a client what to do about an error.
type RetryClass uint8

const (
	RetryUnknown        RetryClass = 0
	Retry               RetryClass = 1
	RetryAfter          RetryClass = 2
	RetryRedirect       RetryClass = 3
	RetryOutcomeUnknown RetryClass = 4
	RetryFatal          RetryClass = 5
)

var defaultRetry = map[Code]RetryClass{
	CodeUnauthenticated: RetryFatal, CodeForbidden: RetryFatal, CodeNotFound: RetryAfter,
	CodeInvalidRequest: RetryFatal, CodeShardUnavailable: Retry, CodeNotLeader: RetryRedirect,
	CodeQuorumTimeout: RetryOutcomeUnknown, CodeLeadershipLost: RetryOutcomeUnknown,
	CodeUnacknowledged: RetryOutcomeUnknown, CodeOverloaded: RetryAfter, CodeLimitExceeded: RetryFatal,
	CodeDraining: Retry, CodeInternal: RetryOutcomeUnknown, CodeStorage: RetryOutcomeUnknown,
	CodeStaleClaim: Retry,
}

// Error is an error the broker sends to a client, in a control message or a
// binary ack. Clients match it with errors.Is against the Err* sentinels
// below, which compare codes.
type Error struct {
	Code    Code
	Retry   RetryClass
	Message string
	// Owner, when set, names the member that owns the shard (not_leader:
	// go there; shard_unavailable: the member that is gone).
	Owner *Owner
	// Cause is the broker-side error this one reports, when it was built
	// with WrapError; Unwrap returns it, so errors.Is(err,
	// persistence.ErrPoisoned) works inside the broker. It never travels:
	// its text is in Message, and an Error decoded from the wire has none.
	Cause error
}

// NewError builds an Error with the code's default retry class.
func NewError(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Retry: defaultRetry[code], Message: fmt.Sprintf(format, args...)}
}

// WrapError is NewError for an error caused by cause: the message is
// format's, then ": " and cause's text, and Unwrap returns cause. Use it
// where the broker turns a local error (a log's, a store's) into a wire
// error, instead of formatting cause with %v, which loses it.
func WrapError(code Code, cause error, format string, args ...any) *Error {
	e := NewError(code, format, args...)
	e.Message += ": " + cause.Error()
	e.Cause = cause
	return e
}

// Error reads "code: message". It has no "felix:" prefix: callers wrap it
// in their own context ("subscribe to t/ns/s: not_found: …"), and a prefix
// here would show up in the middle of that line.
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Unwrap returns the cause given to WrapError, or nil.
func (e *Error) Unwrap() error { return e.Cause }

// Is matches another *Error with the same code, so errors.Is(err, ErrOverloaded) works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code && t.Message == ""
}

// Sentinels for errors.Is; they carry only a code.
var (
	ErrUnauthenticated = &Error{Code: CodeUnauthenticated}
	ErrForbidden       = &Error{Code: CodeForbidden}
	ErrNotFound        = &Error{Code: CodeNotFound}
	ErrInvalidRequest  = &Error{Code: CodeInvalidRequest}
	ErrOverloaded      = &Error{Code: CodeOverloaded}
	ErrLimitExceeded   = &Error{Code: CodeLimitExceeded}
	ErrDraining        = &Error{Code: CodeDraining}
	ErrInternal        = &Error{Code: CodeInternal}
	ErrStorage         = &Error{Code: CodeStorage}
	ErrNotLeader       = &Error{Code: CodeNotLeader}
	ErrUnavailable     = &Error{Code: CodeShardUnavailable}
)

// CursorError is a refused start offset; the broker sends it as
// SubscribeCursorError.
type CursorError struct {
	Reason    string // in_future or too_old
	Requested uint64
	Available uint64
}

func (e *CursorError) Error() string {
	return fmt.Sprintf("cursor %s: offset %d; the nearest usable offset is %d", e.Reason, e.Requested, e.Available)
}

// ErrOffsetMismatch matches (errors.Is) every RefusedError of a conditional
// publish whose expected offset was not the stream's next.
var ErrOffsetMismatch = errors.New("wire: publish refused: offset_mismatch")

// RefusedError is a refused conditional or idempotent publish; the broker
// sends it as PublishRefused. Nothing of the batch was written and no
// offset was used.
type RefusedError struct {
	Reason string // offset_mismatch, or an idempotent producer's Reason*
	// Expected is what the publisher expected (offset_mismatch), or the
	// sequence the shard expected from the producer (sequence_gap).
	Expected uint64
	Tail     uint64 // offset_mismatch: the offset the batch would have started at
	Message  string
}

func (e *RefusedError) Error() string {
	if e.Message != "" {
		return "publish refused: " + e.Reason + ": " + e.Message
	}
	switch e.Reason {
	case ReasonOffsetMismatch:
		return fmt.Sprintf("publish refused: %s: expected offset %d, the stream's next is %d", e.Reason, e.Expected, e.Tail)
	case ReasonSequenceGap:
		return fmt.Sprintf("publish refused: %s: the shard expects sequence %d", e.Reason, e.Expected)
	}
	return "publish refused: " + e.Reason
}

// Is makes errors.Is(err, ErrOffsetMismatch) match an offset mismatch.
func (e *RefusedError) Is(target error) bool {
	return target == ErrOffsetMismatch && e.Reason == ReasonOffsetMismatch
}

// ReasonOffsetMismatch is RefusedError's reason for an expected offset
// that was not the stream's next.
const ReasonOffsetMismatch = "offset_mismatch"

// RefusedError's reasons for an idempotent producer's publish.
const (
	// ReasonSequenceGap: the sequence skips ahead; Expected is the one the
	// shard expects next.
	ReasonSequenceGap = "sequence_gap"
	// ReasonUnknownProducer: the producer id was never given out by
	// producer_init, or the shard no longer remembers it.
	ReasonUnknownProducer = "unknown_producer"
	// ReasonSequenceReused: a remembered sequence re-sent with other content.
	ReasonSequenceReused = "sequence_reused"
	// ReasonSequenceExpired: a sequence older than the batches the shard
	// remembers for the producer.
	ReasonSequenceExpired = "sequence_expired"
)

// AsError returns err as a wire error, wrapping anything else as internal.
func AsError(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	return NewError(CodeInternal, "%v", err)
}
