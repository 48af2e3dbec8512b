#!/usr/bin/env bash
# redis-cluster.sh - a local Redis Cluster (3 masters, 3 replicas) to run
# rpr against, the shell twin of redistest.StartCluster.
#
# Commands:
#   up               start six nodes on BASE_PORT..BASE_PORT+5, join them
#                    into one cluster, wait until it is healthy, print
#                    KEY=VALUE lines (also written to $RPR_STATE_DIR/env);
#                    logs go to stderr. If up fails half-way it tears down
#                    what it started.
#   down             stop the nodes up started (SIGTERM, SIGKILL after 5 s),
#                    by their recorded PID and only while /proc/PID/cwd is
#                    still that node's dir; remove our files. Safe to run
#                    twice or after a failed up.
#   env              print the KEY=VALUE lines of a running cluster
#   kill PORT [SIG]  send SIG (default KILL: a crash) to the node on PORT;
#                    STOP and CONT freeze and thaw it
#   start PORT       start a killed node again; nodes.conf makes it rejoin
#                    (a former master comes back as a replica)
#   wait [SECONDS]   wait until the cluster is healthy again (default 30)
#
# Environment (read by up; later commands take ports from the state dir):
#   RPR_STATE_DIR  state dir, one per running cluster (default /tmp/rpr-cluster)
#   BIND_IP        address the nodes listen on and announce (default 127.0.0.1);
#                  clients are redirected to it, so they must reach it
#   BASE_PORT      first node port (default 7101); the cluster bus of each
#                  node is its port+10000, which must be free as well
#   NODE_TIMEOUT   cluster-node-timeout in ms (default 2000): a master that
#                  is unreachable this long is failed over (after ~2x this)
#
# Example:
#   eval "$(RPR_STATE_DIR=/tmp/cl scripts/redis-cluster.sh up)"
#   go run ./cmd/rpr demo --redis "$RPR_REDIS_URL"
#   RPR_STATE_DIR=/tmp/cl scripts/redis-cluster.sh kill 7101   # fail a master over
#   RPR_STATE_DIR=/tmp/cl scripts/redis-cluster.sh down
set -euo pipefail

STATE=${RPR_STATE_DIR:-/tmp/rpr-cluster}
BIND_IP=${BIND_IP:-127.0.0.1}
BASE_PORT=${BASE_PORT:-7101}
NODE_TIMEOUT=${NODE_TIMEOUT:-2000}
ENV_FILE=$STATE/env
NODES=6
MASTERS=3
PROG=redis-cluster
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# After up, the state dir is the truth about the address and ports.
load_state() {
    [ -f "$ENV_FILE" ] || return 0
    local key val
    while IFS='=' read -r key val; do
        case $key in
        BIND_IP) BIND_IP=$val ;;
        BASE_PORT) BASE_PORT=$val ;;
        esac
    done <"$ENV_FILE"
}
ports() { seq "$BASE_PORT" $((BASE_PORT + NODES - 1)); }

# expect_ok PORT ARGS...: the command must answer OK
expect_ok() {
    local out
    out=$(cli "$@" 2>&1) || true
    [ "$out" = OK ] || die "redis-cli -p $*: $out"
}

write_conf() { # write_conf PORT
    local dir
    dir=$(node_dir "$1")
    mkdir -p "$dir"
    cat >"$dir/redis.conf" <<EOF
# node of scripts/redis-cluster.sh
port $1
bind $BIND_IP
# no password here: protected-mode yes would refuse every non-loopback client
protected-mode no
dir $dir
save ""
appendonly no
# fault tests use DEBUG SLEEP; the setting cannot be changed at run time
enable-debug-command yes
# replicas start their first sync at once, not 5 s later
repl-diskless-sync-delay 0
cluster-enabled yes
# written by redis itself (node id, epochs, who serves what)
cluster-config-file nodes.conf
cluster-node-timeout $NODE_TIMEOUT
# the address clients are sent to (MOVED, CLUSTER SLOTS)
cluster-announce-ip $BIND_IP
EOF
}

# healthy: every node reports cluster_state:ok with all slots and all
# nodes, no node is flagged failing, there are 3 masters with slots and 3
# replicas, and each replica's link to its master is up
healthy() {
    local p out nodes masters replicas
    for p in $(ports); do
        out=$(printf 'CLUSTER INFO\nINFO replication\n' | cli "$p" 2>/dev/null) || return 1
        [ "$(info_field "$out" cluster_state)" = ok ] || return 1
        [ "$(info_field "$out" cluster_slots_ok)" = 16384 ] || return 1
        [ "$(info_field "$out" cluster_known_nodes)" = "$NODES" ] || return 1
        if [ "$(info_field "$out" role)" = slave ]; then
            [ "$(info_field "$out" master_link_status)" = up ] || return 1
        fi
        nodes=$(cli "$p" CLUSTER NODES 2>/dev/null) || return 1
        ! grep -qE ' [^ ]*(fail|handshake|noaddr)[^ ]* ' <<<"$nodes" || return 1
        masters=$(awk '$3 ~ /master/ && NF > 8' <<<"$nodes" | wc -l)
        replicas=$(awk '$3 ~ /slave/' <<<"$nodes" | wc -l)
        [ "$masters" = "$MASTERS" ] && [ "$replicas" = $((NODES - MASTERS)) ] || return 1
    done
}

# all_met: every node knows every other one, handshakes done
all_met() {
    local p nodes
    for p in $(ports); do
        nodes=$(cli "$p" CLUSTER NODES 2>/dev/null) || return 1
        [ "$(grep -c . <<<"$nodes")" = "$NODES" ] || return 1
        ! grep -qE 'handshake|noaddr' <<<"$nodes" || return 1
    done
}

# create: slots to the first three nodes, MEET, then each of the last
# three replicates one of the first three. The same steps as
# `redis-cli --cluster create` without its 1 s sleeps, every reply checked.
create() {
    local i p lo hi id all
    mapfile -t all < <(ports)
    for i in "${!all[@]}"; do
        # distinct epochs up front: no epoch collision to resolve later
        expect_ok "${all[i]}" CLUSTER SET-CONFIG-EPOCH $((i + 1))
    done
    for ((i = 0; i < MASTERS; i++)); do
        lo=$((i * 16384 / MASTERS))
        hi=$(((i + 1) * 16384 / MASTERS - 1))
        expect_ok "${all[i]}" CLUSTER ADDSLOTSRANGE "$lo" "$hi"
    done
    for p in "${all[@]:1}"; do
        expect_ok "${all[0]}" CLUSTER MEET "$BIND_IP" "$p"
    done
    retry 20 all_met || die "the nodes did not meet within 20 s"
    for ((i = MASTERS; i < NODES; i++)); do
        id=$(cli "${all[i - MASTERS]}" CLUSTER MYID)
        expect_ok "${all[i]}" CLUSTER REPLICATE "$id"
    done
}

up() {
    local p t0 addrs=()
    require_tools
    [ -z "$(ls -A "$STATE" 2>/dev/null)" ] || die "$STATE is not empty: is a cluster up? run down first"
    [ $((BASE_PORT + NODES - 1 + 10000)) -le 65535 ] || die "BASE_PORT $BASE_PORT too high: the bus ports (port+10000) must stay below 65536"
    for p in $(ports); do
        { port_free "$p" && port_free $((p + 10000)); } ||
            die "port $p or its bus port $((p + 10000)) is in use: choose another BASE_PORT"
    done
    t0=$(ms)
    mkdir -p "$STATE"
    trap cleanup_failed_up EXIT
    for p in $(ports); do
        write_conf "$p"
        launch "$p"
        addrs+=("$BIND_IP:$p")
    done
    create
    retry 30 healthy || die "cluster not healthy 30 s after create: $(cli "$BASE_PORT" CLUSTER INFO | head -n 3 | tr -d '\r')"
    local IFS=,
    cat >"$ENV_FILE" <<EOF
RPR_REDIS_URL=redis://${addrs[*]}
REDIS_CLUSTER_ADDRS=${addrs[*]}
BIND_IP=$BIND_IP
BASE_PORT=$BASE_PORT
NODE_TIMEOUT=$NODE_TIMEOUT
RPR_STATE_DIR=$STATE
EOF
    trap - EXIT
    cat "$ENV_FILE"
    log "up in $(($(ms) - t0)) ms: ${addrs[*]}"
}

down() {
    # shellcheck disable=SC2046 # ports prints one number per line
    down_ports $(ports)
}

load_state
case ${1:-} in
up) up ;;
down) down ;;
env) [ -f "$ENV_FILE" ] || die "no cluster in $STATE"; cat "$ENV_FILE" ;;
kill)
    # shellcheck disable=SC2046
    check_port "${2:?usage: $0 kill PORT [SIG]}" $(ports)
    signal_node "$2" "${3:-KILL}"
    ;;
start)
    # shellcheck disable=SC2046
    check_port "${2:?usage: $0 start PORT}" $(ports)
    [ -f "$(node_dir "$2")/redis.conf" ] || die "no node on port $2 in $STATE"
    launch "$2"
    ;;
wait) retry "${2:-30}" healthy || die "cluster not healthy after ${2:-30} s" ;;
*)
    echo "usage: RPR_STATE_DIR=dir $0 up|down|env|kill PORT [SIG]|start PORT|wait [SECONDS]" >&2
    exit 2
    ;;
esac
