//go:build !linux

package config

// PhysicalMemory is the machine's RAM in bytes, or 0 when unknown.
func PhysicalMemory() int64 { return 0 }
