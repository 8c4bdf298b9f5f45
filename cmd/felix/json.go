package main

import (
	"encoding/json"
	"io"
)

// The JSON style of every --json: snake_case keys; a command that prints a
// list once (stream ls, group ls) prints one JSON array; a command that
// prints a document (stream info, group describe, cluster ls) prints one
// object; a command that prints as things happen (sub, consume, read, pub
// --json-acks, chaos run) prints one object per line, each a complete
// JSON value, so a script can act on each as it comes.

// printJSON writes v as one line of JSON, with <, > and & as themselves
// (payloads and commands are not HTML).
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// nonNil makes an empty list print as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
