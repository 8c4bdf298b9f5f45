#!/usr/bin/env bash
# The profiles behind bench/compare.sh's core rows: the same broker
# settings and the same two client processes (felix bench --role sub and
# --role pub), with a CPU profile of each of the three processes over the
# run, and nats-server's profile under nats bench sub and pub beside them.
# Each row's profiles and their top functions go into OUT (default
# bench/results/profiles, git-ignored).
#
#   bench/profile/run.sh [ROWS...]
#
# A row is SIZE:FANOUT:ACK, e.g. 128:10:batch (default: 128:1:batch
# 128:10:batch 1024:1:batch 1024:10:batch). It needs the tools
# bench/compare.sh installs (run that once first). COUNT_128 (3000000) and
# COUNT_1K (600000) size each run so it lasts several seconds; the
# brokers' profiles cover PROFILE_S seconds (4) from a second after the
# publisher starts.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TOOLS=$ROOT/bench/tools/bin
OUT=${OUT:-$ROOT/bench/results/profiles}
COUNT_128=${COUNT_128:-3000000}
COUNT_1K=${COUNT_1K:-600000}
PROFILE_S=${PROFILE_S:-4}
rows=("$@")
((${#rows[@]})) || rows=(128:1:batch 128:10:batch 1024:1:batch 1024:10:batch)
[[ -x $TOOLS/nats-server && -x $TOOLS/nats ]] || { echo "profile: no NATS tools in $TOOLS; run bench/compare.sh --quick once to install them" >&2; exit 1; }
mkdir -p "$OUT"
WORK=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
log() { echo "profile: $*" >&2; }
# wait_for WHAT SECONDS CMD...: polls CMD every 100 ms, saying what it waits for.
wait_for() {
	local what=$1 deadline=$((SECONDS + $2))
	shift 2
	log "waiting for $what"
	until "$@"; do
		((SECONDS < deadline)) || { log "gave up waiting for $what"; exit 1; }
		sleep 0.1
	done
}
top_of() { go tool pprof -top -nodecount=30 "$1" 2>/dev/null >"${1%.pprof}.top.txt" || true; }

go build -o "$WORK/felix" ./cmd/felix
FELIX=$WORK/felix
dir=$WORK/broker
"$FELIX" broker --listen 127.0.0.1:0 --addr-file "$dir.addr" --admin 127.0.0.1:0 --data-dir "$dir" --log-format json \
	--pprof --subscriber-queue-policy block --subscriber-lane-queue-policy block >"$WORK/broker.log" 2>&1 &
PIDS+=($!)
wait_for "the felix broker's address" 20 test -s "$dir.addr"
ADDR=$(tr -d '\n' <"$dir.addr")
ADMIN=$(grep -o '"admin":"[^"]*"' "$WORK/broker.log" | head -1 | cut -d'"' -f4)
TOKEN=$(tr -d '\n' <"$dir/admin.token")

prof_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$TOOLS/nats-server" -a 127.0.0.1 -p -1 --profile "$prof_port" >"$WORK/nats.log" 2>&1 &
PIDS+=($!)
wait_for "nats-server to listen" 20 grep -q 'Listening for client connections on' "$WORK/nats.log"
NATS_URL=nats://127.0.0.1:$(grep -o 'client connections on [0-9.]*:[0-9]*' "$WORK/nats.log" | head -1 | sed 's/.*://')
NATS_PROF=127.0.0.1:$prof_port
wait_for "nats-server's profiling endpoint" 20 curl -sf -o /dev/null "http://$NATS_PROF/debug/pprof/"
export NATS_URL

for row in "${rows[@]}"; do
	IFS=: read -r size fanout ack <<<"$row"
	n=$COUNT_128
	((size <= 128)) || n=$COUNT_1K
	name="felix-${size}B-fanout${fanout}-${ack}"
	log "$name: $n messages"
	stream="prof-$RANDOM$RANDOM"
	args=(--broker "$ADDR" --ca "$dir/cert.pem" --token "$TOKEN" --json --quiet --stream "$stream" --payload "$size" --count "$n" --warmup 6400)
	"$FELIX" bench "${args[@]}" --role sub --fanout "$fanout" --cpu-profile "$OUT/$name-sub.pprof" >"$OUT/$name-sub.json" 2>"$WORK/sub.err" &
	sub=$!
	wait_for "felix bench --role sub to subscribe" 30 grep -q '^subscribed$' "$WORK/sub.err"
	(sleep 1 && curl -sf -H "Authorization: Bearer $TOKEN" -o "$OUT/$name-broker.pprof" \
		"http://$ADMIN/debug/pprof/profile?seconds=$PROFILE_S") &
	prof=$!
	"$FELIX" bench "${args[@]}" --role pub --ack "$ack" --cpu-profile "$OUT/$name-pub.pprof" >"$OUT/$name-pub.json"
	wait "$sub" "$prof"
	for p in broker pub sub; do top_of "$OUT/$name-$p.pprof"; done
	log "$name: $(grep -o '"deliveries_per_s":[0-9.]*' "$OUT/$name-sub.json")"

	name="nats-${size}B-fanout${fanout}"
	subj="prof.$RANDOM"
	"$TOOLS/nats" bench sub "$subj" --clients "$fanout" --msgs "$n" --size "$size" --no-progress >"$OUT/$name-sub.txt" 2>&1 &
	sub=$!
	sleep 1.5 # nats bench sub prints nothing once subscribed; compare.sh waits the same
	(sleep 1 && curl -sf -o "$OUT/$name-server.pprof" "http://$NATS_PROF/debug/pprof/profile?seconds=$PROFILE_S") &
	prof=$!
	"$TOOLS/nats" bench pub "$subj" --clients 1 --msgs "$n" --size "$size" --no-progress >"$OUT/$name-pub.txt" 2>&1
	wait "$sub" "$prof"
	top_of "$OUT/$name-server.pprof"
	log "$name: $(grep -Eo 'subscriber (aggregated )?stats: [0-9,]+ msgs/sec' "$OUT/$name-sub.txt" | head -1)"
done
log "profiles and their top functions in $OUT"
