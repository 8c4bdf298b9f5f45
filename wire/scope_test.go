package wire

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		wantErr bool
	}{
		{name: "letters", give: "orders"},
		{name: "mixed", give: "Orders_v2.created-EU"},
		{name: "digits", give: "0123456789"},
		{name: "one byte", give: "a"},
		{name: "leading dot", give: ".hidden"},
		{name: "three dots", give: "..."},
		{name: "dash", give: "-"},
		{name: "underscore", give: "_"},
		{name: "max length", give: strings.Repeat("x", MaxNameLen)},

		{name: "empty", give: "", wantErr: true},
		{name: "too long", give: strings.Repeat("x", MaxNameLen+1), wantErr: true},
		{name: "slash", give: "a/b", wantErr: true},
		{name: "backslash", give: `a\b`, wantErr: true},
		{name: "space", give: "a b", wantErr: true},
		{name: "tab", give: "a\tb", wantErr: true},
		{name: "newline", give: "a\n", wantErr: true},
		{name: "nul", give: "a\x00", wantErr: true},
		{name: "colon", give: "a:b", wantErr: true},
		{name: "star", give: "*", wantErr: true},
		{name: "unicode", give: "café", wantErr: true},
		{name: "unicode lookalike", give: "оrders", wantErr: true}, // Cyrillic о
		{name: "invalid utf-8", give: "a\xffb", wantErr: true},
		{name: "dot", give: ".", wantErr: true},
		{name: "dot dot", give: "..", wantErr: true},
		// Issue 11: the trash folder a deleted durable stream's data is
		// renamed to before removal (<stream>.deleted-<n>).
		{name: "trash name", give: "x.deleted-1", wantErr: true},
		{name: "trash name, long number", give: "orders.deleted-1764582000123456789", wantErr: true},
		{name: "deleted, no number", give: "x.deleted-"},
		{name: "deleted, not last", give: "x.deleted-1.v2"},
		{name: "deleted word", give: "deleted-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateName("stream", tt.give)
			if !tt.wantErr {
				if err != nil {
					t.Fatalf("ValidateName(%q) = %v, want nil", tt.give, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("ValidateName(%q) = %v, want ErrInvalidRequest", tt.give, err)
			}
			var we *Error
			if !errors.As(err, &we) || we.Retry != RetryFatal || !strings.Contains(we.Message, "stream") {
				t.Fatalf("ValidateName(%q) = %#v, want a fatal invalid_request naming the stream", tt.give, err)
			}
		})
	}
}

func TestScopeValidate(t *testing.T) {
	ok := "x"
	tests := []struct {
		name     string
		give     Scope
		wantWhat string // the name the error must mention; "" for valid
	}{
		{name: "valid", give: Scope{"acme", "orders", "created"}},
		{name: "empty scope", give: Scope{}, wantWhat: "tenant"},
		{name: "bad tenant", give: Scope{"a/b", ok, ok}, wantWhat: "tenant"},
		{name: "bad namespace", give: Scope{ok, "", ok}, wantWhat: "namespace"},
		{name: "bad stream", give: Scope{ok, ok, ".."}, wantWhat: "stream"},
		{name: "long stream", give: Scope{ok, ok, strings.Repeat("s", MaxNameLen+1)}, wantWhat: "stream"},
		{name: "space in namespace", give: Scope{ok, "a b", ok}, wantWhat: "namespace"},
		{name: "unicode tenant", give: Scope{"ünï", ok, ok}, wantWhat: "tenant"},
		{name: "dot stream", give: Scope{ok, ok, "."}, wantWhat: "stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantWhat == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Validate() = %v, want ErrInvalidRequest", err)
			}
			if !strings.Contains(err.Error(), tt.wantWhat) {
				t.Fatalf("Validate() = %v, want it to name the %s", err, tt.wantWhat)
			}
		})
	}
}

func TestScopeString(t *testing.T) {
	if got := (Scope{"t", "n", "s"}).String(); got != "t/n/s" {
		t.Fatalf("String() = %q", got)
	}
}
