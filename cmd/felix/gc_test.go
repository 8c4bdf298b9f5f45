package main

import "testing"

func TestGCSettings(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	p, setP, l, setL := gcSettings(env(nil), 8<<30)
	if !setP || p != 400 || !setL || l != 8<<30/100*75 {
		t.Errorf("defaults = %d %t %d %t, want 400 and 75%% of 8 GiB", p, setP, l, setL)
	}
	if _, setP, _, setL := gcSettings(env(map[string]string{"GOGC": "100", "GOMEMLIMIT": "1GiB"}), 8<<30); setP || setL {
		t.Error("the operator's GOGC and GOMEMLIMIT were overridden")
	}
	if _, _, _, setL := gcSettings(env(nil), 0); setL {
		t.Error("a memory limit was set with the machine's memory unknown")
	}
}
