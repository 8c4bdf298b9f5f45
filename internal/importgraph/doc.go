// Package importgraph has no code: its test holds the one table of which
// packages of this module each package may import, and checks the module
// against it (see importgraph_test.go).
package importgraph
