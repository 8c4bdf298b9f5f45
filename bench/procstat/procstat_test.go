package procstat

import (
	"os"
	"testing"
)

func TestStatTicks(t *testing.T) {
	tests := []struct {
		name string
		give string
		want int64
		bad  bool
	}{
		{"plain", "42 (felix) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0", 325, false},
		{"a name with spaces and parentheses", "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0", 10, false},
		{"no name", "42 felix S 1", 0, true},
		{"cut short", "42 (felix) S 1 42 42 0 -1 4194560 100", 0, true},
		{"not numbers", "42 (felix) S 1 42 42 0 -1 4194560 100 0 0 0 x y 0 0", 0, true},
	}
	for _, tt := range tests {
		got, err := statTicks(tt.give)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("%s: got %d, %v; want %d, error %v", tt.name, got, err, tt.want, tt.bad)
		}
	}
}

// TestTakeReadsItself: this process as the server is read, and its CPU
// time never goes back.
func TestTakeReadsItself(t *testing.T) {
	a := Take(os.Getpid(), 100)
	b := Take(os.Getpid(), 100)
	if !a.ServerOK || !b.ServerOK {
		t.Fatalf("own /proc stat not read: %+v, %+v", a, b)
	}
	if b.Self < a.Self || b.Server < a.Server {
		t.Fatalf("CPU time went back: %+v then %+v", a, b)
	}
	if s := Take(0, 100); s.ServerOK {
		t.Fatalf("pid 0 sampled a server: %+v", s)
	}
}
