//go:build !unix

package durable

// openFileLimit reports no limit where the platform has no RLIMIT_NOFILE.
func openFileLimit() (int, bool) { return 0, false }
