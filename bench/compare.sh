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
#   core fanout    128 B and 1 KiB, fanout 1 and 10: felix bench (throughput
#                  profile) vs nats bench sub + nats bench pub, and the raw
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
# It writes bench/results/latest.md (the table), latest.tsv (medians),
# latest-raw.tsv (every run) and latest.svg (the chart, from bench/chart).
#
# Sizes can be changed through the environment: CORE_N_128 (1000000),
# CORE_N_1K (200000), LAT_DUR (10s), SLOW_N (1000000), REPL_N (200000),
# STEP_TIMEOUT (180, seconds, the bound on any one command), GROUP_N (100000).
# SCENARIOS (default "core latency slow durable group replicated") runs only
# those. IDLE_MIN (0: off) gates each
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
SCENARIOS=${SCENARIOS:-core latency slow durable group replicated}
((REPL_ONLY)) && SCENARIOS=replicated
STEP_TIMEOUT=${STEP_TIMEOUT:-180}
IDLE_MIN=${IDLE_MIN:-0}
GATE_WAIT=${GATE_WAIT:-60}
if ((QUICK)); then
	CORE_N_128=$((CORE_N_128 / 10)) CORE_N_1K=$((CORE_N_1K / 10)) SLOW_N=$((SLOW_N / 10))
	DUR_N=$((DUR_N / 10)) DUR_SYNC_N=$((DUR_SYNC_N / 10)) GROUP_N=$((GROUP_N / 10)) REPL_N=$((REPL_N / 10))
	LAT_DUR=3s RUNS=1
fi

NATS_SERVER_MOD=github.com/nats-io/nats-server/v2@v2.15.2
NATSCLI_MOD=github.com/nats-io/natscli/nats@v0.5.0

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH=$ROOT/bench
TOOLS=$BENCH/tools/bin
RESULTS=$BENCH/results
OUT=latest # the results' file names
((REPL_ONLY)) && OUT=replicated
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
wait_until() {
	local desc=$1 secs=$2 i
	shift 2
	for ((i = 0; i < secs * 10; i++)); do
		if "$@"; then return 0; fi
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
log "building felix, bench/natslat and bench/chart"
(cd "$ROOT" && go build -o "$TOOLS/felix" ./cmd/felix && go build -o "$TOOLS/chart" ./bench/chart && go build -o "$TOOLS/quicraw" ./bench/quicraw &&
	go build -o "$TOOLS/groupbench" ./bench/groupbench)
(cd "$BENCH/natslat" && go build -o "$TOOLS/natslat" . && go build -o "$TOOLS/jspull" ./jspull)
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

# start_felix NAME ARGS...: a felix broker on free ports; sets ${NAME}_ADDR,
# ${NAME}_ADMIN, ${NAME}_CA and ${NAME}_TOKEN (its admin.token: the broker
# needs a token since issue #10).
start_felix() {
	local name=$1
	shift
	local dir=$WORK/$name
	start_bg "$WORK/$name.log" "$FELIX" broker --listen 127.0.0.1:0 --addr-file "$dir.addr" --admin 127.0.0.1:0 \
		--data-dir "$dir" --log-format json "$@"
	wait_until "felix broker $name to write its address" 20 test -s "$dir.addr"
	printf -v "${name}_ADDR" '%s' "$(tr -d '\n' <"$dir.addr")"
	printf -v "${name}_ADMIN" '%s' "$(grep -o '"admin":"[^"]*"' "$WORK/$name.log" | head -1 | cut -d'"' -f4)"
	printf -v "${name}_CA" '%s' "$dir/cert.pem"
	printf -v "${name}_TOKEN" '%s' "$(tr -d '\n' <"$dir/admin.token")"
}
# LOSSLESS: block queues end to end, as the reference harness runs (no drops,
# so every message is counted). DEFAULT: the broker's defaults (drop_new),
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

# nats_core SUBJECT SIZE COUNT CLIENTS: nats bench sub (CLIENTS subscribers)
# then nats bench pub; prints the subscribers' aggregated msgs/s.
nats_core() {
	local subj=$1 size=$2 n=$3 clients=$4 sub rc=0
	bounded "$NATS" bench sub "$subj" --clients "$clients" --msgs "$n" --size "$size" --no-progress >"$WORK/nsub.out" 2>&1 &
	sub=$!
	PIDS+=("$sub")
	sleep 1.5 # as in the peers notes: the subscribers are registered
	bounded "$NATS" bench pub "$subj" --clients 1 --msgs "$n" --size "$size" --no-progress >"$WORK/npub.out" 2>&1 || rc=$?
	wait "$sub" || rc=$?
	if ((rc != 0)); then
		log "  nats bench failed ($rc): $(tail -3 "$WORK/nsub.out" | tr '\n' ' ')"
		return
	fi
	grep -Eo 'subscriber (aggregated )?stats: [0-9,]+ msgs/sec' "$WORK/nsub.out" | head -1 | grep -Eo '[0-9,]+ msgs' | tr -d ', msg'
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

core() { # RUN SIZE COUNT FANOUT SYSTEM
	local run=$1 size=$2 n=$3 f=$4 sys=$5 label
	label="core $(human_size "$size"), fanout $f"
	if [[ $sys == quic ]]; then
		rec "$label" quic "$run" deliveries/s "$(quic_core "$size" "$n" "$f")"
	elif [[ $sys == felix ]]; then
		rec "$label" felix "$run" deliveries/s \
			"$(felix_bench LOSSLESS --profile throughput --payload "$size" --count "$n" --fanout "$f" | jget deliveries_per_s)"
	else
		rec "$label" nats "$run" deliveries/s "$(nats_core "core.$run.$size.$f" "$size" "$n" "$f")"
	fi
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

healthy_nats() { nats_core "$1" 128 "$SLOW_N" 1; }

slow() { # RUN SYSTEM
	local run=$1 sys=$2 base frozen_rate frozen share
	local stream=slow-$run-$sys
	if [[ $sys == felix ]]; then
		base=$(healthy_felix "$stream-alone")
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

# ---- replicated streams (issue #14) ----------------------------------------
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
	esac
}
fmt() { # VALUE UNIT
	[[ $1 == NA ]] && { echo "n/a"; return; }
	case $2 in
	msg/s) awk -v v="$1" 'BEGIN { s = sprintf("%.0f", v); o = ""; n = length(s)
		for (i = 1; i <= n; i++) { o = o substr(s, i, 1); if ((n - i) % 3 == 0 && i < n) o = o "," } print o }' ;;
	µs) awk -v v="$1" 'BEGIN { printf "%.0f µs", v }' ;;
	share) awk -v v="$1" 'BEGIN { printf "%.0f%%", v * 100 }' ;;
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
done < <(awk -F'\t' '!seen[$1 FS $4]++ { print $1 "\t" $4 }' "$RAW")

# Whether the tree differs from HEAD, but for the results this run is
# about to write (checked here: the report truncates latest.md first).
DIRTY=$(git -C "$ROOT" diff --quiet HEAD -- . ':(exclude)bench/results' 2>/dev/null || echo ' with uncommitted changes')
CMD="bench/compare.sh -n $RUNS"
((IDLE_MIN > 0)) && CMD="IDLE_MIN=$IDLE_MIN $CMD"
[[ $SCENARIOS == "core latency slow durable group replicated" ]] || ((REPL_ONLY)) || CMD="SCENARIOS=\"$SCENARIOS\" $CMD"
((QUICK)) && CMD="bench/compare.sh --quick"
((REPL_ONLY)) && CMD+=" --only-replicated"
{
	echo "# Felix vs NATS, side by side"
	echo
	echo "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); $RUNS run(s) of each scenario, Felix and NATS alternating; $((ELAPSED / 60)) min $((ELAPSED % 60)) s."
	echo "- Command: \`$CMD\` (CORE_N_128=$CORE_N_128, CORE_N_1K=$CORE_N_1K, LAT_DUR=$LAT_DUR, SLOW_N=$SLOW_N, DUR_N=$DUR_N, DUR_SYNC_N=$DUR_SYNC_N, GROUP_N=$GROUP_N, REPL_N=$REPL_N, SCENARIOS=\"$SCENARIOS\", IDLE_MIN=$IDLE_MIN)"
	echo "- Machine: $MACHINE; idle ${IDLE_START}% before, ${IDLE_END}% after (vmstat, 1 s);"
	echo "  idle before each Felix/NATS pair: $(sort -n "$IDLES" | awk '{ v[NR] = $1 } END { printf "min %s%%, median %s%%, max %s%%", v[1], v[int((NR + 1) / 2)], v[NR] }') (gate: IDLE_MIN=$IDLE_MIN)."
	echo "- Versions: felix at $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$DIRTY ($("$FELIX" version | cut -d' ' -f2-)), nats-server $("$TOOLS/nats-server" --version | awk '{print $2}'), natscli $("$NATS" --version)."
	echo "- Every process on 127.0.0.1, sharing the same cores: each broker is its own process; felix bench and natslat"
	echo "  hold their publisher and subscribers in one process; nats bench sub and nats bench pub are two."
	echo
	cat "$TABLE"
	echo
	echo "Felix / NATS: above 1 means Felix delivered more (throughput, healthy share) or took longer (latency)."
	echo "Felix / quic-go: Felix's deliveries as a share of what quic-go alone moves (bench/quicraw), its ceiling."
	echo "Throughput: Felix is acked per batch of 64 (4 batches in flight), block queues, lossless and checked"
	echo "(unaccounted 0); NATS core is unacked. Latency: publish call to delivery, same method on both"
	echo "(timestamp in the payload, one process); Felix waits for each message's ack, NATS has none."
	echo "Slow consumer: Felix broker with its defaults (drop_new); NATS defaults (max_pending 64 MiB,"
	echo "write_deadline 10 s). Healthy share = its msg/s next to a SIGSTOPped peer / its msg/s alone."
	echo "Replicated: 3-member felix clusters (felix dev cluster) vs three clustered nats-servers (JetStream R3,"
	echo "file storage); fsync always: Felix on_commit (acked once a quorum fsynced) vs sync_interval: always;"
	echo "fsync default: Felix periodic (acked once a quorum has it in memory) vs JetStream's default sync."
} >"$RESULTS/$OUT.md"
cp "$SUMMARY" "$RESULTS/$OUT.tsv"
{
	printf 'scenario\tsystem\trun\tmetric\tvalue\n'
	cat "$RAW"
} >"$RESULTS/$OUT-raw.tsv"
"$TOOLS/chart" -in "$SUMMARY" -out "$RESULTS/$OUT.svg" \
	-title "Felix vs NATS on $(nproc) shared cores, loopback, medians of $RUNS ($(date -u +%Y-%m-%d))"

cat "$RESULTS/$OUT.md"
log "wrote bench/results/$OUT.md, $OUT.tsv, $OUT-raw.tsv and $OUT.svg"
