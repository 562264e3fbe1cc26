#!/usr/bin/env bash
# netns-cluster.sh: a test "cluster" of N hosts made of Linux network namespaces.
#
# Tests run the ranks of a distributed program on N hosts so that nothing
# crosses hosts except over the (veth) network. Layout of cluster NAME:
#
#   NAME-sw   "switch" namespace holding bridge br0; port pK attaches host K.
#   NAME-hK   host K (K = 0..N-1): eth0 = 10.232.0.(K+1)/24, the peer of pK.
#
#   NAME-h0 [eth0] ==veth== [p0]-+
#   NAME-h1 [eth0] ==veth== [p1]-+- br0 (in NAME-sw)
#   ...
#
# The veth pairs are created directly inside the namespaces, so nothing is made
# or named in the root network namespace and several clusters (with different
# names but the same addresses) can exist at once. With --rate, a tbf qdisc
# limits both ends of every host link.
#
# Network namespaces share the hostname, /tmp and /dev/shm, so each host gets
# its own /tmp and /dev/shm: `exec` runs each command in a private mount
# namespace with /run/tpc-netns/NAME/hK/{tmp,shm} bind-mounted over them (all
# state lives on one tmpfs mounted at /run/tpc-netns/NAME, so removal is clean).
# Commands on the same host share them; different hosts do not. Because the
# hostname is shared, hosts are known by index K (and address), not by name.
#
# Caveat: /tmp is hidden inside `exec`, so the command and its files must not
# live under /tmp (use e.g. the build directory). Needs root.
set -euo pipefail

STATE_ROOT=/run/tpc-netns
SUBNET=10.232.0
SELF=$(readlink -f "$0")

usage() {
  cat <<'EOF'
usage: netns-cluster.sh SUBCOMMAND [ARGS] [--name NAME]
  up N [--rate RATE] [--ttl SECONDS]  make hosts NAME-h0..NAME-h{N-1} (N 1..16)
                                      and switch NAME-sw (replaces an old NAME);
                                      --rate: tbf on both ends of every link,
                                      e.g. 10gbit, 1gbit, 100mbit (8kbit..1000gbit);
                                      --ttl: run `down` after SECONDS
  exec K -- CMD ARGS...               run CMD on host K (own /tmp, /dev/shm;
                                      CMD must not live under /tmp)
  addr K                              print host K's address (10.232.0.(K+1))
  cut K | heal K                      take host K's link down / up
  stop K | cont K                     SIGSTOP / SIGCONT every process on host K
  pids                                print pids still in the cluster's namespaces
  down                                kill everything, remove namespaces and state
  check                               exit 0 if namespaces work here, else print
                                      the reason and exit 1
  --name NAME   cluster name, [a-z0-9-]{1,12}, default tpc
EOF
}

die() { echo "netns-cluster: $*" >&2; exit 1; }
usage_err() { echo "netns-cluster: $*" >&2; echo "(see --help)" >&2; exit 2; }

# Namespaces of cluster $NAME that exist now.
cluster_ns() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NAME}-(sw|h[0-9]+)$" || true
}

# Validate host index $1 against the size recorded by `up`.
host_index() {
  [[ $1 =~ ^[0-9]+$ ]] || usage_err "bad host index '$1' (want a number)"
  [[ -r $STATE/n ]] || die "cluster '$NAME' is not up"
  local n; n=$(<"$STATE/n")
  (( 10#$1 < n )) || usage_err "bad host index '$1' (cluster '$NAME' has $n hosts: 0..$((n - 1)))"
  echo $((10#$1))
}

cmd_down() {
  local ns pid pids left i
  if [[ -r $STATE/watchdog ]]; then          # kill the watchdog (and its sleep)
    pid=$(<"$STATE/watchdog")
    if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
        grep -q -- "_watchdog $NAME "; then
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  pids=$(cmd_pids)
  if [[ -n $pids ]]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      left=$(cmd_pids); [[ -z $left ]] && break; sleep 0.1
    done
    [[ -z $left ]] || echo "netns-cluster: still running after SIGKILL: ${left//$'\n'/ }" >&2
  fi
  for ns in $(cluster_ns); do ip netns delete "$ns" || echo "netns-cluster: cannot delete $ns" >&2; done
  if mountpoint -q "$STATE" 2>/dev/null; then
    umount "$STATE" 2>/dev/null || umount -l "$STATE"
  fi
  if [[ -d $STATE ]]; then rm -rf "$STATE"; fi
  rmdir "$STATE_ROOT" 2>/dev/null || true
}

cmd_pids() {
  local ns
  for ns in $(cluster_ns); do ip netns pids "$ns" 2>/dev/null || true; done | sort -nu
}

# step WHAT CMD...: run CMD; on failure undo everything and name WHAT.
step() {
  local what=$1 err; shift
  if ! err=$("$@" 2>&1); then
    cmd_down >/dev/null 2>&1 || true
    die "up: failed to $what: ${err//$'\n'/ }"
  fi
}

cmd_up() {
  local n=$1 rate=$2 ttl=$3 k ns burst token
  if ! [[ $n =~ ^[0-9]+$ ]] || (( 10#$n < 1 || 10#$n > 16 )); then usage_err "bad host count '$n' (want 1..16)"; fi
  n=$((10#$n))
  if [[ -n $rate ]]; then
    [[ ${rate,,} =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)$ ]] || usage_err "bad --rate '$rate' (e.g. 10gbit, 1gbit, 100mbit)"
    rate=${rate,,}
    # burst: at least rate/250 bytes (4 ms worth) and at least 64 KiB (a GSO packet)
    burst=$(awk -v r="$rate" 'BEGIN { m = 1; if (r ~ /kbit$/) m = 1e3; else if (r ~ /mbit$/) m = 1e6;
      else if (r ~ /gbit$/) m = 1e9; sub(/[a-z]+$/, "", r); b = r * m / 8 / 250;
      if (r * m < 8000 || r * m > 1e12) b = -1; else if (b < 65536) b = 65536; printf "%.0f\n", b }')
    (( burst > 0 )) || usage_err "bad --rate '$rate' (want 8kbit..1000gbit)"
  fi
  if [[ -n $ttl ]]; then
    if ! [[ $ttl =~ ^[0-9]+$ ]] || (( 10#$ttl == 0 )); then usage_err "bad --ttl '$ttl' (want seconds > 0)"; fi
  fi
  [[ -n $(cluster_ns) || -e $STATE ]] && cmd_down
  # (retry once: a concurrent `down` of another cluster may rmdir $STATE_ROOT)
  mkdir -p "$STATE" 2>/dev/null || step "make $STATE" mkdir -p "$STATE"
  step "mount tmpfs on $STATE" mount -t tmpfs -o size=2g,mode=755 "tpc-netns-$NAME" "$STATE"
  step "create namespace $NAME-sw" ip netns add "$NAME-sw"
  step "set up lo in $NAME-sw" ip -n "$NAME-sw" link set lo up
  step "create bridge br0 in $NAME-sw" ip -n "$NAME-sw" link add br0 type bridge
  step "set up br0 in $NAME-sw" ip -n "$NAME-sw" link set br0 up
  for ((k = 0; k < n; k++)); do
    ns=$NAME-h$k
    step "make per-host dirs for $ns" mkdir -m 1777 -p "$STATE/h$k/tmp" "$STATE/h$k/shm"
    step "chmod per-host dirs for $ns" chmod 1777 "$STATE/h$k/tmp" "$STATE/h$k/shm"
    step "create namespace $ns" ip netns add "$ns"
    step "set up lo in $ns" ip -n "$ns" link set lo up
    step "create veth eth0/p$k for $ns" ip -n "$ns" link add eth0 type veth peer name "p$k" netns "$NAME-sw"
    step "attach p$k to br0" ip -n "$NAME-sw" link set "p$k" master br0
    step "set address on eth0 in $ns" ip -n "$ns" addr add "$SUBNET.$((k + 1))/24" dev eth0
    if [[ -n $rate ]]; then
      step "add tbf $rate on eth0 in $ns" tc -n "$ns" qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
      step "add tbf $rate on p$k in $NAME-sw" tc -n "$NAME-sw" qdisc replace dev "p$k" root tbf rate "$rate" burst "$burst" latency 50ms
    fi
    step "set up p$k in $NAME-sw" ip -n "$NAME-sw" link set "p$k" up
    step "set up eth0 in $ns" ip -n "$ns" link set eth0 up
  done
  token=$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')
  { echo "$n" > "$STATE/n" && echo "$token" > "$STATE/token"; } 2>/dev/null || { cmd_down; die "up: failed to write $STATE/n"; }
  if [[ -n $ttl ]]; then
    setsid nohup "$SELF" _watchdog "$NAME" "$token" "$((10#$ttl))" </dev/null >/dev/null 2>&1 &
    echo $! > "$STATE/watchdog"
  fi
  echo "netns-cluster: $NAME up: hosts 0..$((n - 1)) = $SUBNET.1-$SUBNET.$n${rate:+ at $rate}${ttl:+, ttl ${ttl}s}" >&2
}

# Detached: after $3 seconds run `down` for cluster $1 if its token is still $2.
cmd_watchdog() {
  local fd
  cd /
  for fd in "/proc/$$/fd"/*; do             # drop inherited fds (e.g. test pipes)
    fd=${fd##*/}
    if (( fd > 2 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
  [[ $(cat "$STATE/token" 2>/dev/null) == "$2" ]] || exit 0
  echo $$ > "$STATE/watchdog"
  sleep "$3"
  [[ $(cat "$STATE/token" 2>/dev/null) == "$2" ]] || exit 0
  rm -f "$STATE/watchdog"
  cmd_down
}

cmd_check() {
  local t=tpcchk$$ d
  [[ $EUID -eq 0 ]] || { echo "netns-cluster: needs root"; exit 1; }
  for c in ip tc unshare mount setsid; do
    command -v "$c" >/dev/null || { echo "netns-cluster: '$c' not found"; exit 1; }
  done
  d=$(mktemp -d /run/tpc-netns-check.XXXXXX 2>/dev/null) || { echo "netns-cluster: cannot make a dir under /run"; exit 1; }
  local err=
  # shellcheck disable=SC2016
  if ! err=$(ip netns add "$t" 2>&1); then err="cannot create a network namespace: $err"
  elif ! err=$(ip -n "$t" link add eth0 type veth peer name p0 2>&1); then err="cannot create a veth pair: $err"
  elif ! err=$(ip -n "$t" link add br0 type bridge 2>&1); then err="cannot create a bridge: $err"
  elif ! err=$(mkdir "$d/a" && ip netns exec "$t" unshare --mount --propagation private \
      sh -c 'mount --bind "$1" /tmp' sh "$d/a" 2>&1); then err="cannot bind-mount in a mount namespace: $err"
  else err=; fi
  ip netns delete "$t" 2>/dev/null || true
  rm -rf "$d"
  [[ -z $err ]] || { echo "netns-cluster: ${err//$'\n'/ }"; exit 1; }
}

# ---- argument parsing: SUBCOMMAND [POSITIONAL] [options] [-- CMD...]
NAME=tpc RATE='' TTL='' POS=() CMD=()
[[ $# -gt 0 ]] || { usage >&2; exit 2; }
SUB=$1; shift
case $SUB in -h|--help|help) usage; exit 0 ;; esac
if [[ $SUB == _watchdog ]]; then NAME=$1; STATE=$STATE_ROOT/$NAME; cmd_watchdog "$@"; exit 0; fi
while [[ $# -gt 0 ]]; do
  case $1 in
    --name) [[ $# -ge 2 ]] || usage_err "--name needs a value"; NAME=$2; shift 2 ;;
    --rate) [[ $# -ge 2 ]] || usage_err "--rate needs a value"; RATE=$2; shift 2 ;;
    --ttl)  [[ $# -ge 2 ]] || usage_err "--ttl needs a value"; TTL=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; CMD=("$@"); break ;;
    -*) usage_err "unknown option '$1'" ;;
    *) POS+=("$1"); shift ;;
  esac
done
[[ $NAME =~ ^[a-z0-9-]{1,12}$ ]] || usage_err "bad --name '$NAME' (want [a-z0-9-]{1,12})"
STATE=$STATE_ROOT/$NAME
[[ $SUB == up || ( -z $RATE && -z $TTL ) ]] || usage_err "--rate/--ttl only apply to 'up'"
[[ $SUB == exec || ${#CMD[@]} -eq 0 ]] || usage_err "'--' only applies to 'exec'"
want_pos() { [[ ${#POS[@]} -eq $1 ]] || usage_err "'$SUB' takes $1 positional argument(s), got ${#POS[@]}: ${POS[*]:-none}"; }

case $SUB in
  up)    want_pos 1; cmd_up "${POS[0]}" "$RATE" "$TTL" ;;
  down)  want_pos 0; cmd_down ;;
  pids)  want_pos 0; cmd_pids ;;
  check) want_pos 0; cmd_check ;;
  addr)  want_pos 1; K=$(host_index "${POS[0]}"); echo "$SUBNET.$((K + 1))" ;;
  exec)
    want_pos 1; [[ ${#CMD[@]} -gt 0 ]] || usage_err "exec needs '-- CMD ARGS...'"
    K=$(host_index "${POS[0]}")
    # shellcheck disable=SC2016
    exec ip netns exec "$NAME-h$K" unshare --mount --propagation private sh -c \
      'd=$1; shift; mount --bind "$d/tmp" /tmp && mount --bind "$d/shm" /dev/shm && exec "$@"' \
      sh "$STATE/h$K" "${CMD[@]}" ;;
  cut|heal)
    want_pos 1; K=$(host_index "${POS[0]}")
    state=$([[ $SUB == cut ]] && echo down || echo up)
    ip -n "$NAME-h$K" link set eth0 "$state"
    ip -n "$NAME-sw" link set "p$K" "$state" ;;
  stop|cont)
    want_pos 1; K=$(host_index "${POS[0]}")
    sig=$([[ $SUB == stop ]] && echo STOP || echo CONT)
    pids=$(ip netns pids "$NAME-h$K")
    # shellcheck disable=SC2086
    [[ -z $pids ]] || kill "-$sig" $pids ;;
  *) usage_err "unknown subcommand '$SUB'" ;;
esac
