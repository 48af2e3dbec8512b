#!/usr/bin/env bash
# redis-sentinel.sh - a local Sentinel setup (1 master, 1 replica, 3
# sentinels, quorum 2) to run rpr against, the shell twin of
# redistest.StartSentinel.
#
# Commands:
#   up               start master (BASE_PORT), replica (+1) and sentinels
#                    (+2..+4), wait until every sentinel sees the replica and
#                    the two other sentinels, print KEY=VALUE lines (also
#                    written to $RPR_STATE_DIR/env); logs go to stderr. If up
#                    fails half-way it tears down what it started.
#   down             stop what up started (SIGTERM, SIGKILL after 5 s), by
#                    recorded PID and only while /proc/PID/cwd is still that
#                    process' dir; remove our files. Safe to run twice.
#   env              print the KEY=VALUE lines of a running setup
#   master           print the master's address as the sentinels report it
#   kill PORT [SIG]  send SIG (default KILL: a crash) to the process on PORT;
#                    STOP and CONT freeze and thaw it
#   start PORT       start a killed master or replica again. Its config has
#                    no replicaof line for a former master: it runs as an
#                    empty, writable master for ~10 s until Sentinel
#                    demotes it (see `failover` to wait for that)
#   failover [SECONDS]  wait until every sentinel names the same master and
#                    it answers ROLE master (default 30 s); print its address
#
# Environment (read by up; later commands take ports from the state dir):
#   RPR_STATE_DIR  state dir, one per running setup (default /tmp/rpr-sentinel)
#   BIND_IP        address everything listens on and announces (default 127.0.0.1)
#   BASE_PORT      master port; replica +1, sentinels +2..+4 (default 7201)
#   MASTER_NAME    the name the sentinels monitor (default rpr)
#   DOWN_AFTER_MS  sentinel down-after-milliseconds (default 1000)
#
# Example:
#   eval "$(RPR_STATE_DIR=/tmp/se scripts/redis-sentinel.sh up)"
#   go run ./cmd/rpr demo --redis "$RPR_REDIS_URL"
#   RPR_STATE_DIR=/tmp/se scripts/redis-sentinel.sh kill "$(RPR_STATE_DIR=/tmp/se scripts/redis-sentinel.sh master | cut -d: -f2)"
#   RPR_STATE_DIR=/tmp/se scripts/redis-sentinel.sh failover
#   RPR_STATE_DIR=/tmp/se scripts/redis-sentinel.sh down
set -euo pipefail

STATE=${RPR_STATE_DIR:-/tmp/rpr-sentinel}
BIND_IP=${BIND_IP:-127.0.0.1}
BASE_PORT=${BASE_PORT:-7201}
MASTER_NAME=${MASTER_NAME:-rpr}
DOWN_AFTER_MS=${DOWN_AFTER_MS:-1000}
ENV_FILE=$STATE/env
# failover-timeout is also the retry delay after a split leader vote (2x
# this); Sentinel's default of 180000 would stall a failover for minutes.
FAILOVER_TIMEOUT_MS=5000

log() { echo "redis-sentinel: $*" >&2; }
die() { log "$*"; exit 1; }
ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
# retry SECONDS CMD...: run CMD every 50 ms until it succeeds or time is up
retry() {
    local until=$(($(ms) + $1 * 1000))
    shift
    while ! "$@"; do
        [ "$(ms)" -lt "$until" ] || return 1
        sleep 0.05
    done
}
negate() { ! "$@"; }

load_state() {
    [ -f "$ENV_FILE" ] || return 0
    local key val
    while IFS='=' read -r key val; do
        case $key in
        BIND_IP) BIND_IP=$val ;;
        BASE_PORT) BASE_PORT=$val ;;
        SENTINEL_MASTER_NAME) MASTER_NAME=$val ;;
        esac
    done <"$ENV_FILE"
}
set_ports() {
    MASTER_PORT=$BASE_PORT
    REPLICA_PORT=$((BASE_PORT + 1))
    SENTINEL_PORTS="$((BASE_PORT + 2)) $((BASE_PORT + 3)) $((BASE_PORT + 4))"
}
all_ports() { echo "$MASTER_PORT $REPLICA_PORT $SENTINEL_PORTS"; }
node_dir() { echo "$STATE/node-$1"; }

# is_ours PID DIR: PID is alive and its cwd is DIR. False for a zombie or a
# recycled PID, so a stale pid file never makes us signal a stranger.
is_ours() { [ -n "$1" ] && [ "$(readlink "/proc/$1/cwd" 2>/dev/null)" = "$2" ]; }
recorded_pid() { cat "$(node_dir "$1")/pid" 2>/dev/null || true; }

# cli PORT ARGS...: redis-cli exits 0 on error replies; look at its output
cli() { local port=$1; shift; timeout 5 redis-cli -h "$BIND_IP" -p "$port" "$@"; }
info_field() { sed -n "s/^$2:\([^\r]*\)\r\{0,1\}\$/\1/p" <<<"$1" | head -n 1; }
# field_after TEXT NAME: the line after NAME in a flat field/value reply
field_after() { awk -v n="$2" 'prev == n { print; exit } { prev = $0 }' <<<"${1//$'\r'/}"; }

running_pid() { info_field "$(cli "$1" INFO server 2>/dev/null || true)" process_id; }
answers() { [ "$(running_pid "$1")" = "$2" ]; }
answers_or_dead() { answers "$1" "$2" || ! is_ours "$2" "$(node_dir "$1")"; }

data_conf() { # data_conf PORT: master and replica
    cat <<EOF
# data node of scripts/redis-sentinel.sh
port $1
bind $BIND_IP
protected-mode no
dir $(node_dir "$1")
save ""
appendonly no
enable-debug-command yes
repl-diskless-sync-delay 0
# the address this node reports to sentinels as a replica
replica-announce-ip $BIND_IP
EOF
}

sentinel_conf() { # sentinel_conf PORT
    cat <<EOF
# sentinel of scripts/redis-sentinel.sh; Sentinel rewrites this file
# (myid, replicas and peers it found, epochs), so it must stay writable
port $1
bind $BIND_IP
protected-mode no
dir $(node_dir "$1")
# the address announced to the other sentinels
sentinel announce-ip $BIND_IP
sentinel monitor $MASTER_NAME $BIND_IP $MASTER_PORT 2
# tuning lines must come after "sentinel monitor"
sentinel down-after-milliseconds $MASTER_NAME $DOWN_AFTER_MS
sentinel failover-timeout $MASTER_NAME $FAILOVER_TIMEOUT_MS
EOF
}

launch() { # launch PORT: start the process in its dir and wait until it answers
    local port=$1 dir pid
    dir=$(node_dir "$port")
    ! is_ours "$(recorded_pid "$port")" "$dir" || die "the process on port $port is running already"
    # exec inside the subshell: $! is redis-server's own PID, cwd = its dir
    if [ -f "$dir/sentinel.conf" ]; then
        (cd "$dir" && exec redis-server "$dir/sentinel.conf" --sentinel >>"$dir/redis.log" 2>&1 </dev/null) &
    elif [ -f "$dir/redis.conf" ]; then
        (cd "$dir" && exec redis-server "$dir/redis.conf" >>"$dir/redis.log" 2>&1 </dev/null) &
    else
        die "nothing of ours on port $port in $STATE"
    fi
    pid=$!
    echo "$pid" >"$dir/pid"
    retry 15 answers_or_dead "$port" "$pid" || true
    answers "$port" "$pid" || die "port $port (pid $pid) did not start: $(tail -n 3 "$dir/redis.log")"
}

signal_node() { # signal_node PORT SIG
    local pid dir
    dir=$(node_dir "$1")
    pid=$(recorded_pid "$1")
    is_ours "$pid" "$dir" || die "the process on port $1 is not running (or not ours)"
    kill "-$2" "$pid"
}

# master_of SENTINEL_PORT: ip:port that sentinel names as master
master_of() {
    local out
    out=$(cli "$1" SENTINEL GET-MASTER-ADDR-BY-NAME "$MASTER_NAME" 2>/dev/null) || return 1
    out=${out//$'\r'/}
    [ "$(grep -c . <<<"$out")" = 2 ] || return 1
    echo "$(head -n 1 <<<"$out"):$(tail -n 1 <<<"$out")"
}

# agreed_master: every sentinel names the same master, which answers ROLE
# master; prints it
agreed_master() {
    local p m first=
    for p in $SENTINEL_PORTS; do
        m=$(master_of "$p") || return 1
        [ -z "$first" ] || [ "$m" = "$first" ] || return 1
        first=$m
    done
    [ "$(cli "${first##*:}" ROLE 2>/dev/null | head -n 1 | tr -d '\r')" = master ] || return 1
    echo "$first"
}

# converged: the replica's link is up and every sentinel sees the master
# with one replica and two other sentinels
converged() {
    local p out
    [ "$(info_field "$(cli "$REPLICA_PORT" INFO replication 2>/dev/null || true)" master_link_status)" = up ] || return 1
    for p in $SENTINEL_PORTS; do
        out=$(cli "$p" SENTINEL MASTER "$MASTER_NAME" 2>/dev/null) || return 1
        [ "$(field_after "$out" flags)" = master ] || return 1
        [ "$(field_after "$out" num-slaves)" = 1 ] || return 1
        [ "$(field_after "$out" num-other-sentinels)" = 2 ] || return 1
    done
}

cleanup_failed_up() {
    local rc=$?
    if [ "$rc" != 0 ]; then
        log "up failed (exit $rc); stopping what it started"
        down
    fi
}

up() {
    local need p t0 sentinels=()
    for need in redis-server redis-cli timeout ss; do
        command -v "$need" >/dev/null || die "$need not found (run scripts/ensure-redis.sh for redis)"
    done
    [ -z "$(ls -A "$STATE" 2>/dev/null)" ] || die "$STATE is not empty: is a setup up? run down first"
    for p in $(all_ports); do
        [ -z "$(ss -Hltn "sport = :$p")" ] || die "port $p is in use: choose another BASE_PORT"
    done
    t0=$(ms)
    mkdir -p "$STATE"
    trap cleanup_failed_up EXIT
    mkdir -p "$(node_dir "$MASTER_PORT")" "$(node_dir "$REPLICA_PORT")"
    data_conf "$MASTER_PORT" >"$(node_dir "$MASTER_PORT")/redis.conf"
    { data_conf "$REPLICA_PORT"; echo "replicaof $BIND_IP $MASTER_PORT"; } >"$(node_dir "$REPLICA_PORT")/redis.conf"
    launch "$MASTER_PORT"
    launch "$REPLICA_PORT"
    for p in $SENTINEL_PORTS; do
        mkdir -p "$(node_dir "$p")"
        sentinel_conf "$p" >"$(node_dir "$p")/sentinel.conf"
        launch "$p"
        sentinels+=("$BIND_IP:$p")
    done
    # sentinels find the replica and each other through hellos every 2 s
    retry 30 converged || die "sentinels did not converge within 30 s"
    local IFS=,
    cat >"$ENV_FILE" <<EOF
RPR_REDIS_URL=redis+sentinel://${sentinels[*]}/$MASTER_NAME
SENTINEL_ADDRS=${sentinels[*]}
SENTINEL_MASTER_NAME=$MASTER_NAME
REDIS_MASTER_ADDR=$BIND_IP:$MASTER_PORT
REDIS_REPLICA_ADDR=$BIND_IP:$REPLICA_PORT
BIND_IP=$BIND_IP
BASE_PORT=$BASE_PORT
RPR_STATE_DIR=$STATE
EOF
    trap - EXIT
    cat "$ENV_FILE"
    log "up in $(($(ms) - t0)) ms: master $BIND_IP:$MASTER_PORT, sentinels ${sentinels[*]}"
}

down() {
    local p dir pid pids=() dirs=() i
    # sentinels first: no failover while the data nodes go away
    for p in $SENTINEL_PORTS $REPLICA_PORT $MASTER_PORT; do
        dir=$(node_dir "$p")
        pid=$(recorded_pid "$p")
        is_ours "$pid" "$dir" || continue
        kill -TERM "$pid" 2>/dev/null || true
        kill -CONT "$pid" 2>/dev/null || true # in case it was left frozen
        pids+=("$pid") dirs+=("$dir")
    done
    for i in "${!pids[@]}"; do
        retry 5 negate is_ours "${pids[i]}" "${dirs[i]}" || kill -KILL "${pids[i]}" 2>/dev/null || true
    done
    for p in $(all_ports); do rm -rf -- "$(node_dir "$p")"; done
    rm -f -- "$ENV_FILE"
    rmdir -- "$STATE" 2>/dev/null || true
}

check_port() {
    local p
    for p in $(all_ports); do [ "$p" != "$1" ] || return 0; done
    die "port $1 is not part of the setup in $STATE ($(all_ports))"
}

load_state
set_ports
case ${1:-} in
up) up ;;
down) down ;;
env) [ -f "$ENV_FILE" ] || die "no setup in $STATE"; cat "$ENV_FILE" ;;
master) agreed_master || die "the sentinels do not agree on a master that answers ROLE master" ;;
kill)
    check_port "${2:?usage: $0 kill PORT [SIG]}"
    signal_node "$2" "${3:-KILL}"
    ;;
start)
    check_port "${2:?usage: $0 start PORT}"
    launch "$2"
    ;;
failover)
    retry "${2:-30}" agreed_master >/dev/null || die "no agreed master after ${2:-30} s"
    agreed_master
    ;;
*)
    echo "usage: RPR_STATE_DIR=dir $0 up|down|env|master|kill PORT [SIG]|start PORT|failover [SECONDS]" >&2
    exit 2
    ;;
esac
