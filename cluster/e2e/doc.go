// Package e2e holds the cluster's end-to-end tests: real broker processes
// on loopback, an etcd embedded in the test process, and the Go
// ClusterClient (internal/clustertest runs them). It has no code of its own.
package e2e
