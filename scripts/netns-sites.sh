#!/usr/bin/env bash
# netns-sites.sh - the two-network topology rpr exists for, on one machine.
#
# Three network namespaces (root needed, no containers):
#
#   [siteA] eth0 10.77.1.2/24 ==veth== vethA 10.77.1.1 [hub] 10.77.2.1 vethB ==veth== eth0 10.77.2.2/24 [siteB]
#                                             lo 10.77.0.1/32 (the hub VIP)
#
# A redis-server runs in the hub and listens on 10.77.1.1, 10.77.2.1, the VIP
# and the hub's 127.0.0.1. Each site has one route: a /32 to the VIP through
# its own link. Neither site has a default route or a route to the other
# site's subnet, and the hub does not forward (ip_forward=0), so siteA and
# siteB cannot reach each other while both reach the hub's Redis.
#
# Commands:
#   up                 build it, start the hub redis, print KEY=VALUE lines
#                      (also written to $RPR_STATE_DIR/env); logs go to stderr
#   down               end the hub redis and every process still inside our
#                      namespaces (by PID), delete the namespaces we created,
#                      remove our files; safe to run twice or after a failed up
#   check              prove isolation and reachability (exit 1 on any FAIL)
#   exec SITE CMD...   run CMD inside SITE (= ip netns exec NS CMD...)
#   cut SITE           silent partition: the hub side of SITE's link goes down
#   heal SITE          undo cut, then wait until SITE reaches the hub redis again
#   env                print the KEY=VALUE lines of a running topology
# SITE is a, b or hub (siteA, siteB and the configured names work too).
#
# Environment (read by `up`; later commands take the names from the state dir):
#   RPR_STATE_DIR     state dir, one per topology (default /tmp/rpr-netns)
#   NS_A NS_B NS_HUB  namespace names (default siteA siteB hub; at most 15
#                     chars). Give each concurrent topology its own names.
#   REDIS_PORT        port of the hub redis (default 6379)
#   CHECK_PORT        port of the throwaway listener `check` starts in siteB (7777)
#
# Example:
#   eval "$(RPR_STATE_DIR=/tmp/ns scripts/netns-sites.sh up)"
#   RPR_STATE_DIR=/tmp/ns scripts/netns-sites.sh check
#   RPR_STATE_DIR=/tmp/ns scripts/netns-sites.sh exec b greeter-server --redis "$REDIS_URL_SITE_B"
#   RPR_STATE_DIR=/tmp/ns scripts/netns-sites.sh down
set -euo pipefail

STATE=${RPR_STATE_DIR:-/tmp/rpr-netns}
NS_A=${NS_A:-siteA}
NS_B=${NS_B:-siteB}
NS_HUB=${NS_HUB:-hub}
REDIS_PORT=${REDIS_PORT:-6379}
CHECK_PORT=${CHECK_PORT:-7777}

# Fixed address plan. Every topology lives in its own namespaces, so two of
# them never see each other's addresses.
HUB_SIDE_A=10.77.1.1 SITE_A_IP=10.77.1.2
HUB_SIDE_B=10.77.2.1 SITE_B_IP=10.77.2.2
HUB_VIP=10.77.0.1

REDIS_DIR=$STATE/hub-redis # the hub redis' cwd: identifies it in /proc
NS_LIST=$STATE/namespaces  # namespaces this topology created: the only ones down deletes
ENV_FILE=$STATE/env

log() { echo "netns-sites: $*" >&2; }
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
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# is_ours PID DIR: PID is alive and its cwd is DIR. False for a zombie or a
# recycled PID, so a stale pid file never makes us signal a stranger.
is_ours() { [ -n "$1" ] && [ "$(readlink "/proc/$1/cwd" 2>/dev/null)" = "$2" ]; }

# end_pid PID DIR: SIGTERM (and SIGCONT, in case it was stopped), SIGKILL after 5 s
end_pid() {
    is_ours "$1" "$2" || return 0
    kill -TERM "$1" 2>/dev/null || true
    kill -CONT "$1" 2>/dev/null || true
    retry 5 negate is_ours "$1" "$2" || kill -KILL "$1" 2>/dev/null || true
}

# After up, the state dir is the truth about names and ports.
load_state() {
    [ -f "$ENV_FILE" ] || return 0
    local key val
    while IFS='=' read -r key val; do
        case $key in
        NS_A) NS_A=$val ;;
        NS_B) NS_B=$val ;;
        NS_HUB) NS_HUB=$val ;;
        REDIS_PORT) REDIS_PORT=$val ;;
        esac
    done <"$ENV_FILE"
}

# ns_of SITE: the namespace name for a, b, hub (or a literal name of ours)
ns_of() {
    case $1 in
    a | A | siteA | "$NS_A") echo "$NS_A" ;;
    b | B | siteB | "$NS_B") echo "$NS_B" ;;
    hub | "$NS_HUB") echo "$NS_HUB" ;;
    *) die "unknown site '$1' (want a, b or hub)" ;;
    esac
}

# redis_pid NS HOST: process_id of the redis on HOST:REDIS_PORT as seen from NS
redis_pid() {
    local info
    info=$(in_ns "$1" timeout 3 redis-cli -h "$2" -p "$REDIS_PORT" info server 2>/dev/null) || return 0
    info=${info#*process_id:}
    echo "${info%%$'\r'*}"
}
redis_ping() { [ "$(in_ns "$1" timeout 3 redis-cli -h "$2" -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }
# tcp_connects NS HOST PORT: a TCP connection from NS opens within 2 s
tcp_connects() { in_ns "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; }

# hub_up PID: both sites get INFO from *our* redis (PONG alone could come
# from some other server)
hub_up() { [ "$(redis_pid "$NS_A" "$HUB_SIDE_A")" = "$1" ] && [ "$(redis_pid "$NS_B" "$HUB_SIDE_B")" = "$1" ]; }
hub_up_or_dead() { hub_up "$1" || ! is_ours "$1" "$REDIS_DIR"; }

cleanup_failed_up() {
    local rc=$?
    if [ "$rc" != 0 ]; then
        log "up failed (exit $rc); tearing down what it built"
        down
    fi
}

up() {
    [ "$(id -u)" = 0 ] || die "up needs root (ip netns add)"
    local need
    for need in ip redis-server redis-cli timeout; do
        command -v "$need" >/dev/null || die "$need not found (run scripts/ensure-redis.sh for redis)"
    done
    [ -z "$(ls -A "$STATE" 2>/dev/null)" ] || die "$STATE is not empty: is a topology up? run down first"
    local ns pid t0
    for ns in "$NS_A" "$NS_B" "$NS_HUB"; do
        [ ${#ns} -le 15 ] || die "namespace name '$ns' is longer than 15 characters"
        [ ! -e "/run/netns/$ns" ] || die "namespace $ns exists already and is not ours: choose other NS_A/NS_B/NS_HUB"
    done
    if [ "$NS_A" = "$NS_B" ] || [ "$NS_A" = "$NS_HUB" ] || [ "$NS_B" = "$NS_HUB" ]; then
        die "NS_A, NS_B and NS_HUB must differ"
    fi
    t0=$(ms)
    mkdir -p "$REDIS_DIR"
    trap cleanup_failed_up EXIT

    for ns in "$NS_HUB" "$NS_A" "$NS_B"; do
        ip netns add "$ns"
        echo "$ns" >>"$NS_LIST"
        ip -n "$ns" link set lo up
    done
    # Create each veth pair inside the site namespace and move the peer to
    # the hub: the root namespace never sees these interface names.
    ip -n "$NS_A" link add eth0 type veth peer name vethA netns "$NS_HUB"
    ip -n "$NS_B" link add eth0 type veth peer name vethB netns "$NS_HUB"
    ip -n "$NS_A" addr add "$SITE_A_IP/24" dev eth0
    ip -n "$NS_B" addr add "$SITE_B_IP/24" dev eth0
    ip -n "$NS_HUB" addr add "$HUB_SIDE_A/24" dev vethA
    ip -n "$NS_HUB" addr add "$HUB_SIDE_B/24" dev vethB
    ip -n "$NS_HUB" addr add "$HUB_VIP/32" dev lo
    ip -n "$NS_A" link set eth0 up
    ip -n "$NS_B" link set eth0 up
    ip -n "$NS_HUB" link set vethA up
    ip -n "$NS_HUB" link set vethB up
    ip -n "$NS_A" route add "$HUB_VIP/32" via "$HUB_SIDE_A"
    ip -n "$NS_B" route add "$HUB_VIP/32" via "$HUB_SIDE_B"
    # Forwarding can be inherited from the root namespace: switch it off.
    in_ns "$NS_HUB" sh -c 'echo 0 >/proc/sys/net/ipv4/ip_forward; echo 0 >/proc/sys/net/ipv6/conf/all/forwarding'

    cat >"$REDIS_DIR/redis.conf" <<EOF
# hub redis of scripts/netns-sites.sh
port $REDIS_PORT
bind 127.0.0.1 $HUB_SIDE_A $HUB_SIDE_B $HUB_VIP
# No password: protected-mode yes would turn the sites away (they are not loopback).
protected-mode no
dir $REDIS_DIR
save ""
appendonly no
# "yes" rather than "local": site clients are not local, fault tests use DEBUG SLEEP.
enable-debug-command yes
EOF
    # `exec` twice (subshell -> ip netns exec -> redis-server), so $! is the
    # server's own PID and its cwd is REDIS_DIR from the first instant.
    (cd "$REDIS_DIR" && exec ip netns exec "$NS_HUB" redis-server "$REDIS_DIR/redis.conf" \
        >"$REDIS_DIR/redis.log" 2>&1 </dev/null) &
    pid=$!
    echo "$pid" >"$REDIS_DIR/pid"
    retry 15 hub_up_or_dead "$pid" || true
    hub_up "$pid" || die "hub redis (pid $pid) not reachable from both sites: $(tail -n 5 "$REDIS_DIR/redis.log")"

    cat >"$ENV_FILE" <<EOF
REDIS_ADDR_SITE_A=$HUB_SIDE_A:$REDIS_PORT
REDIS_ADDR_SITE_B=$HUB_SIDE_B:$REDIS_PORT
REDIS_ADDR_VIP=$HUB_VIP:$REDIS_PORT
REDIS_URL_SITE_A=redis://$HUB_SIDE_A:$REDIS_PORT/0
REDIS_URL_SITE_B=redis://$HUB_SIDE_B:$REDIS_PORT/0
REDIS_URL_VIP=redis://$HUB_VIP:$REDIS_PORT/0
REDIS_PID=$pid
REDIS_PORT=$REDIS_PORT
SITE_A_IP=$SITE_A_IP
SITE_B_IP=$SITE_B_IP
HUB_VIP=$HUB_VIP
NS_A=$NS_A
NS_B=$NS_B
NS_HUB=$NS_HUB
RPR_STATE_DIR=$STATE
EOF
    trap - EXIT
    cat "$ENV_FILE"
    log "up in $(($(ms) - t0)) ms: $NS_A and $NS_B reach redis (pid $pid) in $NS_HUB"
}

# pids_in NS: processes whose network namespace is NS, minus this script
pids_in() {
    local p
    for p in $(ip netns pids "$1" 2>/dev/null); do
        [ "$p" = "$$" ] || [ "$p" = "${BASHPID:-}" ] || echo "$p"
    done
}

ns_empty() { [ -z "$(pids_in "$1")" ]; }

down() {
    local ns pids
    end_pid "$(cat "$REDIS_DIR/pid" 2>/dev/null || true)" "$REDIS_DIR"
    if [ -f "$NS_LIST" ]; then
        while read -r ns; do
            [ -n "$ns" ] || continue
            # A namespace outlives `ip netns del` while processes are in it:
            # end what was left running inside it (only in OUR namespaces).
            mapfile -t pids < <(pids_in "$ns")
            if [ ${#pids[@]} -gt 0 ]; then
                log "ending processes left in $ns: ${pids[*]}"
                kill -TERM "${pids[@]}" 2>/dev/null || true
                kill -CONT "${pids[@]}" 2>/dev/null || true
                retry 5 ns_empty "$ns" || {
                    mapfile -t pids < <(pids_in "$ns")
                    [ ${#pids[@]} -eq 0 ] || kill -KILL "${pids[@]}" 2>/dev/null || true
                }
            fi
            ip netns del "$ns" 2>/dev/null || true
        done <"$NS_LIST"
    fi
    rm -rf -- "$REDIS_DIR"
    rm -f -- "$ENV_FILE" "$NS_LIST"
    rmdir -- "$STATE" 2>/dev/null || true
}

# expect reachable|blocked WHAT CMD...: run CMD, print ok/FAIL, remember failures
expect() {
    local want=$1 what=$2 got=blocked
    shift 2
    if "$@" >/dev/null 2>&1; then got=reachable; fi
    if [ "$got" = "$want" ]; then
        echo "ok   $want: $what"
    else
        echo "FAIL $got, want $want: $what"
        check_failed=1
    fi
}

check() {
    [ -f "$ENV_FILE" ] || die "no topology in $STATE: run up first"
    check_failed=
    local dir pid fwd
    expect reachable "$NS_A -> hub redis $HUB_SIDE_A:$REDIS_PORT" redis_ping "$NS_A" "$HUB_SIDE_A"
    expect reachable "$NS_B -> hub redis $HUB_SIDE_B:$REDIS_PORT" redis_ping "$NS_B" "$HUB_SIDE_B"
    expect reachable "$NS_A -> hub redis VIP $HUB_VIP:$REDIS_PORT" redis_ping "$NS_A" "$HUB_VIP"
    expect reachable "$NS_B -> hub redis VIP $HUB_VIP:$REDIS_PORT" redis_ping "$NS_B" "$HUB_VIP"
    fwd=$(in_ns "$NS_HUB" cat /proc/sys/net/ipv4/ip_forward)
    if [ "$fwd" = 0 ]; then echo "ok   $NS_HUB does not forward (ip_forward=0)"; else
        echo "FAIL $NS_HUB forwards (ip_forward=$fwd)"
        check_failed=1
    fi

    # Something to connect to in siteB: a throwaway redis-server, ended by PID below.
    dir=$(mktemp -d "${TMPDIR:-/tmp}/netns-check.XXXXXX")
    (cd "$dir" && exec ip netns exec "$NS_B" redis-server --port "$CHECK_PORT" --bind "$SITE_B_IP" \
        --protected-mode no --save '' --appendonly no --dir "$dir" >"$dir/log" 2>&1 </dev/null) &
    pid=$!
    # shellcheck disable=SC2064 # expand now: these are the values to clean up
    trap "ip -n '$NS_A' route del '$SITE_B_IP/32' 2>/dev/null || true; end_pid '$pid' '$dir'; rm -rf -- '$dir'" EXIT

    expect reachable "$NS_B -> its own listener $SITE_B_IP:$CHECK_PORT" retry 5 tcp_connects "$NS_B" "$SITE_B_IP" "$CHECK_PORT"
    expect blocked "$NS_A -> $NS_B listener $SITE_B_IP:$CHECK_PORT (no route)" tcp_connects "$NS_A" "$SITE_B_IP" "$CHECK_PORT"
    expect blocked "$NS_A -> hub's $NS_B side $HUB_SIDE_B:$REDIS_PORT (no route)" tcp_connects "$NS_A" "$HUB_SIDE_B" "$REDIS_PORT"
    expect blocked "$NS_B -> hub's $NS_A side $HUB_SIDE_A:$REDIS_PORT (no route)" tcp_connects "$NS_B" "$HUB_SIDE_A" "$REDIS_PORT"
    # Second wall: even with a route through the hub, the hub does not forward.
    ip -n "$NS_A" route add "$SITE_B_IP/32" via "$HUB_SIDE_A"
    expect blocked "$NS_A -> $NS_B via a route through the hub (hub does not forward)" \
        tcp_connects "$NS_A" "$SITE_B_IP" "$CHECK_PORT"
    ip -n "$NS_A" route del "$SITE_B_IP/32"
    if command -v ping >/dev/null; then
        expect reachable "$NS_A ping hub $HUB_SIDE_A" in_ns "$NS_A" ping -c1 -W1 "$HUB_SIDE_A"
        expect blocked "$NS_A ping $NS_B $SITE_B_IP" in_ns "$NS_A" ping -c1 -W1 "$SITE_B_IP"
        expect blocked "$NS_B ping $NS_A $SITE_A_IP" in_ns "$NS_B" ping -c1 -W1 "$SITE_A_IP"
    fi
    end_pid "$pid" "$dir"
    rm -rf -- "$dir"
    trap - EXIT
    [ -z "$check_failed" ] || die "check failed"
}

link() { # link SITE up|down: the hub side of SITE's veth
    local ns
    ns=$(ns_of "$1")
    case $ns in
    "$NS_A") ip -n "$NS_HUB" link set vethA "$2" ;;
    "$NS_B") ip -n "$NS_HUB" link set vethB "$2" ;;
    *) die "cut/heal take a site (a or b), not $1" ;;
    esac
}

heal() {
    local ns host
    link "$1" up
    ns=$(ns_of "$1")
    if [ "$ns" = "$NS_A" ]; then host=$HUB_SIDE_A; else host=$HUB_SIDE_B; fi
    retry 10 redis_ping "$ns" "$host" || die "$ns does not reach the hub redis 10 s after heal"
}

load_state
case ${1:-} in
up) up ;;
down) down ;;
check) check ;;
env) [ -f "$ENV_FILE" ] || die "no topology in $STATE"; cat "$ENV_FILE" ;;
exec)
    [ $# -ge 3 ] || die "usage: $0 exec SITE CMD..."
    ns=$(ns_of "$2")
    shift 2
    exec ip netns exec "$ns" "$@"
    ;;
cut) link "${2:?usage: $0 cut SITE}" down ;;
heal) heal "${2:?usage: $0 heal SITE}" ;;
*)
    echo "usage: RPR_STATE_DIR=dir $0 up|down|check|env|exec SITE CMD...|cut SITE|heal SITE" >&2
    exit 2
    ;;
esac
