// Package latprobe holds the hop-by-hop latency breakdown of one delivery:
// a test built only with -tags felixprobe, which runs a broker
// and its clients in one process so that internal/probe's marks share one
// clock, publishes one 128 B message at a time at 1000 msg/s to one
// subscriber, and prints each hop's share of the publish-to-delivery time
// (TestBreakdown). TestQUICCrossing times the same kind of message crossing
// a bare quic-go stream each way, the reference for the two hops that are
// QUIC crossings.
//
//	go test -tags felixprobe -run 'Breakdown|QUICCrossing' -v -count 1 ./bench/latprobe/
package latprobe
