package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/getfelix/felix-go/client"
)

// TestRecordJSON: read --json prints a record's offset, time, payload,
// and its key and headers when it has them; bytes that are not UTF-8
// print as base64 under the name with _base64; a null header value is
// null.
func TestRecordJSON(t *testing.T) {
	at := time.Date(2020, 5, 1, 0, 0, 0, 123e6, time.UTC)
	tests := []struct {
		name string
		give client.Record
		want string
	}{
		{"payload only", client.Record{Offset: 3, Time: at, Payload: []byte("hi")},
			`{"offset":3,"payload":"hi","time":"2020-05-01T00:00:00.123Z"}`},
		{"key and headers", client.Record{Offset: 4, Time: at, Payload: []byte("v"), Key: []byte("k"),
			Headers: []client.Header{{Key: "h", Value: []byte("1")}, {Key: "bin", Value: []byte{0xff}}, {Key: "null"}}},
			`{"headers":[{"key":"h","value":"1"},{"key":"bin","value_base64":"/w=="},{"key":"null","value":null}],"key":"k","offset":4,"payload":"v","time":"2020-05-01T00:00:00.123Z"}`},
		{"binary key and payload", client.Record{Offset: 5, Time: at, Payload: []byte{0xfe}, Key: []byte{0xff}},
			`{"key_base64":"/w==","offset":5,"payload_base64":"/g==","time":"2020-05-01T00:00:00.123Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(recordJSON(tt.give))
			if err != nil || string(got) != tt.want {
				t.Fatalf("recordJSON(%+v) = %s, %v\nwant %s", tt.give, got, err, tt.want)
			}
		})
	}
}
