#!/usr/bin/env bash
# Placement and leadership balance, one command:
#   - placement speed: 1,000 replicated shards' sets written one etcd
#     transaction per shard (batch=1, as before) against batched, on three
#     in-process members (BenchmarkPlaceReplicaSets, old and new in turn,
#     three rounds);
#   - leadership balance: SHARDS (default 1,000) replicated shards on three
#     member processes over a real etcd, the busiest member's leads over an
#     even share after start, after a member's kill, its return and its
#     drain (BenchmarkLeaderBalance).
#
#   bench/placement/run.sh [SHARDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
shards=${1:-1000}
# Three rounds, each old then new, so the machine's load falls on both.
for _ in 1 2 3; do
	go test -run '^$' -bench BenchmarkPlaceReplicaSets -benchtime 1x ./cluster/ | grep '^Benchmark'
done
FELIXBENCH_SHARDS=$shards go test -run '^$' -bench BenchmarkLeaderBalance -benchtime 1x -timeout 60m -v ./cluster/e2e/
