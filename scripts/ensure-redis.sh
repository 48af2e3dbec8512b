#!/usr/bin/env bash
# ensure-redis.sh - make sure redis-server and redis-cli are installed, and
# tmux (the `rpr top` test runs it in a terminal, cmd/rpr/top_test.go).
#
# The tests start their own redis-server processes (internal/redistest,
# scripts/netns-sites.sh); they only need the binaries. This script is
# idempotent and is the first step of `make test`:
#
#   - all binaries on PATH: print the version, exit 0, change nothing;
#   - otherwise install what is missing of Debian's redis-server,
#     redis-tools and tmux with apt-get (as root, or through sudo when that
#     is available);
#   - if the package's postinst started the system redis service and it was
#     not running before, stop it again (only then: a service somebody else
#     runs is left alone). No process is ever killed by name or by PID here.
set -euo pipefail

log() { echo "ensure-redis: $*" >&2; }
die() { log "$*"; exit 1; }

have_redis() { command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; }

PKGS=()
have_redis || PKGS+=(redis-server redis-tools)
command -v tmux >/dev/null 2>&1 || PKGS+=(tmux)
if [ ${#PKGS[@]} -eq 0 ]; then
    redis-server --version
    exit 0
fi

# Who runs the privileged commands.
SUDO=()
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 ||
        die "${PKGS[*]} not installed and this is not root and sudo is missing; install them yourself: apt-get install ${PKGS[*]}"
    # Without a terminal a password prompt would fail anyway: fail fast.
    if [ -t 0 ]; then SUDO=(sudo); else SUDO=(sudo -n); fi
fi
command -v apt-get >/dev/null 2>&1 ||
    die "${PKGS[*]} not installed and apt-get is missing (not Debian?); install them yourself (redis-server 7)"

# Is the system redis service running? Only systemd (when it is PID 1) and
# SysV `service` are consulted; in a container without an init neither
# reports anything and nothing needs stopping.
use_systemd() { [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }
service_running() {
    if use_systemd; then
        systemctl is-active --quiet redis-server.service 2>/dev/null
    elif command -v service >/dev/null 2>&1 && [ -x /etc/init.d/redis-server ]; then
        service redis-server status >/dev/null 2>&1
    else
        return 1
    fi
}

was_running=no
if service_running; then was_running=yes; fi

log "not found: installing Debian's ${PKGS[*]}"
"${SUDO[@]}" apt-get update -q >&2 || log "apt-get update failed; trying the install with the lists we have"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${PKGS[@]}" >&2

if [ "$was_running" = no ] && service_running; then
    log "the package install started the system redis service; stopping it (tests start their own)"
    if use_systemd; then
        "${SUDO[@]}" systemctl stop redis-server.service || log "could not stop redis-server.service"
    else
        "${SUDO[@]}" service redis-server stop || log "could not stop the redis-server service"
    fi
fi

have_redis || die "apt-get install finished but redis-server or redis-cli is still not on PATH"
command -v tmux >/dev/null 2>&1 || die "apt-get install finished but tmux is still not on PATH"
redis-server --version
