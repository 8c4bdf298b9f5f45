#!/usr/bin/env bash
# Idle CPU per member of a 3-member cluster holding SHARDS replicated
# shards (3 replicas each) and no client traffic: felix dev cluster on
# loopback, SHARDS durable shards (one stream up to 1,000, else streams of
# at most 1,000: a stream holds at most 1,024), a settle until every shard
# is led (and quiet, where the binary has quiet groups), then each
# member's user+system CPU over WINDOW seconds from /proc, as % of one
# core, and etcd's load over the same window: its keys, and the watch
# events it sent and the writes it took, per second (etcd's own /metrics).
#
#   bench/idle/run.sh [SHARDS] [WINDOW] [FELIX_BINARY]
#
# FELIX_BINARY defaults to one built from this tree (go build); the
# members listen from BASE_PORT (default 17001) up. PROFILE=FILE also
# writes node-1's CPU profile over the window to FILE (go tool pprof),
# and prints node-1's goroutine count.
set -euo pipefail
shards=${1:-100}
window=${2:-30}
bin=${3:-}
base=${BASE_PORT:-17001}
dir=$(mktemp -d /tmp/felix-idle.XXXX)
if [ -z "$bin" ]; then
	bin=$dir/felix
	go build -o "$bin" ./cmd/felix
fi
"$bin" dev cluster --nodes 3 --dir "$dir/c" --base-port "$base" --admin-base-port $((base + 100)) ${PROFILE:+-- --pprof} > "$dir/dev.log" 2>&1 &
dev=$!
trap 'kill $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$dir"' EXIT
B=127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))
for _ in $(seq 120); do
	[ -f "$dir/c/admin.token" ] && "$bin" stream ls --broker $B --ca "$dir/c/cert.pem" --token "$(cat "$dir/c/admin.token")" >/dev/null 2>&1 && break
	sleep 1
done
tok=$(cat "$dir/c/admin.token")
# The first member answers before the others joined: retry until 3 are live.
# A stream has at most 1,024 shards: more are spread over streams of at
# most 1,000 (3,000 shards: three streams of 1,000).
streams=$(((shards + 999) / 1000))
for s in $(seq "$streams"); do
	n=$((shards / streams + (s <= shards % streams ? 1 : 0)))
	created=0
	for _ in $(seq 60); do
		if err=$("$bin" stream create --broker $B --ca "$dir/c/cert.pem" --token "$tok" --stream "idle-$s" --durable --replicas 3 --shards "$n" 2>&1 >/dev/null); then
			created=1
			break
		fi
		sleep 1
	done
	[ $created = 1 ] || { echo "stream idle-$s of $n shards not created: $err" >&2; exit 1; }
done
# Settle: the members lead all SHARDS shards between them
# (felix_replication_shards_led) and, where the binary has quiet groups,
# every member reports all its replicas quiet
# (felix_replication_quiet_replicas); at most SETTLE seconds (default 600).
metric() {
	curl -sf -H "Authorization: Bearer $tok" "http://127.0.0.1:$1/metrics" |
		awk -v m="$2" '$1 == m { print $2 + 0 }'
}
deadline=$((SECONDS + ${SETTLE:-600}))
while :; do
	led=0 quiet=""
	for i in 0 1 2; do
		led=$((led + $(metric $((base + 100 + i)) felix_replication_shards_led || echo 0)))
		quiet="$quiet $(metric $((base + 100 + i)) felix_replication_quiet_replicas || true)"
	done
	settled=0
	if [ "$led" = "$shards" ]; then
		settled=1
		for q in $quiet; do [ "$q" = "$shards" ] || settled=0; done
	fi
	[ $settled = 1 ] && break
	if [ $SECONDS -ge $deadline ]; then
		echo "not settled after ${SETTLE:-600}s: $led shards led, quiet replicas:$quiet" >&2
		break
	fi
	sleep 1
done
echo "settled after ${SECONDS}s: $led shards led, quiet replicas per member:$quiet"
sleep 5
# etcd's endpoint and a member's certificate, from felix dev cluster's
# banner; its metrics are on the client port.
etcd_line=$(grep -m1 'etcd serving on' "$dir/dev.log" || true)
etcd_metric() {
	[ -n "$etcd_line" ] || return 0
	set -- $(sed -E 's/.*--endpoints ([^ ]+) --cacert ([^ ]+) --cert ([^ ]+) --key ([^;]+);.*/\1 \2 \3 \4/' <<<"$etcd_line") "$1"
	curl -sf --cacert "$2" --cert "$3" --key "$4" "$1/metrics" | awk -v m="$5" '$1 == m { s += $2 } END { print s + 0 }'
}
ev0=$(etcd_metric etcd_debugging_mvcc_events_total)
put0=$(( $(etcd_metric etcd_mvcc_put_total) + $(etcd_metric etcd_mvcc_txn_total) ))
pids=$(pgrep -f -- "--data-dir $dir/c/node-" || true)
ticks=$(getconf CLK_TCK)
declare -A before
for p in $pids; do before[$p]=$(awk '{print $14+$15}' /proc/$p/stat); done
if [ -n "${PROFILE:-}" ]; then
	echo "node-1: $(curl -sf -H "Authorization: Bearer $tok" "http://127.0.0.1:$((base + 100))/debug/pprof/goroutine?debug=1" | head -1)"
	curl -sf -H "Authorization: Bearer $tok" -o "$PROFILE" \
		"http://127.0.0.1:$((base + 100))/debug/pprof/profile?seconds=$window"
else
	sleep "$window"
fi
ev1=$(etcd_metric etcd_debugging_mvcc_events_total)
put1=$(( $(etcd_metric etcd_mvcc_put_total) + $(etcd_metric etcd_mvcc_txn_total) ))
awk -v k="$(etcd_metric etcd_debugging_mvcc_keys_total)" -v e=$((ev1 - ev0)) -v p=$((put1 - put0)) -v w="$window" \
	'BEGIN { printf "etcd: %d keys, %.1f watch events/s, %.1f puts+txns/s\n", k, e / w, p / w }'
for p in $pids; do
	after=$(awk '{print $14+$15}' /proc/$p/stat)
	node=$(tr '\0' ' ' < /proc/$p/cmdline | grep -o 'node-[0-9]*' | head -1)
	awk -v a="$after" -v b="${before[$p]}" -v t="$ticks" -v w="$window" -v n="$node" -v s="$shards" \
		'BEGIN { printf "%s: %d shards, %.1f %% of a core", n, s, 100 * (a - b) / t / w }'
	echo ", $(ls /proc/$p/fd | wc -l) fds, $(awk '/VmRSS/ { print $2 " kB" }' /proc/$p/status) RSS, $(awk '/Threads/ { print $2 }' /proc/$p/status) threads"
done
