#!/usr/bin/env bash
# chaos.sh SCENARIO BUILD_DIR
#
# Real faults against running collectives. Network scenarios put every rank in
# its own network namespace (PREFIX-r<k>, interface eth0, 10.77.0.<k+1>/24),
# joined by veth pairs to a bridge in a hub namespace (PREFIX-hub, 10.77.0.254)
# where rcoll-run hosts the store; the faults are real link state changes and
# tc netem qdiscs. Process scenarios signal real processes on loopback. The
# namespaces are this script's own (PREFIX = rcx<pid>) and are removed on every
# exit path. Without root or namespace support the script exits 77 (CTest SKIP).
#
# Every scenario asserts: the outcome DESIGN.md promises (every result checked
# against the reference by the correctness worker, or a typed error naming the
# right rank), that the fault really happened (a log line, a kernel counter),
# and a time budget (no hang). It prints, and appends to $CHAOS_RESULTS
# (default BUILD_DIR/chaos-results.txt), one line
#   CHAOS-RESULT|scenario|what is injected|outcome|detect|recover
# from which tests/chaos/fault_table.sh builds the README's table.
set -u
# The data plane under test is TCP: UCX between network namespaces of one host
# would move the data through shared memory, which no link fault touches.
export RCOLL_TRANSPORT=${CHAOS_TRANSPORT:-tcp}
scenario=${1:?usage: chaos.sh SCENARIO BUILD_DIR}
build=$(cd "${2:?usage: chaos.sh SCENARIO BUILD_DIR}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
RUN=$build/tools/rcoll-run
WORKER=$build/tests/rcoll-correctness-worker
RESULTS=${CHAOS_RESULTS:-$build/chaos-results.txt}
SKIP=77
N=4
P=rcx$$
HUB=$P-hub
HUB_IP=10.77.0.254
work=$(mktemp -d /tmp/rcoll-chaos.XXXXXX)
out=$work/job.log
namespaces=()
launcher=
frozen=()
failures=0
t_fault= t_heal=

now() { date +%s.%N; }
ms_since() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%d", (b - a) * 1000 }'; }
say() { echo "chaos[$scenario]: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
skip() { echo "SKIP: $*"; exit $SKIP; }

cleanup() {
  local p
  for p in "${frozen[@]}"; do kill -CONT "$p" 2>/dev/null; done
  if [[ -n $launcher ]] && kill -0 "$launcher" 2>/dev/null; then
    kill -TERM "$launcher" 2>/dev/null  # rcoll-run stops its ranks (SIGTERM, then SIGKILL)
    for _ in $(seq 100); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$launcher" 2>/dev/null
  fi
  wait 2>/dev/null
  for ((i = ${#namespaces[@]} - 1; i >= 0; i--)); do ip netns del "${namespaces[i]}" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- network namespaces ----------------------------------------------------

mk_ns() {
  ip netns add "$1" 2>"$work/err" || return 1
  namespaces+=("$1")
  ip -n "$1" link set lo up
}

# setup_net [DEAD_IFACE_RANK]: the hub and N rank namespaces. With a rank
# given, that rank gets a second interface listed first (eth0, 10.66.1.2/24,
# up, leading into a namespace with nothing behind it) and reaches the
# bridge through eth1.
setup_net() {
  local dead_rank=${1:--1} k ifname
  [[ $(id -u) -eq 0 ]] || skip "network namespaces need root"
  command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
  command -v tc >/dev/null || skip "iproute2 (tc) is not installed"
  mk_ns "$HUB" || skip "cannot create a network namespace: $(cat "$work/err")"
  ip -n "$HUB" link add br0 type bridge 2>"$work/err" || skip "no bridge support: $(cat "$work/err")"
  ip -n "$HUB" addr add "$HUB_IP/24" dev br0
  ip -n "$HUB" link set br0 up
  for ((k = 0; k < N; k++)); do
    mk_ns "$P-r$k" || skip "cannot create a network namespace: $(cat "$work/err")"
    ifname=eth0
    if ((k == dead_rank)); then
      mk_ns "$P-void" || skip "cannot create a network namespace: $(cat "$work/err")"
      ip -n "$P-r$k" link add eth0 type veth peer name void0 netns "$P-void"
      ip -n "$P-r$k" addr add 10.66.1.2/24 dev eth0
      ip -n "$P-r$k" link set eth0 up
      ip -n "$P-void" link set void0 up
      ifname=eth1
    fi
    ip -n "$HUB" link add "v$k" type veth peer name "$ifname" netns "$P-r$k" || skip "cannot create veth pairs"
    ip -n "$HUB" link set "v$k" master br0 up
    ip -n "$P-r$k" addr add "10.77.0.$((k + 1))/24" dev "$ifname"
    ip -n "$P-r$k" link set "$ifname" up
  done
  say "namespaces ready: $HUB (bridge $HUB_IP) and ${N} ranks $P-r0..$P-r$((N - 1))"
}

link_down() { ip -n "$HUB" link set "v$1" down; }
link_up() { ip -n "$HUB" link set "v$1" up; }
# netem on both directions of every rank's link.
netem_all() {
  local k
  for ((k = 0; k < N; k++)); do
    ip netns exec "$P-r$k" tc qdisc replace dev eth0 root netem "$@" || fail "tc netem $* failed"
    ip netns exec "$HUB" tc qdisc replace dev "v$k" root netem "$@" || fail "tc netem $* failed"
  done
}
netem_clear() {
  local k
  for ((k = 0; k < N; k++)); do
    ip netns exec "$P-r$k" tc qdisc del dev eth0 root 2>/dev/null
    ip netns exec "$HUB" tc qdisc del dev "v$k" root 2>/dev/null
  done
}
# Does this kernel have tc netem (CONFIG_NET_SCH_NETEM)? Tried on a scratch veth in the hub.
have_netem() {
  ip -n "$HUB" link add name nt0 type veth peer name nt1 2>/dev/null || return 1
  local ok=1
  ip netns exec "$HUB" tc qdisc add dev nt0 root netem delay 1ms 2>/dev/null && ok=0
  ip -n "$HUB" link del nt0 2>/dev/null
  return $ok
}
need_netem() {
  have_netem || skip "this kernel has no tc netem (CONFIG_NET_SCH_NETEM is not set): cannot $1"
}
# Random drop of N percent of the packets arriving at every rank (nftables
# numgen, input hook: the sender is not told, as with loss on the wire), for
# kernels without netem.
nft_loss_all() {
  local k
  for ((k = 0; k < N; k++)); do
    ip netns exec "$P-r$k" nft -f - <<NFT || fail "nft loss rule failed in $P-r$k"
table inet chaos {
  chain in {
    type filter hook input priority 0; policy accept;
    numgen random mod 100 < $1 counter drop
  }
}
NFT
  done
}
nft_dropped() {
  local k total=0 v
  for ((k = 0; k < N; k++)); do
    v=$(ip netns exec "$P-r$k" nft list chain inet chaos in 2>/dev/null | grep -oE 'packets [0-9]+' | grep -oE '[0-9]+')
    total=$((total + ${v:-0}))
  done
  echo "$total"
}
# A token bucket on both directions of every link: RATE, queueing up to LATENCY.
tbf_all() {
  local k
  for ((k = 0; k < N; k++)); do
    ip netns exec "$P-r$k" tc qdisc replace dev eth0 root tbf rate "$1" burst 64kb latency "$2" || fail "tc tbf failed"
    ip netns exec "$HUB" tc qdisc replace dev "v$k" root tbf rate "$1" burst 64kb latency "$2" || fail "tc tbf failed"
  done
}
tbf_dropped() {
  local k total=0 v
  for ((k = 0; k < N; k++)); do
    for v in $(ip netns exec "$P-r$k" tc -s qdisc show dev eth0 | grep -oE 'dropped [0-9]+|overlimits [0-9]+' | grep -oE '[0-9]+'); do
      total=$((total + v))
    done
  done
  echo "$total"
}
# Sum of a kernel TCP counter (nstat name) over the rank namespaces.
tcp_counter() {
  local k total=0 v
  for ((k = 0; k < N; k++)); do
    v=$(ip netns exec "$P-r$k" nstat -az "$1" 2>/dev/null | awk -v n="$1" '$1 == n { print $2 }')
    total=$((total + ${v:-0}))
  done
  echo "$total"
}

# ---- the job -----------------------------------------------------------------

JOB_ENV=()
LAUNCH_ARGS=()
WORKER_ARGS=()
# start_job netns|loopback
start_job() {
  local -a cmd
  if [[ $1 == netns ]]; then
    cmd=(ip netns exec "$HUB" env "${JOB_ENV[@]}" "$RUN" -n "$N" --store-host "$HUB_IP" "${LAUNCH_ARGS[@]}"
         -- "$here/in_netns.sh" "$P" "$WORKER" "${WORKER_ARGS[@]}")
  else
    cmd=(env "${JOB_ENV[@]}" "$RUN" -n "$N" "${LAUNCH_ARGS[@]}" -- "$WORKER" "${WORKER_ARGS[@]}")
  fi
  say "running: ${cmd[*]}"
  t_start=$(now)
  (
    "${cmd[@]}" >"$out" 2>&1 &
    echo $! >"$work/pid"
    wait $!
    echo $? >"$work/rc"
  ) &
  for _ in $(seq 100); do [[ -s $work/pid ]] && break; sleep 0.01; done
  launcher=$(cat "$work/pid")
}

job_running() { [[ ! -f $work/rc ]]; }

# wait_for REGEX SECONDS: until the job's output matches (false if it ends or time runs out).
wait_for() {
  local until=$(($(date +%s) + $2))
  while ! grep -Eq -- "$1" "$out"; do
    job_running || return 1
    (($(date +%s) < until)) || return 1
    sleep 0.05
  done
}

# finish_job BUDGET_S: waits for the job; a job still running after the budget is a hang.
code=
finish_job() {
  local until
  until=$(awk -v t="$t_start" -v b="$1" 'BEGIN { printf "%d", t + b }')
  while job_running && (($(date +%s) < until)); do sleep 0.1; done
  if job_running; then
    fail "hang: the job is still running ${1} s after it started"
    local p
    for p in "${frozen[@]}"; do kill -CONT "$p" 2>/dev/null; done
    kill -TERM "$launcher" 2>/dev/null
    while job_running; do sleep 0.1; done
  fi
  t_end=$(now)
  code=$(cat "$work/rc")
  say "job exited with code $code after $(ms_since "$t_start" "$t_end") ms"
}

# The pid of rank K (a child of the launcher whose environment says so).
rank_pid() {
  local p
  for p in $(ps -o pid= --ppid "$launcher"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RCOLL_RANK=$1"; then
      echo "$p"
      return
    fi
  done
}

# ---- assertions and measurements ---------------------------------------------

expect_code() {  # 0 | nonzero | N
  if [[ $1 == nonzero ]]; then
    [[ $code != 0 ]] || fail "expected the job to fail, it exited 0"
  elif [[ $code != "$1" ]]; then
    fail "expected exit code $1, got $code"
  fi
}
expect_log() { grep -Eq -- "$1" "$out" || fail "no output line matches: $1"; }
expect_no_log() { ! grep -Eq -- "$1" "$out" || fail "unexpected output: $(grep -Em1 -- "$1" "$out")"; }
expect_all_correct() {
  local k
  for ((k = 0; k < N; k++)); do
    expect_log "\\[$k\\] rank $k/$N: [0-9]+ checks, 0 failed"
  done
}
# Timestamp (s) of the first rcoll log line matching REGEX at or after time T.
first_log_at() {
  grep -E -- "$1" "$out" | grep -oE 'rcoll [0-9]+\.[0-9]{3} ' |
    awk -v t="$2" '$2 + 0 >= t - 0.0005 { print $2; exit }'
}
last_log_at() {
  grep -E -- "$1" "$out" | grep -oE 'rcoll [0-9]+\.[0-9]{3} ' | awk '{ v = $2 } END { if (v != "") print v }'
}
# "N ms" from T0 to the first log line matching REGEX after T0, or "-".
ms_to() {
  local t
  t=$(first_log_at "$1" "$2")
  [[ -n $t ]] && echo "$(ms_since "$2" "$t") ms" || echo "-"
}
recoveries() { grep -oE 'rank 0/[0-9]+: [0-9]+ checks.* ([0-9]+) recoveries' "$out" | grep -oE '[0-9]+ recoveries' | grep -oE '[0-9]+'; }
max_recovery_ms() {
  grep -oE 'recovered: epoch [0-9]+ over tcp after [0-9.]+ ms' "$out" | awk '{ if ($7 > m) m = $7 } END { if (m != "") printf "%.0f ms", m; else print "-" }'
}

report() {  # INJECTED OUTCOME DETECT RECOVER
  local status=PASS
  ((failures == 0)) || status=FAIL
  local line="CHAOS-RESULT|$scenario|$1|$2|$3|$4|$status"
  echo "$line"
  echo "$line" >>"$RESULTS"
}

finish() {
  echo "----- job output (last 60 lines) -----"
  tail -60 "$out"
  echo "--------------------------------------"
  if ((failures > 0)); then
    echo "chaos[$scenario]: $failures check(s) failed"
    exit 1
  fi
  echo "chaos[$scenario]: passed"
  exit 0
}

LIVE='is silent|failed during|is dead|never joined'

# Store scenarios: from the injected link close (logged by the rank that closes
# it) to the first rank that declares the epoch failed.
detect_after_close() {
  local t_close t_det
  t_close=$(first_log_at 'fault injection: closing the link' "$t_start")
  t_det=$(first_log_at 'failed during' "$t_start")
  if [[ -n $t_close && -n $t_det ]]; then
    echo "$(ms_since "$t_close" "$t_det") ms after the link close"
  else
    echo "-"
  fi
}

# ---- scenarios ---------------------------------------------------------------

case $scenario in
  link-flap)
    # Rank 1's link goes down for 3 s (twice the liveness budget) in the middle of
    # 1 MiB collectives and comes back: the job must finish with every result right.
    setup_net
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 120)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 12)
    start_job netns
    wait_for "communicator ready" 60 || fail "the job never started"
    sleep 2
    t_fault=$(now); link_down 1; say "link of rank 1 down"
    sleep 3
    t_heal=$(now); link_up 1; say "link of rank 1 up"
    finish_job 120
    expect_code 0
    expect_all_correct
    expect_log "rank 1 .*is silent|rank [023] .*is silent"
    expect_log "heartbeats again"
    report "link of rank 1 down 3 s, then up (ip link set down/up)" \
      "all results right, $(recoveries) recoveries" "$(ms_to "$LIVE" "$t_fault") (silent)" \
      "$(ms_to 'heartbeats again|recovered:' "$t_heal") after link up"
    ;;

  partition-heal)
    # Rank 2 is cut off (store included) for 8 s; a 2 s progress deadline makes
    # the others start a recovery that must wait for it, and finish once it is back.
    setup_net
    JOB_ENV=(RCOLL_DEBUG=INFO RCOLL_OP_TIMEOUT_MS=2000)
    LAUNCH_ARGS=(--timeout 120)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 14 --expect-recoveries 1)
    start_job netns
    wait_for "communicator ready" 60 || fail "the job never started"
    sleep 2
    t_fault=$(now); link_down 2; say "rank 2 partitioned"
    sleep 8
    t_heal=$(now); link_up 2; say "rank 2 reconnected"
    finish_job 120
    expect_code 0
    expect_all_correct
    expect_log "rank 2 .*is silent"
    expect_log "recovered: epoch [1-9]"
    report "rank 2 partitioned 8 s (its link down), op deadline 2 s" \
      "recovery waits for it; all results right, $(recoveries) recoveries" \
      "$(ms_to "$LIVE" "$t_fault")" "$(ms_to 'recovered:' "$t_heal") after heal (recovery $(max_recovery_ms))"
    ;;

  partition-forever)
    # Rank 2 is cut off for good: the others must end with a typed error naming
    # it, within the liveness budget + progress deadline + recovery timeout.
    setup_net
    JOB_ENV=(RCOLL_DEBUG=INFO RCOLL_OP_TIMEOUT_MS=2000 RCOLL_RECOVERY_TIMEOUT_MS=5000)
    LAUNCH_ARGS=(--timeout 120 --linger 5 --grace 1)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 60)
    start_job netns
    wait_for "communicator ready" 60 || fail "the job never started"
    sleep 2
    t_fault=$(now); link_down 2; say "rank 2 partitioned for good"
    wait_for "rcoll error: .*rank\\(s\\) 2 never joined" 40 || fail "no rank reported rank 2 within 40 s"
    t_error=$(now)
    finish_job 90
    expect_code nonzero
    expect_log "\\[[013]\\] rcoll error: \\[rank [013] peer 2 .*rank\\(s\\) 2 never joined"
    expect_log "rank 2 .*is silent"
    report "rank 2 partitioned for good, op deadline 2 s, recovery timeout 5 s" \
      "typed error kPeerUnreachable naming rank 2 on the others" \
      "$(ms_to "$LIVE" "$t_fault")" "error after $(ms_since "$t_fault" "$t_error") ms"
    ;;

  latency-jitter)
    # 40 ms +- 20 ms each way on every link: slower, never a false recovery.
    setup_net
    need_netem "add latency and jitter"
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 120)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 10 --max-recoveries 0)
    start_job netns
    wait_for "communicator ready" 60 || fail "the job never started"
    t_fault=$(now); netem_all delay 40ms 20ms distribution normal; say "netem delay 40ms 20ms on every link"
    sleep 1
    rtt=$(ip netns exec "$P-r0" ss -tin 2>/dev/null | grep -oE 'rtt:[0-9.]+' | head -1)
    finish_job 120
    expect_code 0
    expect_all_correct
    [[ -n $rtt ]] && awk -v r="${rtt#rtt:}" 'BEGIN { exit !(r > 40) }' || fail "TCP did not see the added latency (ss says '${rtt:-nothing}')"
    report "netem delay 40 ms +- 20 ms (normal) each way on every link, 10 s run" \
      "all results right, 0 recoveries ($(grep -oE 'rank 0/4: [0-9]+ passes' "$out" | grep -oE '[0-9]+ passes'), TCP ${rtt:-rtt:?} ms)" "-" "-"
    ;;

  loss)
    # 3% of the packets arriving at every rank are dropped (tc netem where the kernel
    # has it, else an nftables random-drop rule): TCP retransmits, rcoll sees
    # only slowness and must not start a recovery.
    setup_net
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 120)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 8 --max-recoveries 0)
    if have_netem; then how="tc netem loss 3%"; else
      command -v nft >/dev/null || skip "neither tc netem nor nft (nftables) is available to drop packets"
      how="nftables random drop; no netem in this kernel"
    fi
    start_job netns
    wait_for "communicator ready" 60 || fail "the job never started"
    before=$(tcp_counter TcpRetransSegs)
    t_fault=$(now)
    if [[ $how == tc* ]]; then netem_all loss 3%; else nft_loss_all 3; fi
    say "$how on every rank"
    finish_job 120
    retrans=$(($(tcp_counter TcpRetransSegs) - before))
    dropped=$([[ $how == tc* ]] && echo "?" || nft_dropped)
    expect_code 0
    expect_all_correct
    ((retrans > 0)) || fail "no TCP retransmissions: the loss did not happen"
    report "3% of packets dropped ($how), 8 s of 4 KiB/1 MiB collectives" \
      "all results right, 0 recoveries ($dropped packets dropped, $retrans TCP segments retransmitted)" "-" "-"
    ;;

  slow-link)
    # Every link throttled to 50 Mbit/s with up to 100 ms of queueing (tbf):
    # 1 MiB collectives slow down ~50x and the queueing delay varies; the
    # progress deadline must fit the measured speed: no false recovery.
    setup_net
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 120)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 6 --max-recoveries 0)
    start_job netns
    wait_for "communicator ready" 60 || fail "the job never started"
    t_fault=$(now); tbf_all 50mbit 100ms; say "tbf 50mbit, 100 ms queue on every link"
    finish_job 120
    throttled=$(tbf_dropped)
    expect_code 0
    expect_all_correct
    ((throttled > 0)) || fail "the token bucket never held a packet back: the throttle did not happen"
    report "every link throttled to 50 Mbit/s, up to 100 ms queueing (tc tbf), 6 s run" \
      "all results right, 0 recoveries ($(grep -oE 'rank 0/4: [0-9]+ passes in [0-9.]+ s' "$out" | cut -d' ' -f3-); $throttled packets held back by the bucket)" "-" "-"
    ;;

  reorder)
    # Packets delayed 10 ms except 25% sent at once: reordered on the wire.
    setup_net
    need_netem "reorder packets"
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 120)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 10 --max-recoveries 0)
    start_job netns
    wait_for "communicator ready" 60 || fail "the job never started"
    before=$(tcp_counter TcpExtTCPOFOQueue)
    t_fault=$(now); netem_all delay 10ms reorder 25% 50%; say "netem reorder on every link"
    finish_job 120
    ofo=$(($(tcp_counter TcpExtTCPOFOQueue) - before))
    expect_code 0
    expect_all_correct
    ((ofo > 0)) || fail "no out-of-order segments counted: the reordering did not happen"
    report "netem delay 10 ms, 25% (corr. 50%) sent at once (reordering), 10 s run" \
      "all results right, 0 recoveries ($ofo segments queued out of order)" "-" "-"
    ;;

  two-ifaces)
    # Rank 1 has a dead interface listed first (eth0, routes nowhere) and a
    # working one (eth1). Without RCOLL_SOCKET_IFNAME rcoll must pick eth1.
    setup_net 1
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 60)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32)
    start_job netns
    finish_job 60
    expect_code 0
    expect_all_correct
    expect_log "\\[1\\] .*using the interface with address 10\\.77\\.0\\.2"
    expect_log "\\[1\\] .*listening on 10\\.77\\.0\\.2:[0-9]+ \\(interface eth1\\)"
    report "rank 1 has 2 interfaces, the first (eth0) routes nowhere; no RCOLL_SOCKET_IFNAME" \
      "rcoll picks eth1 (route toward the store); all results right" "-" "-"
    ;;

  two-ifaces-forced)
    # The same, with rank 1 told to use the dead one: every rank must fail
    # within the connect deadline saying which interface and address failed.
    setup_net 1
    JOB_ENV=(RCOLL_DEBUG=INFO RCOLL_CONNECT_TIMEOUT_MS=4000 "CHAOS_ENV_R1=RCOLL_SOCKET_IFNAME==eth0")
    LAUNCH_ARGS=(--timeout 60 --linger 5 --grace 1)
    WORKER_ARGS=(--sizes 4K+3 --dtypes float32)
    t_fault=$(now)
    start_job netns
    wait_for "rcoll error" 30 || fail "no rank reported the unreachable interface within 30 s"
    t_error=$(now)
    finish_job 60
    expect_code nonzero
    expect_log "\\[[23]\\] rcoll error: \\[rank [23] peer 1 epoch 0 tcp\\] peer unreachable"
    expect_log "\\[[23]\\]   rank 1: dialling 10\\.66\\.1\\.2:[0-9]+ \\(its interface eth0\\); connect to 10\\.66\\.1\\.2:[0-9]+ failed"
    expect_log "\\[1\\] rcoll error: \\[rank 1 peer [0-9] .*\\(interface eth0 10\\.66\\.1\\.2\\) could not connect"
    expect_log "check RCOLL_SOCKET_IFNAME"
    report "rank 1 forced onto its dead interface (RCOLL_SOCKET_IFNAME==eth0)" \
      "typed error kPeerUnreachable: ranks 2, 3 name rank 1, 10.66.1.2 and eth0" "-" \
      "error after $(ms_since "$t_fault" "$t_error") ms (connect deadline 4 s)"
    ;;

  store-stall)
    # The store's host (rcoll-run) is frozen for 8 s while a recovery needs the
    # store: rank 0 reaches op 3 4 s late (a straggler, heartbeating) and then
    # closes a link. The recovery must wait for the store and then finish.
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 120 --inject "stall:rank=0,op=3,ms=4000;close-link:rank=0,op=3")
    WORKER_ARGS=(--sizes 1M --dtypes float32 --ops allreduce --expect-recoveries 1)
    start_job loopback
    wait_for "communicator ready" 30 || fail "the job never started"
    sleep 1
    t_fault=$(now); kill -STOP "$launcher"; frozen=("$launcher"); say "store host (rcoll-run pid $launcher) frozen"
    sleep 8
    t_heal=$(now); kill -CONT "$launcher"; frozen=(); say "store host thawed"
    finish_job 120
    expect_code 0
    expect_all_correct
    expect_log "epoch 0 failed during allreduce seq [34]"
    rec=$(max_recovery_ms)
    [[ $rec != - ]] && (( ${rec% ms} >= 2000 )) || fail "the recovery took $rec: it did not wait for the frozen store"
    report "store host (rcoll-run) SIGSTOPped 8 s while a recovery needs the store" \
      "recovery waits for the store; all results right, $(recoveries) recoveries" \
      "$(detect_after_close)" "recovery $rec, done $(ms_since "$t_heal" "$(last_log_at 'recovered:')") ms after thaw"
    ;;

  store-stall-forever)
    # The store's host is frozen (14 s) for longer than the recovery timeout (5 s) while
    # a recovery needs it: every rank must end with a typed error that names the
    # store, within the recovery budget (not hang on the store).
    JOB_ENV=(RCOLL_DEBUG=INFO RCOLL_RECOVERY_TIMEOUT_MS=5000)
    LAUNCH_ARGS=(--timeout 120 --linger 5 --grace 1 --inject "stall:rank=0,op=3,ms=3000;close-link:rank=0,op=3")
    WORKER_ARGS=(--sizes 1M --dtypes float32 --ops allreduce)
    start_job loopback
    wait_for "communicator ready" 30 || fail "the job never started"
    sleep 1
    t_fault=$(now); kill -STOP "$launcher"; frozen=("$launcher"); say "store host (rcoll-run pid $launcher) frozen"
    sleep 14
    t_heal=$(now); kill -CONT "$launcher"; frozen=(); say "store host thawed after 14 s"
    finish_job 120
    expect_code nonzero
    expect_log "rcoll error: .*store"
    t_fail=$(first_log_at 'failed for good|gave up' "$t_fault")
    t_rec=$(first_log_at 'failed during' "$t_fault")
    if [[ -n $t_fail && -n $t_rec ]]; then
      took=$(ms_since "$t_rec" "$t_fail")
      # The recovery timeout, its 1 s of grace for the diagnosis, then at most 3 s
      # of best-effort reports (fatal diagnosis, positions) before the error returns.
      ((took <= 5000 + 1000 + 3000 + 1000)) || fail "the recovery gave up $took ms after it started (timeout 5000 ms)"
    else
      fail "no log line shows the recovery starting and giving up"
    fi
    report "store host SIGSTOPped 14 s while a recovery needs it, recovery timeout 5 s" \
      "typed error naming the store on every rank" "$(detect_after_close)" \
      "recovery gave up after ${took:-?} ms"
    ;;

  sigstop)
    # Rank 1 frozen (SIGSTOP) for 3 s in the middle of 1 MiB collectives, then
    # thawed: silent after the liveness budget, then back; every result right.
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 120)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 8)
    start_job loopback
    wait_for "communicator ready" 30 || fail "the job never started"
    sleep 1.5
    victim=$(rank_pid 1)
    [[ -n $victim ]] || fail "rank 1 not found"
    t_fault=$(now); kill -STOP "$victim"; frozen=("$victim"); say "rank 1 (pid $victim) frozen"
    sleep 3
    t_heal=$(now); kill -CONT "$victim"; frozen=(); say "rank 1 thawed"
    finish_job 120
    expect_code 0
    expect_all_correct
    expect_log "rank 1 .*is silent"
    report "rank 1 SIGSTOPped 3 s, then SIGCONT" "all results right, $(recoveries) recoveries" \
      "$(ms_to "$LIVE" "$t_fault") (silent)" "$(ms_to 'heartbeats again|recovered:' "$t_heal") after SIGCONT"
    ;;

  sigstop-forever)
    # Rank 1 frozen for good: the others end with a typed error naming it.
    JOB_ENV=(RCOLL_DEBUG=INFO RCOLL_OP_TIMEOUT_MS=2000 RCOLL_RECOVERY_TIMEOUT_MS=4000)
    LAUNCH_ARGS=(--timeout 120 --linger 5 --grace 1)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 60)
    start_job loopback
    wait_for "communicator ready" 30 || fail "the job never started"
    sleep 1.5
    victim=$(rank_pid 1)
    t_fault=$(now); kill -STOP "$victim"; frozen=("$victim"); say "rank 1 (pid $victim) frozen for good"
    wait_for "rcoll error: .*rank\\(s\\) 1 never joined" 40 || fail "no rank reported rank 1 within 40 s"
    t_error=$(now)
    finish_job 90
    expect_code nonzero
    expect_log "\\[[023]\\] rcoll error: \\[rank [023] peer 1 .*rank\\(s\\) 1 never joined"
    report "rank 1 SIGSTOPped for good, op deadline 2 s, recovery timeout 4 s" \
      "typed error kPeerUnreachable naming rank 1 on the others" "$(ms_to "$LIVE" "$t_fault") (silent)" \
      "error after $(ms_since "$t_fault" "$t_error") ms"
    ;;

  sigkill)
    # Rank 2 killed (SIGKILL) in the middle of collectives: the survivors name it
    # as dead within milliseconds (its liveness connection closes).
    JOB_ENV=(RCOLL_DEBUG=INFO)
    LAUNCH_ARGS=(--timeout 120 --linger 5 --grace 1)
    WORKER_ARGS=(--sizes 4K+3,1M --dtypes float32 --duration 60)
    start_job loopback
    wait_for "communicator ready" 30 || fail "the job never started"
    sleep 1.5
    victim=$(rank_pid 2)
    t_fault=$(now); kill -KILL "$victim"; say "rank 2 (pid $victim) killed"
    wait_for "\\[[013]\\] rcoll error: .*peer 2 .*dead" 30 || fail "no survivor reported rank 2 dead within 30 s"
    t_error=$(now)
    finish_job 60
    expect_code 137
    expect_log "\\[[013]\\] rcoll error: \\[rank [013] peer 2 .*peer dead"
    report "rank 2 SIGKILLed" "typed error kPeerDead naming rank 2 on every survivor" \
      "$(ms_to 'is dead' "$t_fault")" "error after $(ms_since "$t_fault" "$t_error") ms"
    ;;

  *)
    echo "unknown scenario '$scenario'"
    exit 2
    ;;
esac
finish
