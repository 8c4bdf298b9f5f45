#!/usr/bin/env bash
# Felix vs NATS, side by side on this machine, as medians of N runs and a
# Felix/NATS ratio. Method and latest results: docs/BENCHMARKS.md, section
# "Felix vs NATS (side by side)".
#
#   bench/compare.sh [-n RUNS] [--quick]
#
#   -n RUNS   runs of every scenario on each system (default 3)
#   --quick   a tenth of the messages, 3 s latency runs, 1 run: checks the
#             script, not the brokers
#   --only-replicated  the replicated scenario alone, written to
#             bench/results/replicated.* instead of latest.*
#
# It installs pinned NATS tools into bench/tools/bin (git-ignored; skipped
# when already there), builds felix, starts two nats-servers (JetStream
# with its default sync, and with sync_interval: always) and three felix
# brokers as separate processes on 127.0.0.1 (free ports), and runs, Felix
# and NATS alternating (which goes first flips every run):
#   core fanout    128 B and 1 KiB, fanout 1 and 10, acked and unacked:
#                  felix bench --role sub (FANOUT subscribers on their own
#                  connections) + felix bench --role pub (one connection,
#                  batches of 64, 4 in flight; acked per batch, or --ack none
#                  with losses counted) vs nats bench sub + nats bench pub,
#                  two processes on each side; the broker's CPU and the two
#                  client processes' CPU per million deliveries; and the raw
#                  quic-go ceiling (bench/quicraw: the same records, batched as
#                  Felix batches events, written by one process to FANOUT
#                  connections of another, with Felix's QUIC settings)
#   latency        128 B at 1000 msg/s for LAT_DUR, fanout 1 and 10: felix
#                  bench (latency profile) vs bench/natslat (same method)
#   durable        acked 128 B publishing to a durable stream, no subscriber:
#                  felix bench --durable (batches of 64) vs nats bench js pub
#                  async (file storage), twice: Felix periodic vs JetStream's
#                  default sync, Felix on_commit vs sync_interval: always
#   slow consumer  a SIGSTOPped subscriber next to a healthy one: the healthy
#                  one's rate as a share of its rate with no frozen peer
#   group          poll + ack of 128 B records, one group, 4 consumers on
#                  their own connections, GROUP_N records published first:
#                  bench/groupbench (a Felix consumer group, batches of 100)
#                  vs bench/natslat/jspull (a JetStream pull consumer, file
#                  storage, explicit acks, fetches of 100)
#   replicated     acked 128 B publishing to a stream with 3 replicas: a
#                  3-member felix cluster (felix dev cluster) vs three
#                  clustered nats-servers (JetStream R3, file storage); felix
#                  bench --durable --replicas 3 --inflight 8 (at the shard's
#                  leader) vs nats bench js pub async --replicas 3, twice:
#                  Felix on_commit (a quorum fsynced) vs sync_interval:
#                  always, Felix periodic vs JetStream's default sync
#   cache          puts and gets of 128 B values, 1 and 16 clients (each its
#                  own connection, one operation in flight): bench/cachebench
#                  against a Felix cache (1 shard, durable, the LOSSLESS
#                  broker), a JetStream KV bucket (file storage, history 1,
#                  on the nats-server above) and Redis (Debian's
#                  redis-server, started here, no persistence): ops/s,
#                  p50/p99 round trip, CPU per operation of the server and
#                  of the client process; its own table, with Felix / NATS
#                  KV and Felix / Redis. Redis's rows are n/a without
#                  redis-server. And the watch fanout row: one prefix
#                  watched by CACHE_WATCHERS (1000) watchers over 10
#                  connections, 4 writers (one put in flight each, at most
#                  16 puts past the newest one every watcher has) of 128 B
#                  values: Felix's prefix watches vs NATS KV watchers
#                  (updates only) on the same servers; deliveries/s, p50/p99
#                  put to delivery, CPU per million deliveries (Redis: n/a).
#   websocket      WS_SUBS (1000) WebSocket subscribers, each its own
#                  connection, on one stream and one publisher of 128 B
#                  records: bench/wsbench against a felix broker's
#                  browser_listen (block queues, its admin token; the
#                  publisher over felix/1, acked, one record a publish,
#                  pipelined) and a nats-server's websocket listener
#                  (nats.go over ws://; the publisher over NATS's TCP,
#                  unacked), both started on first use; twice: unpaced
#                  (the publisher at most 64 records ahead of every
#                  subscriber's deliveries, the same on both: deliveries/s)
#                  and paced at WS_RATE records/s (p50/p99 publish to
#                  delivery below saturation); missing deliveries and CPU
#                  per million deliveries of the server and of the bench
#                  process over the timed window. About a minute a run;
#                  not in the default SCENARIOS.
# CPU is read from /proc: a broker's utime+stime (/proc/PID/stat) before and
# after the row; a client's as its wrapping shell's cutime+cstime once the
# client was reaped (its whole life, connecting included, on both systems).
# It writes bench/results/latest.md (the table), latest.tsv (medians),
# latest-raw.tsv (every run) and latest.svg (the chart, from bench/chart).
#
# Sizes can be changed through the environment: CORE_N_128 (1000000),
# CORE_N_1K (200000), CORE_WARMUP (6400, Felix's warmup messages), LAT_DUR (10s), SLOW_N (1000000), REPL_N (200000),
# STEP_TIMEOUT (180, seconds, the bound on any one command), GROUP_N (100000),
# CACHE_DUR (10s, each cache row's timed window), CACHE_WATCHERS (1000, the watch row's watchers), WS_SUBS (1000), WS_DUR (10s,
# each websocket row's publishing window), WS_RATE (20, the paced row's records/s).
# GOMAXPROCS, when set, reaches every broker and client of both systems (all
# are Go programs) and is named in the report's command.
# SCENARIOS (default "core latency slow durable group replicated cache"; websocket
# is also known) runs only those (SCENARIOS=cache alone writes bench/results/cache.*
# instead of latest.*, SCENARIOS=websocket alone bench/results/websocket.*). IDLE_MIN (0: off) gates each
# Felix/NATS pair on the machine being at least that % idle (vmstat, 1 s),
# waiting up to GATE_WAIT seconds (60) and then running anyway; the idle
# seen before each pair goes into the report.
set -euo pipefail

RUNS=3
QUICK=0
REPL_ONLY=0
while [[ $# -gt 0 ]]; do
	case $1 in
	-n) RUNS=${2:?-n needs a number}; shift 2 ;;
	--quick) QUICK=1; shift ;;
	--only-replicated) REPL_ONLY=1; shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "compare.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
	esac
done
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: -n wants a positive number, got $RUNS" >&2; exit 2; }

CORE_N_128=${CORE_N_128:-1000000}
CORE_N_1K=${CORE_N_1K:-200000}
LAT_DUR=${LAT_DUR:-10s}
SLOW_N=${SLOW_N:-1000000}
DUR_N=${DUR_N:-500000}
DUR_SYNC_N=${DUR_SYNC_N:-50000}
GROUP_N=${GROUP_N:-100000}
REPL_N=${REPL_N:-200000}
CACHE_DUR=${CACHE_DUR:-10s}
CACHE_WATCHERS=${CACHE_WATCHERS:-1000}
WS_SUBS=${WS_SUBS:-1000}
WS_DUR=${WS_DUR:-10s}
WS_RATE=${WS_RATE:-20}
ALL_SCENARIOS="core latency slow durable group replicated cache"
SCENARIOS=${SCENARIOS:-$ALL_SCENARIOS}
((REPL_ONLY)) && SCENARIOS=replicated
STEP_TIMEOUT=${STEP_TIMEOUT:-180}
CORE_WARMUP=${CORE_WARMUP:-6400}
IDLE_MIN=${IDLE_MIN:-0}
GATE_WAIT=${GATE_WAIT:-60}
if ((QUICK)); then
	CORE_N_128=$((CORE_N_128 / 10)) CORE_N_1K=$((CORE_N_1K / 10)) SLOW_N=$((SLOW_N / 10))
	DUR_N=$((DUR_N / 10)) DUR_SYNC_N=$((DUR_SYNC_N / 10)) GROUP_N=$((GROUP_N / 10)) REPL_N=$((REPL_N / 10))
	LAT_DUR=3s CACHE_DUR=2s WS_DUR=3s RUNS=1
fi

NATS_SERVER_MOD=github.com/nats-io/nats-server/v2@v2.15.2
NATSCLI_MOD=github.com/nats-io/natscli/nats@v0.5.0

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
TOOLS=$BENCH/tools/bin
RESULTS=$BENCH/results
OUT=latest # the results' file names
((REPL_ONLY)) && OUT=replicated
[[ $SCENARIOS == cache ]] && OUT=cache # the cache rows alone keep latest.* as it is
[[ $SCENARIOS == websocket ]] && OUT=websocket # and so do the websocket rows alone
mkdir -p "$TOOLS" "$RESULTS"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/felix-compare.XXXXXX")
PIDS=()   # every background process this script started
FROZEN=() # the SIGSTOPped ones, continued before they are killed

log() { printf '%s compare: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

cleanup() {
	local p
	for p in "${FROZEN[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	sleep 0.3
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# bounded runs a command under STEP_TIMEOUT (then SIGKILL 5 s later).
bounded() { timeout -k 5 "$STEP_TIMEOUT" "$@"; }

# start_bg LOG CMD...: runs CMD in the background, its output in LOG; the
# pid is in $BG.
start_bg() {
	local out=$1
	shift
	"$@" >"$out" 2>&1 &
	BG=$!
	PIDS+=("$BG")
}

# stop_pid PID: continue, terminate and reap one process of ours.
stop_pid() {
	kill -CONT "$1" 2>/dev/null || true
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

# wait_until DESC SECONDS CMD...: polls CMD every 0.1 s until it succeeds.
# CMD's complaints are not shown: a log a background job has not opened
# yet is what the first polls find.
wait_until() {
	local desc=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 10; i++)); do
		if "$@" 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	log "gave up after ${secs}s waiting for $desc"
	return 1
}

# ---- tools ---------------------------------------------------------------

install_tool() { # BIN MODULE@VERSION
	local bin=$1 mod=$2
	if [[ -x $TOOLS/$bin ]] && "$TOOLS/$bin" --version 2>&1 | grep -qF "${mod##*@}"; then
		return
	fi
	log "installing $mod into bench/tools/bin (nats-server takes about 3 minutes to build)"
	GOBIN=$TOOLS go install "$mod"
}
install_tool nats-server "$NATS_SERVER_MOD"
install_tool nats "$NATSCLI_MOD"
log "building felix, bench/natslat, bench/cachebench, bench/wsbench and bench/chart"
(cd "$ROOT" && go build -o "$TOOLS/felix" ./cmd/felix && go build -o "$TOOLS/chart" ./bench/chart && go build -o "$TOOLS/quicraw" ./bench/quicraw &&
	go build -o "$TOOLS/groupbench" ./bench/groupbench)
(cd "$BENCH/natslat" && go build -o "$TOOLS/natslat" . && go build -o "$TOOLS/jspull" ./jspull)
(cd "$BENCH/cachebench" && go build -o "$TOOLS/cachebench" .)
(cd "$BENCH/wsbench" && go build -o "$TOOLS/wsbench" .)
FELIX=$TOOLS/felix
NATS=$TOOLS/nats

# ---- machine -------------------------------------------------------------

CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//' || echo unknown)
idle() { vmstat 1 2 | tail -1 | awk '{print $15}'; }
IDLE_START=$(idle)
MACHINE="$(nproc) CPUs ($CPU), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r), $(go version | awk '{print $3}')"
log "machine: $MACHINE; idle ${IDLE_START}% before the runs"

# ---- servers -------------------------------------------------------------

# JetStream is on (file storage, its default sync_interval of 2 minutes) for
# the durable scenarios; core pub/sub does not touch it.
start_bg "$WORK/nats.log" "$TOOLS/nats-server" -a 127.0.0.1 -p -1 -js -sd "$WORK/js"
NATS_PID=$BG
wait_until "nats-server to listen" 20 grep -q 'Listening for client connections on' "$WORK/nats.log"
NATS_PORT=$(grep -o 'client connections on [0-9.]*:[0-9]*' "$WORK/nats.log" | head -1 | sed 's/.*://')
export NATS_URL=nats://127.0.0.1:$NATS_PORT
# A second nats-server whose JetStream fsyncs every write (sync_interval:
# always), the match for Felix's on_commit.
printf 'host: 127.0.0.1\nport: -1\njetstream { store_dir: "%s", sync_interval: always }\n' "$WORK/js-sync" >"$WORK/nats-sync.conf"
start_bg "$WORK/nats-sync.log" "$TOOLS/nats-server" -c "$WORK/nats-sync.conf"
wait_until "nats-server (sync always) to listen" 20 grep -q 'Listening for client connections on' "$WORK/nats-sync.log"
NATS_SYNC_URL=nats://127.0.0.1:$(grep -o 'client connections on [0-9.]*:[0-9]*' "$WORK/nats-sync.log" | head -1 | sed 's/.*://')

# start_felix NAME ARGS...: a felix broker on free ports; sets ${NAME}_PID, ${NAME}_ADDR,
# ${NAME}_ADMIN, ${NAME}_CA and ${NAME}_TOKEN (its admin.token: the broker
# needs a token from every client).
start_felix() {
	local name=$1
	shift
	local dir=$WORK/$name
	start_bg "$WORK/$name.log" "$FELIX" broker --listen 127.0.0.1:0 --addr-file "$dir.addr" --admin 127.0.0.1:0 \
		--data-dir "$dir" --log-format json "$@"
	printf -v "${name}_PID" '%s' "$BG"
	wait_until "felix broker $name to write its address" 20 test -s "$dir.addr"
	printf -v "${name}_ADDR" '%s' "$(tr -d '\n' <"$dir.addr")"
	printf -v "${name}_ADMIN" '%s' "$(grep -o '"admin":"[^"]*"' "$WORK/$name.log" | head -1 | cut -d'"' -f4)"
	printf -v "${name}_CA" '%s' "$dir/cert.pem"
	printf -v "${name}_TOKEN" '%s' "$(tr -d '\n' <"$dir/admin.token")"
}
# LOSSLESS: block queues end to end (no drops, so every message is
# counted). DEFAULT: the broker's defaults (drop_new),
# for the slow-consumer scenario, where block would stall the healthy peer
# by design.
start_felix LOSSLESS --subscriber-queue-policy block --subscriber-lane-queue-policy block
start_felix DEFAULT
# ONCOMMIT: every durable ack after the fsync that covers it.
start_felix ONCOMMIT --durable-fsync on_commit
log "nats-server at $NATS_URL; felix (block) at $LOSSLESS_ADDR, admin $LOSSLESS_ADMIN; felix (defaults) at $DEFAULT_ADDR"

# ---- measuring -----------------------------------------------------------

RAW=$WORK/raw.tsv
: >"$RAW"
# rec SCENARIO SYSTEM RUN METRIC VALUE (NA when the run failed)
rec() {
	local v=${5:-NA}
	[[ -n $v ]] || v=NA
	printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$v" >>"$RAW"
	log "  $2 run $3: $1: $4 = $v"
}
# jget FIELD: a number field from the one-line JSON on stdin.
jget() { grep -o "\"$1\":[-0-9.e+]*" | head -1 | cut -d: -f2; }

# felix_bench BROKER ARGS...: felix bench against a running broker, JSON on
# stdout. A run that is not clean (exit 1) still prints its JSON; its
# problem goes to the log.
felix_bench() {
	local b=$1 rc=0
	shift
	local addr=${b}_ADDR ca=${b}_CA token=${b}_TOKEN
	bounded "$FELIX" bench --broker "${!addr}" --ca "${!ca}" --token "${!token}" --json --quiet "$@" 2>"$WORK/felix-bench.err" || rc=$?
	if ((rc != 0)); then
		log "  felix bench exited $rc: $(tr '\n' ' ' <"$WORK/felix-bench.err")"
	fi
}

# ---- CPU -------------------------------------------------------------------

CLK_TCK=$(getconf CLK_TCK)
# cpu_ticks PID: a live process's utime+stime in clock ticks (/proc/PID/stat
# fields 14 and 15, counted after the ")" that ends the command's name).
cpu_ticks() {
	local s
	read -r s <"/proc/$1/stat" || { echo NA; return; }
	s=${s##*) }
	# shellcheck disable=SC2086 # split into fields on purpose
	set -- $s
	echo $((${12} + ${13}))
}
# with_cpu OUT CMD...: runs CMD under STEP_TIMEOUT (as bounded does: a
# shell function is not in the inner shell) and writes the CPU ticks it and
# its children used to OUT: the wrapping shell's cutime+cstime
# (/proc/PID/stat fields 16 and 17), read with a builtin once CMD was
# reaped, so nothing else counts.
with_cpu() {
	# shellcheck disable=SC2016 # expanded by the inner shell
	bash -c 'out=$1; shift; rc=0; timeout -k 5 "$@" || rc=$?; read -r s </proc/$$/stat; s=${s##*) }; set -- $s
		echo $((${14} + ${15})) >"$out"; exit $rc' with_cpu "$1" "$STEP_TIMEOUT" "${@:2}"
}
# per_million TICKS DELIVERIES: CPU seconds per million deliveries.
per_million() {
	awk -v t="$1" -v d="$2" -v hz="$CLK_TCK" 'BEGIN {
		if (t !~ /^[0-9]+$/ || d !~ /^[0-9]+$/ || d == 0) { print "NA"; exit }
		printf "%.3f", t / hz / d * 1e6 }'
}

# nats_core SUBJECT SIZE COUNT CLIENTS: nats bench sub (CLIENTS subscribers)
# then nats bench pub, two processes; sets CORE_RATE (the subscribers'
# aggregated msgs/s), CORE_LOST (0: nats bench sub ends only once it has
# every message), CORE_BROKER_CPU and CORE_CLIENT_CPU (CPU s per million
# deliveries of nats-server and of the two bench processes); all NA when a
# run failed.
nats_core() {
	local subj=$1 size=$2 n=$3 clients=$4 sub rc=0 b0 b1
	CORE_RATE=NA CORE_LOST=NA CORE_BROKER_CPU=NA CORE_CLIENT_CPU=NA
	rm -f "$WORK"/nsub.* "$WORK"/npub.* # no last row's figures if this one fails
	b0=$(cpu_ticks "$NATS_PID")
	with_cpu "$WORK/nsub.cpu" "$NATS" bench sub "$subj" --clients "$clients" --msgs "$n" --size "$size" --no-progress >"$WORK/nsub.out" 2>&1 &
	sub=$!
	PIDS+=("$sub")
	sleep 1.5 # let the subscribers register before the first publish
	with_cpu "$WORK/npub.cpu" "$NATS" bench pub "$subj" --clients 1 --msgs "$n" --size "$size" --no-progress >"$WORK/npub.out" 2>&1 || rc=$?
	wait "$sub" || rc=$?
	b1=$(cpu_ticks "$NATS_PID")
	if ((rc != 0)); then
		log "  nats bench failed ($rc): $(tail -3 "$WORK/nsub.out" | tr '\n' ' ')"
		return
	fi
	CORE_RATE=$(grep -Eo 'subscriber (aggregated )?stats: [0-9,]+ msgs/sec' "$WORK/nsub.out" | head -1 | grep -Eo '[0-9,]+ msgs' | tr -d ', msg')
	CORE_LOST=0
	CORE_BROKER_CPU=$(per_million $((b1 - b0)) $((n * clients)))
	CORE_CLIENT_CPU=$(per_million $(($(cat "$WORK/nsub.cpu") + $(cat "$WORK/npub.cpu"))) $((n * clients)))
}

# felix_core SIZE COUNT FANOUT ACK: felix bench --role sub (FANOUT
# subscribers, a connection each) then --role pub (one connection, the
# throughput profile's batches of 64, 4 in flight, ack ACK: batch or none)
# against the LOSSLESS broker; sets what nats_core sets, CORE_LOST being
# the deliveries the sub process expected and did not get, less those of
# the publishes refused as overloaded (answered, under acks).
felix_core() {
	local size=$1 n=$2 f=$3 ack=$4 sub rc=0 b0 b1 stream="core-$RANDOM$RANDOM"
	local addr=(--broker "$LOSSLESS_ADDR" --ca "$LOSSLESS_CA" --token "$LOSSLESS_TOKEN" --json --quiet --stream "$stream"
		--payload "$size" --count "$n" --warmup "$CORE_WARMUP")
	CORE_RATE=NA CORE_LOST=NA CORE_BROKER_CPU=NA CORE_CLIENT_CPU=NA
	# The last row's files go first: the background job truncates them only
	# once it runs, and a "subscribed" left over would start the publisher
	# before these subscribers exist (the early messages then missed).
	rm -f "$WORK"/fsub.* "$WORK"/fpub.*
	b0=$(cpu_ticks "$LOSSLESS_PID")
	with_cpu "$WORK/fsub.cpu" "$FELIX" bench "${addr[@]}" --role sub --fanout "$f" >"$WORK/fsub.json" 2>"$WORK/fsub.err" &
	sub=$!
	PIDS+=("$sub")
	wait_until "felix bench --role sub to subscribe" 30 grep -q '^subscribed$' "$WORK/fsub.err" || return 0
	with_cpu "$WORK/fpub.cpu" "$FELIX" bench "${addr[@]}" --role pub --ack "$ack" >"$WORK/fpub.json" 2>"$WORK/fpub.err" || rc=$?
	((rc == 0)) || log "  felix bench --role pub exited $rc: $(tr '\n' ' ' <"$WORK/fpub.err")"
	# The sub process exits 1 on a loss, which an unacked run may have:
	# counted, not a failure.
	wait "$sub" || log "  felix bench --role sub exited $?: $(grep -v '^subscribed$' "$WORK/fsub.err" | tr '\n' ' ')"
	b1=$(cpu_ticks "$LOSSLESS_PID")
	local delivered expected refused
	delivered=$(jget delivered <"$WORK/fsub.json")
	expected=$(jget expected <"$WORK/fsub.json")
	# Acked publishes the broker refused as overloaded were answered so,
	# and the pub process counted them: not published, so not lost.
	refused=$(jget refused <"$WORK/fpub.json")
	[[ -n $delivered && -n $expected ]] || return 0
	((${refused:-0} == 0)) || log "  felix bench --role pub: $refused messages refused as overloaded (answered, not lost)"
	CORE_RATE=$(jget deliveries_per_s <"$WORK/fsub.json")
	CORE_LOST=$((expected - delivered - ${refused:-0} * f))
	CORE_BROKER_CPU=$(per_million $((b1 - b0)) "$delivered")
	CORE_CLIENT_CPU=$(per_million $(($(cat "$WORK/fsub.cpu") + $(cat "$WORK/fpub.cpu"))) "$delivered")
}

# rec_core LABEL SYSTEM RUN: records what felix_core or nats_core set.
rec_core() {
	rec "$1" "$2" "$3" deliveries/s "$CORE_RATE"
	rec "$1" "$2" "$3" lost "$CORE_LOST"
	rec "$1" "$2" "$3" "broker CPU s/M" "$CORE_BROKER_CPU"
	rec "$1" "$2" "$3" "client CPU s/M" "$CORE_CLIENT_CPU"
}

# quic_core SIZE COUNT FANOUT: the raw quic-go ceiling (bench/quicraw): a
# server process writes COUNT records of SIZE, batched as Felix batches
# events, to each of FANOUT client connections; prints deliveries/s.
quic_core() {
	local size=$1 n=$2 f=$3 srv rc=0
	rm -f "$WORK/quicraw.addr"
	bounded "$TOOLS/quicraw" serve --addr 127.0.0.1:0 --addr-file "$WORK/quicraw.addr" --count "$n" --size "$size" \
		--conns "$f" >"$WORK/quicraw-serve.log" 2>&1 &
	srv=$!
	PIDS+=("$srv")
	wait_until "quicraw to listen" 20 test -s "$WORK/quicraw.addr"
	bounded "$TOOLS/quicraw" recv --addr "$(cat "$WORK/quicraw.addr")" --count "$n" --conns "$f" >"$WORK/quicraw.out" 2>&1 || rc=$?
	wait "$srv" || rc=$?
	if ((rc != 0)); then
		log "  quicraw failed ($rc): $(tail -3 "$WORK/quicraw.out" "$WORK/quicraw-serve.log" | tr '\n' ' ')"
		return
	fi
	jget deliveries_per_s <"$WORK/quicraw.out"
}

# core RUN SIZE COUNT FANOUT SYSTEM: the acked and unacked rows. NATS core
# has no acks: its one run stands in both rows, each Felix run beside it.
core() {
	local run=$1 size=$2 n=$3 f=$4 sys=$5 label
	label="core $(human_size "$size"), fanout $f"
	case $sys in
	quic)
		local q
		q=$(quic_core "$size" "$n" "$f")
		rec "$label" quic "$run" deliveries/s "$q"
		rec "$label, unacked" quic "$run" deliveries/s "$q" # quic-go has no acks either
		;;
	felix)
		felix_core "$size" "$n" "$f" batch
		rec_core "$label" felix "$run"
		felix_core "$size" "$n" "$f" none
		rec_core "$label, unacked" felix "$run"
		;;
	*)
		nats_core "core.$run.$size.$f" "$size" "$n" "$f"
		rec_core "$label" nats "$run"
		rec_core "$label, unacked" nats "$run"
		;;
	esac
}

latency() { # RUN FANOUT SYSTEM
	local run=$1 f=$2 sys=$3 out label rc=0
	label="latency 128 B @1000/s, fanout $f"
	if [[ $sys == felix ]]; then
		out=$(felix_bench LOSSLESS --profile latency --payload 128 --rate 1000 --duration "$LAT_DUR" --fanout "$f")
	else
		out=$(bounded "$TOOLS/natslat" --server "$NATS_URL" --subject "lat.$run.$f" --size 128 --rate 1000 --duration "$LAT_DUR" \
			--fanout "$f" 2>"$WORK/natslat.err") || rc=$?
		((rc == 0)) || log "  natslat exited $rc: $(tr '\n' ' ' <"$WORK/natslat.err")"
	fi
	rec "$label" "$sys" "$run" p50 "$(jget p50_us <<<"$out")"
	rec "$label" "$sys" "$run" p99 "$(jget p99_us <<<"$out")"
}

# healthy_felix STREAM: felix bench as the publisher plus the healthy
# subscriber on the DEFAULT broker; prints its delivered msgs/s. No --admin:
# the frozen peer's drops are not this run's, and the run checks that the
# healthy subscriber got every message.
healthy_felix() {
	felix_bench DEFAULT --profile throughput --payload 128 --count "$SLOW_N" --fanout 1 --stream "$1" | jget deliveries_per_s
}

healthy_nats() {
	nats_core "$1" 128 "$SLOW_N" 1
	echo "$CORE_RATE"
}

slow() { # RUN SYSTEM
	local run=$1 sys=$2 base frozen_rate frozen share
	local stream=slow-$run-$sys
	if [[ $sys == felix ]]; then
		base=$(healthy_felix "$stream-alone")
		rm -f "$WORK/frozen.err" # the last run's "subscribed" is not this one's
		"$FELIX" sub --broker "$DEFAULT_ADDR" --ca "$DEFAULT_CA" --token "$DEFAULT_TOKEN" --stream "$stream" >/dev/null 2>"$WORK/frozen.err" &
		frozen=$!
		PIDS+=("$frozen")
		wait_until "the frozen felix sub to subscribe" 20 grep -q '^subscribed$' "$WORK/frozen.err"
	else
		base=$(healthy_nats "$stream-alone")
		"$NATS" sub "$stream" --raw >/dev/null 2>"$WORK/frozen.err" &
		frozen=$!
		PIDS+=("$frozen")
		sleep 0.5
	fi
	kill -STOP "$frozen"
	FROZEN+=("$frozen")
	if [[ $sys == felix ]]; then
		frozen_rate=$(healthy_felix "$stream")
	else
		frozen_rate=$(healthy_nats "$stream")
	fi
	stop_pid "$frozen"
	rec "slow consumer 128 B" "$sys" "$run" "healthy msg/s, alone" "$base"
	rec "slow consumer 128 B" "$sys" "$run" "healthy msg/s, frozen peer" "$frozen_rate"
	share=NA
	if [[ $base =~ ^[0-9.e+]+$ && $frozen_rate =~ ^[0-9.e+]+$ ]]; then
		share=$(awk -v a="$frozen_rate" -v b="$base" 'BEGIN { if (b > 0) printf "%.4f", a / b; else print "NA" }')
	fi
	rec "slow consumer 128 B" "$sys" "$run" "healthy share" "$share"
}

# durable RUN SYNC SYSTEM: acked durable publishing, 128 B, no subscriber.
# Felix: felix bench --durable, batches of 64 acked per batch (8 in flight);
# NATS: nats bench js pub async (file storage). SYNC "default" pairs Felix's
# periodic fsync with JetStream's default sync_interval; "always" pairs
# on_commit with sync_interval: always.
durable() {
	local run=$1 sync=$2 sys=$3 label n
	label="durable 128 B, fsync $sync"
	n=$DUR_N
	[[ $sync == always ]] && n=$DUR_SYNC_N
	if [[ $sys == felix ]]; then
		local broker=LOSSLESS
		[[ $sync == always ]] && broker=ONCOMMIT
		rec "$label" felix "$run" "acked msgs/s" \
			"$(felix_bench "$broker" --durable --profile throughput --fanout 0 --payload 128 --count "$n" --warmup 640 --stream "dur-$sync-$run" | jget msgs_per_s)"
	else
		local url=$NATS_URL
		[[ $sync == always ]] && url=$NATS_SYNC_URL
		rec "$label" nats "$run" "acked msgs/s" "$(NATS_URL=$url bounded "$NATS" bench js pub async "dur.$sync.$run" --stream "dur-$sync-$run" --create --storage file --purge \
			--msgs "$n" --size 128 --no-progress 2>&1 | grep -Eo 'stats: [0-9,]+ msgs/sec' | head -1 | grep -Eo '[0-9,]+' | tr -d ,)"
	fi
}

# group RUN SYSTEM: a consumer group's poll + ack of GROUP_N 128 B records
# with 4 consumers (Felix: periodic fsync; JetStream: its default sync).
group() {
	local run=$1 sys=$2 out rc=0
	if [[ $sys == felix ]]; then
		out=$(bounded "$TOOLS/groupbench" --broker "$LOSSLESS_ADDR" --ca "$LOSSLESS_CA" --token "$LOSSLESS_TOKEN" \
			--stream "grp-$run" --count "$GROUP_N" --size 128 --consumers 4 --batch 100 2>"$WORK/group.err") || rc=$?
	else
		out=$(bounded "$TOOLS/jspull" --server "$NATS_URL" --stream "GRP$run" --count "$GROUP_N" --size 128 --consumers 4 \
			--batch 100 2>"$WORK/group.err") || rc=$?
	fi
	((rc == 0)) || log "  $sys group bench exited $rc: $(tr '\n' ' ' <"$WORK/group.err")"
	rec "group poll+ack 128 B, 4 consumers" "$sys" "$run" "acked msgs/s" "$(jget msgs_per_s <<<"$out")"
}

# wants FAMILY: whether SCENARIOS includes it.
wants() { [[ " $SCENARIOS " == *" $1 "* ]]; }

# ---- replicated streams ---------------------------------------------------
# Started on first use (replicated_servers), so the other scenarios run
# without them: two 3-member felix clusters and two sets of three clustered
# nats-servers, one of each per sync pairing (as the durable rows pair
# them): "always" is Felix on_commit (acked once a quorum fsynced) against
# JetStream sync_interval: always; "default" is Felix periodic (acked once a
# quorum has it in memory) against JetStream's default sync.

# free_tcp_port: a 127.0.0.1 TCP port nothing answers on now.
free_tcp_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# start_nats_r3 SYNC: three nats-servers routed to each other as one
# cluster with JetStream file storage, fsyncing every write when SYNC is
# always; sets NATS_R3_<SYNC> (all three client URLs).
start_nats_r3() {
	local sync=$1 i routes="" ports=() urls="" js
	for i in 0 1 2; do ports+=("$(free_tcp_port)"); done
	for i in 0 1 2; do routes+="${routes:+, }nats://127.0.0.1:${ports[i]}"; done
	for i in 0 1 2; do
		js="store_dir: \"$WORK/js-r3-$sync-$i\""
		[[ $sync == always ]] && js+=", sync_interval: always"
		printf 'server_name: r3-%s-%d\nhost: 127.0.0.1\nport: -1\njetstream { %s }\ncluster { name: r3-%s, listen: "127.0.0.1:%d", routes: [%s] }\n' \
			"$sync" "$i" "$js" "$sync" "${ports[i]}" "$routes" >"$WORK/nats-r3-$sync-$i.conf"
		start_bg "$WORK/nats-r3-$sync-$i.log" "$TOOLS/nats-server" -c "$WORK/nats-r3-$sync-$i.conf"
	done
	for i in 0 1 2; do
		wait_until "nats-server r3-$sync-$i to listen" 20 grep -q 'Listening for client connections on' "$WORK/nats-r3-$sync-$i.log"
		urls+="${urls:+,}nats://127.0.0.1:$(grep -o 'client connections on [0-9.]*:[0-9]*' "$WORK/nats-r3-$sync-$i.log" | head -1 | sed 's/.*://')"
	done
	wait_until "the JetStream cluster ($sync) to elect its metadata leader" 60 \
		grep -q 'JetStream cluster new metadata leader\|Self is new JetStream cluster metadata leader' "$WORK"/nats-r3-"$sync"-*.log
	printf -v "NATS_R3_$sync" '%s' "$urls"
}

# start_felix_r3 NAME FSYNC: felix dev cluster --nodes 3 (an embedded etcd,
# peer link certificates) with durable_fsync FSYNC; sets ${NAME}_ADDR
# (node-1), ${NAME}_CA and ${NAME}_TOKEN for felix_bench NAME, and adds the
# dev process to FELIX_R3_PIDS. felix bench finds the shard's leader itself.
start_felix_r3() {
	local name=$1 fsync=$2 dir=$WORK/felix-r3-$1 base admin try
	for try in 1 2 3; do
		base=$(free_tcp_port) admin=$(free_tcp_port)
		start_bg "$dir-$try.log" "$FELIX" dev cluster --nodes 3 --dir "$dir" --base-port "$base" \
			--admin-base-port "$admin" --json -- --durable-fsync "$fsync"
		# The member table (JSON) is printed once the cluster formed.
		if wait_until "felix dev cluster $name to form" 60 grep -q '"members"' "$dir-$try.log"; then
			FELIX_R3_PIDS+=("$BG")
			printf -v "${name}_ADDR" '%s' "127.0.0.1:$base"
			printf -v "${name}_CA" '%s' "$dir/cert.pem"
			printf -v "${name}_TOKEN" '%s' "$(tr -d '\n' <"$dir/admin.token")"
			return
		fi
		log "  felix dev cluster $name did not start (try $try): $(tail -3 "$dir-$try.log" | tr '\n' ' ')"
		stop_pid "$BG"
	done
	return 1
}

FELIX_R3_PIDS=()
REPL_STARTED=0
replicated_servers() {
	((REPL_STARTED)) && return
	REPL_STARTED=1
	start_nats_r3 always
	start_nats_r3 default
	start_felix_r3 R3ONCOMMIT on_commit
	start_felix_r3 R3PERIODIC periodic
	log "replicated: felix clusters at $R3ONCOMMIT_ADDR (on_commit) and $R3PERIODIC_ADDR (periodic);" \
		"JetStream R3 at $NATS_R3_always (sync always) and $NATS_R3_default (default sync)"
}

# stop_replicated_servers: felix dev stops its members and etcd on SIGTERM.
stop_replicated_servers() {
	local p
	for p in "${FELIX_R3_PIDS[@]}"; do stop_pid "$p"; done
}

# replicated RUN SYNC SYSTEM: acked publishing of REPL_N records of 128 B to
# a fresh stream with 3 replicas, no subscriber. Felix: felix bench
# --durable --replicas 3, batches of 64 acked per batch, 8 in flight (512
# records, as many as nats bench keeps), at the leader; NATS: nats bench js
# pub async (its default batch: 500 in flight), file storage, R3. A quorum
# round trip, not CPU, bounds one publisher: both get the same window.
replicated() {
	local run=$1 sync=$2 sys=$3 label="replicated R3 128 B, fsync $2"
	replicated_servers
	if [[ $sys == felix ]]; then
		local broker=R3PERIODIC
		[[ $sync == always ]] && broker=R3ONCOMMIT
		rec "$label" felix "$run" "acked msgs/s" \
			"$(felix_bench "$broker" --durable --replicas 3 --profile throughput --inflight 8 --fanout 0 --payload 128 --count "$REPL_N" --warmup 640 --stream "repl-$sync-$run" | jget msgs_per_s)"
	else
		local url=NATS_R3_$sync
		rec "$label" nats "$run" "acked msgs/s" "$(NATS_URL=${!url} bounded "$NATS" bench js pub async "repl.$sync.$run" --stream "repl-$sync-$run" --create --storage file --replicas 3 --purge \
			--msgs "$REPL_N" --size 128 --no-progress 2>&1 | grep -Eo 'stats: [0-9,]+ msgs/sec' | head -1 | grep -Eo '[0-9,]+' | tr -d ,)"
	fi
}

# ---- caches ------------------------------------------------------------------
# Redis is started on first use (cache_servers), so the other scenarios run
# without it, and only when Debian's redis-server is installed: without it
# the Redis cells are n/a. No persistence (--save '' --appendonly no), as
# Redis is used beside a broker for this: the value lives in memory.
REDIS_PID="" REDIS_ADDR="" REDIS_VERSION=none CACHE_STARTED=0
cache_servers() {
	((CACHE_STARTED)) && return
	CACHE_STARTED=1
	if ! command -v redis-server >/dev/null; then
		log "cache: no redis-server (apt-get install redis-server): the Redis cells are n/a"
		return
	fi
	local port
	port=$(free_tcp_port)
	start_bg "$WORK/redis.log" redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$WORK"
	REDIS_PID=$BG
	wait_until "redis-server to listen" 20 grep -q 'Ready to accept connections' "$WORK/redis.log"
	REDIS_ADDR=127.0.0.1:$port
	REDIS_VERSION=$(redis-server --version | awk '{print $3}' | sed 's/^v=//')
	log "cache: redis-server $REDIS_VERSION at $REDIS_ADDR"
}

# cache RUN OP CLIENTS SYSTEM: bench/cachebench, OP (put or get) of 128 B
# values from CLIENTS clients for CACHE_DUR, against SYSTEM (felix: a
# durable 1-shard cache on the LOSSLESS broker; nats: a KV bucket on the
# nats-server; redis); records ops/s, p50, p99 and the CPU per operation
# (µs) of the server process (/proc/PID/stat, as the core rows) and of the
# client process over the timed window only, which cachebench reads at its
# start and end (a get row's fill before it is not charged).
cache() {
	local run=$1 op=$2 clients=$3 sys=$4 pid args out rc=0
	local label="cache $op 128 B, $clients client$([[ $clients == 1 ]] || echo s)"
	cache_servers
	case $sys in
	felix) pid=$LOSSLESS_PID args=(--system felix --broker "$LOSSLESS_ADDR" --ca "$LOSSLESS_CA" --token "$LOSSLESS_TOKEN"
		--cache "kv-$run-$op-$clients" --durable --shards 1) ;;
	nats) pid=$NATS_PID args=(--system natskv --server "$NATS_URL" --bucket "kv-$run-$op-$clients") ;;
	redis)
		[[ -n $REDIS_PID ]] || return 0
		pid=$REDIS_PID args=(--system redis --addr "$REDIS_ADDR")
		;;
	esac
	out=$(bounded "$TOOLS/cachebench" "${args[@]}" --op "$op" --clients "$clients" --size 128 --duration "$CACHE_DUR" \
		--server-pid "$pid" --clk-tck "$CLK_TCK" 2>"$WORK/cache.err") || rc=$?
	((rc == 0)) || log "  cachebench $sys exited $rc: $(tr '\n' ' ' <"$WORK/cache.err") $(grep -o '"first_error":"[^"]*"' <<<"$out")"
	rec "$label" "$sys" "$run" ops/s "$(jget ops_per_s <<<"$out")"
	rec "$label" "$sys" "$run" p50 "$(jget p50_us <<<"$out")"
	rec "$label" "$sys" "$run" p99 "$(jget p99_us <<<"$out")"
	rec "$label" "$sys" "$run" "server CPU µs/op" "$(jget server_cpu_us_per_op <<<"$out")"
	rec "$label" "$sys" "$run" "client CPU µs/op" "$(jget client_cpu_us_per_op <<<"$out")"
}

# cache_watch RUN SYSTEM: bench/cachebench --op watch, CACHE_WATCHERS prefix
# watches over 10 connections and 4 writers of 128 B values (Felix: the
# durable 1-shard cache of cache(); NATS: a KV bucket's watchers). Redis
# has no such row.
cache_watch() {
	local run=$1 sys=$2 pid args out rc=0
	local label="cache watch fanout to $CACHE_WATCHERS watchers"
	case $sys in
	felix) pid=$LOSSLESS_PID args=(--system felix --broker "$LOSSLESS_ADDR" --ca "$LOSSLESS_CA" --token "$LOSSLESS_TOKEN"
		--cache "kw-$run" --durable --shards 1) ;;
	nats) pid=$NATS_PID args=(--system natskv --server "$NATS_URL" --bucket "kw-$run") ;;
	*) return 0 ;;
	esac
	out=$(bounded "$TOOLS/cachebench" "${args[@]}" --op watch --watchers "$CACHE_WATCHERS" --clients 10 --writers 4 \
		--ahead 16 --size 128 --duration "$CACHE_DUR" --server-pid "$pid" --clk-tck "$CLK_TCK" 2>"$WORK/cache.err") || rc=$?
	((rc == 0)) || log "  cachebench watch $sys exited $rc: $(tr '\n' ' ' <"$WORK/cache.err") $(grep -o '"first_error":"[^"]*"' <<<"$out")"
	rec "$label" "$sys" "$run" deliveries/s "$(jget deliveries_per_s <<<"$out")"
	rec "$label" "$sys" "$run" p50 "$(jget p50_us <<<"$out")"
	rec "$label" "$sys" "$run" p99 "$(jget p99_us <<<"$out")"
	rec "$label" "$sys" "$run" "server CPU s/M" "$(jget server_cpu_s_per_m_deliveries <<<"$out")"
	rec "$label" "$sys" "$run" "client CPU s/M" "$(jget client_cpu_s_per_m_deliveries <<<"$out")"
}

# ---- WebSocket fanout -------------------------------------------------------
# Its two servers are started on first use (ws_servers), so the other
# scenarios run without them: a felix broker with browser_listen (block
# queues, as LOSSLESS, so every delivery is counted; no bound on
# connections from one address: all come from 127.0.0.1) and a nats-server
# with a websocket listener (no JetStream), each its own process, so each
# row's server CPU is that scenario's alone.
WS_STARTED=0
ws_servers() {
	((WS_STARTED)) && return
	WS_STARTED=1
	local port
	start_felix WSFELIX --subscriber-queue-policy block --subscriber-lane-queue-policy block \
		--browser-listen 127.0.0.1:0 --max-connections-per-ip 0
	wait_until "felix broker WSFELIX to serve browsers" 20 grep -q '"browser":"' "$WORK/WSFELIX.log"
	WSFELIX_BROWSER=$(grep -o '"browser":"[^"]*"' "$WORK/WSFELIX.log" | head -1 | cut -d'"' -f4)
	port=$(free_tcp_port)
	printf 'host: 127.0.0.1\nport: -1\nwebsocket { listen: "127.0.0.1:%d", no_tls: true }\n' "$port" >"$WORK/nats-ws.conf"
	start_bg "$WORK/nats-ws.log" "$TOOLS/nats-server" -c "$WORK/nats-ws.conf"
	NATS_WS_PID=$BG
	wait_until "nats-server (websocket) to listen" 20 grep -q 'Listening for websocket clients on' "$WORK/nats-ws.log"
	wait_until "nats-server (websocket) to take clients" 20 grep -q 'Listening for client connections on' "$WORK/nats-ws.log"
	NATS_WS_URL=ws://127.0.0.1:$port
	NATS_WS_TCP=nats://127.0.0.1:$(grep -o 'client connections on [0-9.]*:[0-9]*' "$WORK/nats-ws.log" | head -1 | sed 's/.*://')
	log "websocket: felix browser_listen at $WSFELIX_BROWSER (felix/1 $WSFELIX_ADDR); nats-server at $NATS_WS_URL ($NATS_WS_TCP)"
}

# websocket RUN MODE SYSTEM: bench/wsbench, WS_SUBS subscribers of 128 B
# records for WS_DUR; MODE max (unpaced, the publisher at most 64 records
# ahead of the deliveries: the rate) or paced (WS_RATE records/s: the
# latency below saturation). The bench process's CPU is over the timed
# window only (getrusage at its start and end), as the server's.
websocket() {
	local run=$1 mode=$2 sys=$3 label args out rc=0
	ws_servers
	case $mode in
	max) label="websocket fanout 128 B, $WS_SUBS subscribers" args=(--window 64) ;;
	paced) label="websocket 128 B @${WS_RATE}/s, $WS_SUBS subscribers" args=(--rate "$WS_RATE") ;;
	esac
	if [[ $sys == felix ]]; then
		args+=(--system felix --broker "$WSFELIX_ADDR" --browser "$WSFELIX_BROWSER" --ca "$WSFELIX_CA"
			--token "$WSFELIX_TOKEN" --server-pid "$WSFELIX_PID")
	else
		args+=(--system nats --server "$NATS_WS_TCP" --ws-url "$NATS_WS_URL" --server-pid "$NATS_WS_PID")
	fi
	out=$(bounded "$TOOLS/wsbench" "${args[@]}" --stream "ws-$mode-$run" --subscribers "$WS_SUBS" --size 128 \
		--duration "$WS_DUR" --clk-tck "$CLK_TCK" 2>"$WORK/ws.err") || rc=$?
	((rc == 0)) || log "  wsbench $sys exited $rc: $(tr '\n' ' ' <"$WORK/ws.err") $(grep -o '"first_error":"[^"]*"' <<<"$out")"
	rec "$label" "$sys" "$run" deliveries/s "$(jget deliveries_per_s <<<"$out")"
	rec "$label" "$sys" "$run" p50 "$(jget p50_us <<<"$out")"
	rec "$label" "$sys" "$run" p99 "$(jget p99_us <<<"$out")"
	rec "$label" "$sys" "$run" lost "$(jget missing <<<"$out")"
	rec "$label" "$sys" "$run" "broker CPU s/M" "$(jget server_cpu_s_per_m <<<"$out")"
	rec "$label" "$sys" "$run" "client CPU s/M" "$(jget client_cpu_s_per_m <<<"$out")"
}

# three RUN FUNC ARGS...: FUNC for Felix, NATS and Redis, after the idle
# gate; which goes first turns with the run.
three() {
	local run=$1 i sys=(felix nats redis)
	shift
	gate
	for i in 0 1 2; do "$@" "${sys[(i + run) % 3]}"; done
}

human_size() { if (($1 % 1024 == 0)); then echo "$(($1 / 1024)) KiB"; else echo "$1 B"; fi; }

# gate: waits (up to GATE_WAIT s) for IDLE_MIN % idle; records the idle seen.
IDLES=$WORK/idles
: >"$IDLES"
gate() {
	local i id
	id=$(idle)
	for ((i = 1; i < GATE_WAIT && id < IDLE_MIN; i++)); do id=$(idle); done
	((id >= IDLE_MIN)) || log "  machine only ${id}% idle after ${GATE_WAIT}s (IDLE_MIN $IDLE_MIN): running anyway"
	echo "$id" >>"$IDLES"
}

# both RUN FUNC ARGS...: FUNC for Felix and for NATS, in alternating order,
# after the idle gate.
both() {
	local run=$1
	shift
	gate
	if ((run % 2 == 1)); then
		"$@" felix
		"$@" nats
	else
		"$@" nats
		"$@" felix
	fi
}

START=$(date +%s)
for ((run = 1; run <= RUNS; run++)); do
	log "run $run of $RUNS"
	if wants core; then
		both "$run" core "$run" 128 "$CORE_N_128" 1
		core "$run" 128 "$CORE_N_128" 1 quic
		both "$run" core "$run" 128 "$CORE_N_128" 10
		core "$run" 128 "$CORE_N_128" 10 quic
		both "$run" core "$run" 1024 "$CORE_N_1K" 1
		core "$run" 1024 "$CORE_N_1K" 1 quic
		both "$run" core "$run" 1024 "$CORE_N_1K" 10
		core "$run" 1024 "$CORE_N_1K" 10 quic
	fi
	if wants latency; then
		both "$run" latency "$run" 1
		both "$run" latency "$run" 10
	fi
	if wants slow; then both "$run" slow "$run"; fi
	if wants durable; then
		both "$run" durable "$run" default
		both "$run" durable "$run" always
	fi
	if wants group; then both "$run" group "$run"; fi
	if wants replicated; then
		both "$run" replicated "$run" always
		both "$run" replicated "$run" default
	fi
	if wants websocket; then
		both "$run" websocket "$run" max
		both "$run" websocket "$run" paced
	fi
	if wants cache; then
		for op in put get; do
			three "$run" cache "$run" "$op" 1
			three "$run" cache "$run" "$op" 16
		done
		three "$run" cache_watch "$run"
	fi
done
stop_replicated_servers
IDLE_END=$(idle)
ELAPSED=$(($(date +%s) - START))

# ---- medians and the table -------------------------------------------------

# values SCENARIO METRIC SYSTEM: that cell's run values, in run order.
values() { awk -F'\t' -v s="$1" -v m="$2" -v y="$3" '$1 == s && $4 == m && $2 == y { print $5 }' "$RAW"; }
# median of the numeric values on stdin ("NA" when none).
median() {
	grep -E '^[-0-9.e+]+$' | sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print "NA"; exit }
		if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
unit_of() {
	case $1 in
	*msg/s* | *msgs/s | deliveries/s) echo msg/s ;;
	p50 | p99) echo µs ;;
	"healthy share") echo share ;;
	lost) echo msgs ;;
	*"CPU s/M") echo s/M ;;
	ops/s) echo ops/s ;;
	*"CPU µs/op") echo µs/op ;;
	esac
}
fmt() { # VALUE UNIT
	[[ $1 == NA ]] && { echo "n/a"; return; }
	case $2 in
	msg/s | ops/s) awk -v v="$1" 'BEGIN { s = sprintf("%.0f", v); o = ""; n = length(s)
		for (i = 1; i <= n; i++) { o = o substr(s, i, 1); if ((n - i) % 3 == 0 && i < n) o = o "," } print o }' ;;
	µs) awk -v v="$1" 'BEGIN { printf "%.0f µs", v }' ;;
	share) awk -v v="$1" 'BEGIN { printf "%.0f%%", v * 100 }' ;;
	s/M) awk -v v="$1" 'BEGIN { printf "%.3f s", v }' ;;
	µs/op) awk -v v="$1" 'BEGIN { printf "%.1f µs", v }' ;;
	msgs) awk -v v="$1" 'BEGIN { printf "%.0f", v }' ;;
	*) echo "$1" ;;
	esac
}
runs_list() { # SCENARIO METRIC SYSTEM UNIT
	local out="" v
	while read -r v; do out+="${out:+, }$(fmt "$v" "$4")"; done < <(values "$1" "$2" "$3")
	echo "$out"
}

SUMMARY=$WORK/summary.tsv
: >"$SUMMARY"
TABLE=$WORK/table.md
{
	echo "| Scenario | Metric | Felix (median) | NATS (median) | Felix / NATS | raw quic-go (median) | Felix / quic-go | Felix runs | NATS runs |"
	echo "|---|---|---|---|---|---|---|---|---|"
} >"$TABLE"
while IFS=$'\t' read -r scenario metric; do
	unit=$(unit_of "$metric")
	fm=$(values "$scenario" "$metric" felix | median)
	nm=$(values "$scenario" "$metric" nats | median)
	ratio=NA
	if [[ $fm != NA && $nm != NA ]]; then
		ratio=$(awk -v a="$fm" -v b="$nm" 'BEGIN { if (b != 0) printf "%.2f", a / b; else print "NA" }')
	fi
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$scenario" "$metric" "$unit" "$fm" "$nm" "$ratio" >>"$SUMMARY"
	# The cost metrics go into their own table, below.
	[[ $unit == s/M || $unit == msgs ]] && continue
	shown=$ratio
	[[ $ratio != NA ]] && shown="${ratio}×"
	[[ $ratio == NA ]] && shown="n/a"
	# The raw quic-go ceiling, for the core rows: what share of it Felix moves.
	# (grep in median finds nothing on the other rows: not a failure here.)
	qm=$(values "$scenario" "$metric" quic | median || true)
	qm=${qm:-NA}
	qshare=n/a
	if [[ $fm != NA && $qm != NA ]]; then
		qshare=$(awk -v a="$fm" -v b="$qm" 'BEGIN { if (b != 0) printf "%.0f%%", 100 * a / b; else print "n/a" }')
	fi
	echo "| $scenario | $metric | $(fmt "$fm" "$unit") | $(fmt "$nm" "$unit") | $shown | $(fmt "$qm" "$unit") | $qshare | $(runs_list "$scenario" "$metric" felix "$unit") | $(runs_list "$scenario" "$metric" nats "$unit") |" >>"$TABLE"
done < <(awk -F'\t' '$1 !~ /^cache / && !seen[$1 FS $4]++ { print $1 "\t" $4 }' "$RAW")

# The cost table: per core row, Felix's losses and both systems' CPU
# seconds per million deliveries, the broker's and the clients'.
COST=$WORK/cost.md
{
	echo "| Scenario | Felix lost | NATS lost | Felix broker CPU | NATS broker CPU | Felix / NATS | Felix client CPU | NATS client CPU | Felix / NATS | Felix broker runs | NATS broker runs |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
} >"$COST"
# cell SCENARIO METRIC FIELD: a field of the summary (4 Felix, 5 NATS, 6 ratio).
cell() { awk -F'\t' -v s="$1" -v m="$2" -v f="$3" '$1 == s && $2 == m { print $f }' "$SUMMARY"; }
ratio_cell() { local r; r=$(cell "$1" "$2" 6); [[ -n $r && $r != NA ]] && echo "${r}×" || echo "n/a"; }
while read -r scenario; do
	echo "| $scenario | $(fmt "$(cell "$scenario" lost 4)" msgs) | $(fmt "$(cell "$scenario" lost 5)" msgs) | $(fmt "$(cell "$scenario" "broker CPU s/M" 4)" s/M) |" \
		"$(fmt "$(cell "$scenario" "broker CPU s/M" 5)" s/M) | $(ratio_cell "$scenario" "broker CPU s/M") |" \
		"$(fmt "$(cell "$scenario" "client CPU s/M" 4)" s/M) | $(fmt "$(cell "$scenario" "client CPU s/M" 5)" s/M) |" \
		"$(ratio_cell "$scenario" "client CPU s/M") | $(runs_list "$scenario" "broker CPU s/M" felix s/M) |" \
		"$(runs_list "$scenario" "broker CPU s/M" nats s/M) |" >>"$COST"
done < <(awk -F'\t' '$2 == "broker CPU s/M" { print $1 }' "$SUMMARY")

# The cache table: Felix, NATS KV and Redis side by side, Felix's ratio to
# each (a cell with no number is n/a: the median of nothing is NA).
CACHE_TABLE=$WORK/cache.md
CACHE_SUMMARY=$WORK/cache-summary.tsv # scenario, metric, unit, Felix, NATS KV, Redis medians
: >"$CACHE_TABLE"
: >"$CACHE_SUMMARY"
ratio_of() { # A B: A / B as "1.23×", or n/a
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "NA" || b == "NA" || b == 0) print "n/a"; else printf "%.2f×", a / b }'
}
if grep -q '^cache ' "$RAW"; then
	{
		echo "| Scenario | Metric | Felix (median) | NATS KV (median) | Redis (median) | Felix / NATS KV | Felix / Redis | Felix runs | NATS KV runs | Redis runs |"
		echo "|---|---|---|---|---|---|---|---|---|---|"
	} >"$CACHE_TABLE"
	while IFS=$'\t' read -r scenario metric; do
		unit=$(unit_of "$metric")
		fm=$(values "$scenario" "$metric" felix | median || true)
		nm=$(values "$scenario" "$metric" nats | median || true)
		dm=$(values "$scenario" "$metric" redis | median || true)
		printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$scenario" "$metric" "$unit" "${fm:-NA}" "${nm:-NA}" "${dm:-NA}" >>"$CACHE_SUMMARY"
		echo "| $scenario | $metric | $(fmt "${fm:-NA}" "$unit") | $(fmt "${nm:-NA}" "$unit") | $(fmt "${dm:-NA}" "$unit") |" \
			"$(ratio_of "${fm:-NA}" "${nm:-NA}") | $(ratio_of "${fm:-NA}" "${dm:-NA}") | $(runs_list "$scenario" "$metric" felix "$unit") |" \
			"$(runs_list "$scenario" "$metric" nats "$unit") | $(runs_list "$scenario" "$metric" redis "$unit") |" >>"$CACHE_TABLE"
	done < <(awk -F'\t' '$1 ~ /^cache / && !seen[$1 FS $4]++ { print $1 "\t" $4 }' "$RAW")
fi

# Whether rows other than the cache's ran: the main and cost tables.
HAS_MAIN=0
(($(wc -l <"$TABLE") > 2)) && HAS_MAIN=1

# Whether the tree differs from HEAD, but for the results this run is
# about to write (checked here: the report truncates latest.md first).
DIRTY=$(git -C "$ROOT" diff --quiet HEAD -- . ':(exclude)bench/results' 2>/dev/null || echo ' with uncommitted changes')
CMD="bench/compare.sh -n $RUNS"
((IDLE_MIN > 0)) && CMD="IDLE_MIN=$IDLE_MIN $CMD"
# GOMAXPROCS reaches every broker and client of both systems (all are Go).
[[ -n ${GOMAXPROCS:-} ]] && CMD="GOMAXPROCS=$GOMAXPROCS $CMD"
[[ $SCENARIOS == "$ALL_SCENARIOS" ]] || ((REPL_ONLY)) || CMD="SCENARIOS=\"$SCENARIOS\" $CMD"
((QUICK)) && CMD="${CMD%%bench/compare.sh*}bench/compare.sh --quick"
((REPL_ONLY)) && CMD+=" --only-replicated"
{
	echo "# Felix vs NATS, side by side"
	echo
	echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); $RUNS run(s) of each scenario, Felix and NATS alternating; $((ELAPSED / 60)) min $((ELAPSED % 60)) s."
	echo "- Command: \`$CMD\` (CORE_N_128=$CORE_N_128, CORE_N_1K=$CORE_N_1K, LAT_DUR=$LAT_DUR, SLOW_N=$SLOW_N, DUR_N=$DUR_N, DUR_SYNC_N=$DUR_SYNC_N, GROUP_N=$GROUP_N, REPL_N=$REPL_N, CACHE_DUR=$CACHE_DUR, CACHE_WATCHERS=$CACHE_WATCHERS, WS_SUBS=$WS_SUBS, WS_DUR=$WS_DUR, WS_RATE=$WS_RATE, SCENARIOS=\"$SCENARIOS\", IDLE_MIN=$IDLE_MIN)"
	echo "- Machine: $MACHINE; idle ${IDLE_START}% before, ${IDLE_END}% after (vmstat, 1 s);"
	echo "  idle before each Felix/NATS pair: $(sort -n "$IDLES" | awk '{ v[NR] = $1 } END { printf "min %s%%, median %s%%, max %s%%", v[1], v[int((NR + 1) / 2)], v[NR] }') (gate: IDLE_MIN=$IDLE_MIN)."
	echo "- Versions: felix at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$DIRTY ($("$FELIX" version | cut -d' ' -f2-)), nats-server $("$TOOLS/nats-server" --version | awk '{print $2}'), natscli $("$NATS" --version)."
	echo "- Every process on 127.0.0.1, sharing the same cores: each broker is its own process; in the core rows the"
	echo "  publisher and the subscribers are two processes on both sides (felix bench --role pub / --role sub, nats"
	echo "  bench pub / sub); felix bench (latency, slow consumer, durable) and natslat hold both in one."
	if ((HAS_MAIN)); then # not when only the cache rows ran
		echo
		cat "$TABLE"
		echo
		echo "Cost per delivery (core rows): CPU seconds per million deliveries, of the broker process (/proc/PID/stat"
		echo "utime+stime before and after the row) and of the publisher and subscriber processes together (their whole"
		echo "lives, connecting included, read once each was reaped). Lost: deliveries the Felix subscriber process"
		echo "expected and did not get, less those of acked publishes the broker answered overloaded (an unacked"
		echo "publish it refuses is not answered, so lost); NATS's subscriber ends only once it has every message."
		echo "CPU per delivery does not depend on how the cores are shared, rates do."
		echo
		cat "$COST"
		echo
		echo "Felix / NATS: above 1 means Felix delivered more (throughput, healthy share) or took longer (latency)."
		echo "Felix / quic-go: Felix's deliveries as a share of what quic-go alone moves (bench/quicraw), its ceiling."
		echo "Throughput: Felix is acked per batch of 64 (4 batches in flight), block queues, lossless and checked"
		echo "(unaccounted 0), or unacked (--ack none, the like-for-like rows); NATS core is unacked, one run in both."
		echo "Latency: publish call to delivery, same method on both (timestamp in the payload, one process); Felix"
		echo "waits for each message's ack, NATS has none."
		echo "Slow consumer: Felix broker with its defaults (drop_new); NATS defaults (max_pending 64 MiB,"
		echo "write_deadline 10 s). Healthy share = its msg/s next to a SIGSTOPped peer / its msg/s alone."
		echo "Replicated: 3-member felix clusters (felix dev cluster) vs three clustered nats-servers (JetStream R3,"
		echo "file storage); fsync always: Felix on_commit (acked once a quorum fsynced) vs sync_interval: always;"
		echo "fsync default: Felix periodic (acked once a quorum has it in memory) vs JetStream's default sync."
		if grep -q '^websocket ' "$RAW"; then
			echo "WebSocket: bench/wsbench, one process holding $WS_SUBS WebSocket subscribers (a connection each) and"
			echo "the publisher, 128 B records each with its send time; Felix's browser front end (block queues),"
			echo "publisher over felix/1 (acked, one record a publish, pipelined) vs nats-server's websocket listener,"
			echo "publisher over NATS's TCP (unacked). Fanout row: unpaced, at most 64 records ahead of the deliveries"
			echo "(so its p50/p99 is that window's queue); paced row: $WS_RATE records/s. $WS_DUR of publishing, then"
			echo "until 5 s pass with no delivery; lost: deliveries that never came. Its client CPU is the bench"
			echo "process's over that window only, not its whole life."
		fi
	fi
	if [[ -s $CACHE_TABLE ]]; then
		echo
		echo "## Caches: Felix vs NATS KV vs Redis"
		echo
		cat "$CACHE_TABLE"
		echo
		echo "bench/cachebench, the same closed loop on all three: each client its own connection, one operation"
		echo "in flight, keys of its own (1,000 each, cycled), 128 B values, $CACHE_DUR timed; gets read keys"
		echo "written before the window. Felix: a durable 1-shard cache on the block-queue broker (periodic fsync);"
		echo "NATS KV: a JetStream bucket (file storage, history 1, default sync) on the same nats-server; Redis:"
		echo "redis-server $REDIS_VERSION with no persistence. p50/p99: each operation's round trip. CPU per operation over the"
		echo "window only: the server process's (/proc/PID/stat) and the client process's (getrusage)."
		echo "The watch fanout row: one prefix watched by $CACHE_WATCHERS watchers over 10 connections, 4 writers of 128 B"
		echo "values (one put in flight each, at most 16 puts past the newest every watcher has); p50/p99 put to"
		echo "delivery, CPU per million deliveries. Redis has no watch row."
		echo "Felix / X above 1: Felix did more operations (ops/s) or took longer (latency, CPU)."
	fi
} >"$RESULTS/$OUT.md"
if ((HAS_MAIN)); then
	cp "$SUMMARY" "$RESULTS/$OUT.tsv"
	[[ -s $CACHE_SUMMARY ]] && cp "$CACHE_SUMMARY" "$RESULTS/$OUT-cache.tsv"
else
	cp "$CACHE_SUMMARY" "$RESULTS/$OUT.tsv"
fi
{
	printf 'scenario\tsystem\trun\tmetric\tvalue\n'
	cat "$RAW"
} >"$RESULTS/$OUT-raw.tsv"
# The chart draws rates, latencies and shares; the cost rows are the table's.
awk -F'\t' '$3 != "s/M" && $3 != "msgs"' "$SUMMARY" >"$WORK/chart.tsv"
# (The cache rows are their table's only: with nothing else, no chart.)
if [[ -s $WORK/chart.tsv ]]; then
	"$TOOLS/chart" -in "$WORK/chart.tsv" -out "$RESULTS/$OUT.svg" \
		-title "Felix vs NATS on $(nproc) shared cores, loopback, medians of $RUNS ($(date -u +%Y-%m-%d))"
fi

cat "$RESULTS/$OUT.md"
log "wrote bench/results/$OUT.md, $OUT.tsv and $OUT-raw.tsv$( ((HAS_MAIN)) && echo " and $OUT.svg")"
