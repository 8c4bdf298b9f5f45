package wire

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"

	"github.com/getfelix/felix-go/persistence"
)

func TestErrorIs(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{name: "same code", err: NewError(CodeOverloaded, "x"), target: ErrOverloaded, want: true},
		{name: "same code, other retry", err: &Error{Code: CodeOverloaded, Retry: RetryFatal, Message: "x"}, target: ErrOverloaded, want: true},
		{name: "different code", err: NewError(CodeOverloaded, "x"), target: ErrDraining, want: false},
		{name: "wrapped", err: fmt.Errorf("publish: %w", NewError(CodeNotFound, "no stream")), target: ErrNotFound, want: true},
		{name: "wrapped twice", err: fmt.Errorf("a: %w", fmt.Errorf("b: %w", NewError(CodeInternal, "x"))), target: ErrInternal, want: true},
		{name: "joined", err: errors.Join(io.EOF, NewError(CodeLimitExceeded, "x")), target: ErrLimitExceeded, want: true},
		{name: "sentinel is itself", err: ErrUnauthenticated, target: ErrUnauthenticated, want: true},
		{name: "sentinel against another", err: ErrUnauthenticated, target: ErrInvalidRequest, want: false},
		// A target with a message is a specific error, not a code sentinel.
		{name: "target with a message", err: NewError(CodeOverloaded, "x"), target: NewError(CodeOverloaded, "x"), want: false},
		{name: "sentinel does not match a specific error", err: ErrOverloaded, target: NewError(CodeOverloaded, "x"), want: false},
		{name: "plain error", err: errors.New("overloaded"), target: ErrOverloaded, want: false},
		{name: "wire error is not a frame error", err: NewError(CodeInvalidRequest, "x"), target: ErrMalformed, want: false},
		{name: "frame error is not a wire error", err: ErrMalformed, target: ErrInvalidRequest, want: false},
		{name: "nil", err: nil, target: ErrInternal, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Fatalf("errors.Is(%v, %v) = %t, want %t", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

func TestSentinelCodes(t *testing.T) {
	tests := []struct {
		give *Error
		want Code
	}{
		{give: ErrUnauthenticated, want: CodeUnauthenticated},
		{give: ErrNotFound, want: CodeNotFound},
		{give: ErrInvalidRequest, want: CodeInvalidRequest},
		{give: ErrOverloaded, want: CodeOverloaded},
		{give: ErrLimitExceeded, want: CodeLimitExceeded},
		{give: ErrDraining, want: CodeDraining},
		{give: ErrInternal, want: CodeInternal},
		{give: ErrStorage, want: CodeStorage},
	}
	for _, tt := range tests {
		t.Run(tt.want.String(), func(t *testing.T) {
			if tt.give.Code != tt.want || tt.give.Message != "" {
				t.Fatalf("sentinel = %+v, want code %v and no message", *tt.give, tt.want)
			}
			if !errors.Is(NewError(tt.want, "m"), tt.give) {
				t.Fatalf("errors.Is(NewError(%v), sentinel) = false", tt.want)
			}
		})
	}
}

func TestAsError(t *testing.T) {
	t.Run("plain error is internal", func(t *testing.T) {
		got := AsError(errors.New("disk on fire"))
		if got.Code != CodeInternal || got.Retry != RetryOutcomeUnknown || got.Message != "disk on fire" {
			t.Fatalf("AsError(plain) = %+v", *got)
		}
		if !errors.Is(got, ErrInternal) {
			t.Fatal("AsError(plain) does not match ErrInternal")
		}
	})
	t.Run("wire error is returned as is", func(t *testing.T) {
		we := NewError(CodeNotLeader, "ask shard 3")
		if got := AsError(we); got != we {
			t.Fatalf("AsError(*Error) = %p, want %p", got, we)
		}
	})
	t.Run("wrapped wire error is unwrapped", func(t *testing.T) {
		we := NewError(CodeForbidden, "no")
		if got := AsError(fmt.Errorf("subscribe: %w", we)); got != we {
			t.Fatalf("AsError(wrapped) = %+v, want the wrapped error", got)
		}
	})
	t.Run("frame error is internal", func(t *testing.T) {
		got := AsError(fmt.Errorf("%w: bad", ErrMalformed))
		if got.Code != CodeInternal || !strings.Contains(got.Message, "malformed") {
			t.Fatalf("AsError(ErrMalformed) = %+v", *got)
		}
	})
}

// TestWrapErrorKeepsCause: a storage error built from a poisoned log's error
// still matches persistence.ErrPoisoned (and reaches the *ErrIO behind it),
// and still matches ErrStorage by code; the cause's text is in the message,
// which is all that travels.
func TestWrapErrorKeepsCause(t *testing.T) {
	cause := &persistence.ErrIO{Op: "fsync", Path: "00000000.log", Err: syscall.EIO}
	err := fmt.Errorf("append: %w", WrapError(CodeStorage, cause, "append to %s", "t/ns/s"))
	if !errors.Is(err, persistence.ErrPoisoned) {
		t.Errorf("errors.Is(%v, persistence.ErrPoisoned) = false, want true", err)
	}
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("errors.Is(%v, syscall.EIO) = false, want true", err)
	}
	if !errors.Is(err, ErrStorage) {
		t.Errorf("errors.Is(%v, ErrStorage) = false, want true", err)
	}
	if errors.Is(err, ErrInternal) {
		t.Errorf("errors.Is(%v, ErrInternal) = true, want false", err)
	}
	var we *Error
	if !errors.As(err, &we) || we.Retry != RetryOutcomeUnknown {
		t.Fatalf("errors.As(%v, *Error) = %v, want a storage error with its default retry class", err, we)
	}
	if want := "append to t/ns/s: " + cause.Error(); we.Message != want {
		t.Errorf("Message = %q, want %q", we.Message, want)
	}
	if errors.Unwrap(NewError(CodeStorage, "x")) != nil {
		t.Errorf("errors.Unwrap(NewError(...)) != nil: only WrapError has a cause")
	}
}

func TestNewError(t *testing.T) {
	err := NewError(CodeNotFound, "stream %q in %s", "s", "ns")
	if err.Code != CodeNotFound || err.Retry != RetryAfter || err.Message != `stream "s" in ns` {
		t.Fatalf("NewError = %+v", *err)
	}
	if got, want := err.Error(), `not_found: stream "s" in ns`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got := NewError(999, "x"); got.Retry != RetryUnknown {
		t.Fatalf("NewError(unknown code).Retry = %v, want RetryUnknown", got.Retry)
	}
}

// Every code has a wire name and a default retry class, and the numbers
// never change: they travel in binary acks.
func TestCodeTable(t *testing.T) {
	tests := []struct {
		give      Code
		wantNum   uint16
		wantName  string
		wantRetry RetryClass
	}{
		{CodeUnauthenticated, 1, "unauthenticated", RetryFatal},
		{CodeForbidden, 2, "forbidden", RetryFatal},
		{CodeNotFound, 3, "not_found", RetryAfter},
		{CodeInvalidRequest, 4, "invalid_request", RetryFatal},
		{CodeShardUnavailable, 5, "shard_unavailable", Retry},
		{CodeNotLeader, 6, "not_leader", RetryRedirect},
		{CodeQuorumTimeout, 7, "quorum_timeout", RetryOutcomeUnknown},
		{CodeLeadershipLost, 8, "leadership_lost", RetryOutcomeUnknown},
		{CodeUnacknowledged, 9, "unacknowledged", RetryOutcomeUnknown},
		{CodeOverloaded, 10, "overloaded", RetryAfter},
		{CodeLimitExceeded, 11, "limit_exceeded", RetryFatal},
		{CodeDraining, 12, "draining", Retry},
		{CodeInternal, 13, "internal", RetryOutcomeUnknown},
		{CodeStorage, 14, "storage", RetryOutcomeUnknown},
		{CodeStaleClaim, 15, "stale_claim", Retry},
	}
	if len(tests) != len(codeNames) || len(tests) != len(defaultRetry) {
		t.Fatalf("test table has %d codes, codeNames %d, defaultRetry %d", len(tests), len(codeNames), len(defaultRetry))
	}
	for _, tt := range tests {
		t.Run(tt.wantName, func(t *testing.T) {
			if uint16(tt.give) != tt.wantNum {
				t.Errorf("code number = %d, want %d", tt.give, tt.wantNum)
			}
			if got := tt.give.String(); got != tt.wantName {
				t.Errorf("String() = %q, want %q", got, tt.wantName)
			}
			if got := NewError(tt.give, "").Retry; got != tt.wantRetry {
				t.Errorf("default retry = %d, want %d", got, tt.wantRetry)
			}
		})
	}
	if got := Code(0).String(); got != "code(0)" {
		t.Errorf("Code(0).String() = %q", got)
	}
	if got := Code(0xffff).String(); got != "code(65535)" {
		t.Errorf("Code(0xffff).String() = %q", got)
	}
}
