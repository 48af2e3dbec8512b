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
PROG=redis-sentinel
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

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

# field_after TEXT NAME: the line after NAME in a flat field/value reply
field_after() { awk -v n="$2" 'prev == n { print; exit } { prev = $0 }' <<<"${1//$'\r'/}"; }

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

up() {
    local p t0 sentinels=()
    require_tools
    [ -z "$(ls -A "$STATE" 2>/dev/null)" ] || die "$STATE is not empty: is a setup up? run down first"
    for p in $(all_ports); do
        port_free "$p" || die "port $p is in use: choose another BASE_PORT"
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
    # sentinels first: no failover while the data nodes go away
    # shellcheck disable=SC2086 # word splitting wanted: lists of ports
    down_ports $SENTINEL_PORTS $REPLICA_PORT $MASTER_PORT
}

load_state
set_ports
case ${1:-} in
up) up ;;
down) down ;;
env) [ -f "$ENV_FILE" ] || die "no setup in $STATE"; cat "$ENV_FILE" ;;
master) agreed_master || die "the sentinels do not agree on a master that answers ROLE master" ;;
kill)
    # shellcheck disable=SC2046
    check_port "${2:?usage: $0 kill PORT [SIG]}" $(all_ports)
    signal_node "$2" "${3:-KILL}"
    ;;
start)
    # shellcheck disable=SC2046
    check_port "${2:?usage: $0 start PORT}" $(all_ports)
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
