// Package e2e holds the cluster's end-to-end tests: real broker processes
// on loopback, an etcd process (which a test may freeze), and the Go
// ClusterClient (clustertest runs them). It has no code of its own.
package e2e
