# lib.sh - shell functions shared by redis-cluster.sh and redis-sentinel.sh.
# Source it after setting PROG (the log prefix), STATE (the state dir),
# ENV_FILE and BIND_IP. Every process lives in $STATE/node-PORT: its config
# (redis.conf, or sentinel.conf for a sentinel), redis.log and pid file.
# shellcheck shell=bash

log() { echo "$PROG: $*" >&2; }
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

node_dir() { echo "$STATE/node-$1"; }
# is_ours PID DIR: PID is alive and its cwd is DIR (redis chdir()s to its
# `dir`). False for a zombie or a recycled PID, so a stale pid file never
# makes us signal a stranger.
is_ours() { [ -n "$1" ] && [ "$(readlink "/proc/$1/cwd" 2>/dev/null)" = "$2" ]; }
recorded_pid() { cat "$(node_dir "$1")/pid" 2>/dev/null || true; }

# cli PORT ARGS...: one redis-cli call. redis-cli exits 0 on error replies,
# so callers look at what it printed.
cli() { local port=$1; shift; timeout 5 redis-cli -h "$BIND_IP" -p "$port" "$@"; }
# info_field TEXT NAME: the value of NAME:value in an INFO-style reply
info_field() { sed -n "s/^$2:\([^\r]*\)\r\{0,1\}\$/\1/p" <<<"$1" | head -n 1; }

# running_pid PORT: the process_id INFO reports on PORT (empty if none answers)
running_pid() { info_field "$(cli "$1" INFO server 2>/dev/null || true)" process_id; }
# answers PORT PID: the server on PORT is the process we started, not
# another one that won the port (PONG alone cannot tell)
answers() { [ "$(running_pid "$1")" = "$2" ]; }
answers_or_dead() { answers "$1" "$2" || ! is_ours "$2" "$(node_dir "$1")"; }

# require_tools: what up needs is on PATH
require_tools() {
    local need
    for need in redis-server redis-cli timeout ss; do
        command -v "$need" >/dev/null || die "$need not found (run scripts/ensure-redis.sh for redis)"
    done
}
# port_free PORT: nothing listens on PORT
port_free() { [ -z "$(ss -Hltn "sport = :$1")" ]; }

# launch PORT: start the process of PORT in its dir (a sentinel if it has a
# sentinel.conf) and wait until it answers
launch() {
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

# down_ports PORT...: stop the processes of PORT... in that order (SIGTERM,
# SIGKILL after 5 s), by recorded PID and only while it is ours; remove
# their dirs, the env file and the state dir. Safe to run twice.
down_ports() {
    local p dir pid pids=() dirs=() i
    for p in "$@"; do
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
    for p in "$@"; do rm -rf -- "$(node_dir "$p")"; done
    rm -f -- "$ENV_FILE"
    rmdir -- "$STATE" 2>/dev/null || true
}

# cleanup_failed_up: the EXIT trap of up; calls the script's down
cleanup_failed_up() {
    local rc=$?
    if [ "$rc" != 0 ]; then
        log "up failed (exit $rc); stopping what it started"
        down
    fi
}

# check_port PORT PORTS...: PORT is one of PORTS
check_port() {
    local want=$1 p
    shift
    for p; do [ "$p" != "$want" ] || return 0; done
    die "port $want is not part of the setup in $STATE ($*)"
}
