#!/usr/bin/env bash
# A throwaway single-node SLURM cluster (Slurm 22.05 + MUNGE, no systemd, no cgroups) for Kelvin's
# launcher tests. It owns one state directory, KELVIN_SLURM_DIR (default /tmp/kelvin-slurm, wiped on
# start): slurm.conf, the MUNGE key and socket, the controller's state, slurmd's spool, the logs and
# the pid files of the munged, slurmctld and slurmd it starts. `stop` kills those three (and cancels
# the jobs of this cluster first), nothing else. It listens on its own ports (KELVIN_SLURM_PORT,
# default 16817, and the next one), so a real SLURM on the machine is left alone.
#
# Usage: scripts/slurm_test_cluster.sh start|stop|status
#   start   install slurm-wlm and munge when missing, write the config, (re)start the daemons and
#           wait until the node is idle; exits 77 with one line saying why when they cannot run here
#           (no root or passwordless sudo, packages not installable)
#   stop    cancel this cluster's jobs, stop its daemons
#   status  say whether the cluster is up (exit 0) or not (exit 1)
# Clients (sbatch, srun, squeue, scontrol, kelvin launch --submit) find the cluster through
#   export SLURM_CONF="$KELVIN_SLURM_DIR/slurm.conf"
# which start and status print.
# KELVIN_SLURM_CRED_EXPIRE (default 10, at least 5): seconds a requeued job is held before it may
# start again (Slurm holds it cred_expire + 1 s; Slurm's own default is 120, i.e. ~2 minutes;
# `scontrol update JobId=N StartTime=now` releases it at once).
# KELVIN_SLURM_EXTRA_CONF: further slurm.conf lines (e.g. "GresTypes=gpu"), written before the node.
set -euo pipefail

dir="${KELVIN_SLURM_DIR:-/tmp/kelvin-slurm}"
port="${KELVIN_SLURM_PORT:-16817}"
cred_expire="${KELVIN_SLURM_CRED_EXPIRE:-10}"
conf="$dir/slurm.conf"
me="slurm_test_cluster.sh"

usage() { echo "usage: $0 start|stop|status" >&2; exit 2; }
[[ $# -eq 1 ]] || usage

# Commands that need root: run directly as root, else through passwordless sudo.
as_root=()
root_or_skip() {
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      as_root=(sudo -n)
    else
      echo "$me: SKIP: slurmctld and slurmd must run as root: run as root or with passwordless sudo"
      exit 77
    fi
  fi
}

# The process behind pid file $1 when it is alive and its command is $2 (guards against reuse).
live_pid() {
  local file="$1" name="$2" pid
  [[ -r "$file" ]] || return 1
  pid="$(tr -dc '0-9' <"$file")"
  [[ -n "$pid" && -r "/proc/$pid/comm" ]] || return 1
  [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]] || return 1
  echo "$pid"
}

stop_daemon() {
  local file="$1" name="$2" pid i
  pid="$(live_pid "$file" "$name")" || return 0
  "${as_root[@]}" kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    [[ -d "/proc/$pid" ]] || return 0
    sleep 0.1
  done
  echo "$me: $name (pid $pid) ignored SIGTERM for 10 s; killing it" >&2
  "${as_root[@]}" kill -KILL "$pid" 2>/dev/null || true
}

cluster_up() {
  live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null &&
    live_pid "$dir/run/slurmd.pid" slurmd >/dev/null &&
    [[ "$(SLURM_CONF="$conf" timeout 10 sinfo -h -o %T 2>/dev/null | head -n 1)" =~ ^(idle|mixed|allocated) ]]
}

stop_cluster() {
  if live_pid "$dir/run/slurmctld.pid" slurmctld >/dev/null; then
    # Jobs of this cluster: cancel them so no step outlives its slurmd.
    local jobs i
    jobs="$(SLURM_CONF="$conf" timeout 10 squeue -h -o %A 2>/dev/null || true)"
    if [[ -n "$jobs" ]]; then
      # shellcheck disable=SC2086
      SLURM_CONF="$conf" timeout 10 scancel $jobs 2>/dev/null || true
      for ((i = 0; i < 30; i++)); do
        [[ -z "$(SLURM_CONF="$conf" timeout 10 squeue -h -o %A 2>/dev/null || true)" ]] && break
        sleep 0.5
      done
    fi
  fi
  stop_daemon "$dir/run/slurmd.pid" slurmd
  stop_daemon "$dir/run/slurmctld.pid" slurmctld
  stop_daemon "$dir/munge/munged.pid" munged
}

log_tails() {
  local log
  for log in "$dir/log/munged.log" "$dir/log/slurmctld.log" "$dir/log/slurmd.log"; do
    [[ -e "$log" ]] || continue
    echo "---- last lines of $log" >&2
    "${as_root[@]}" tail -n 15 "$log" >&2 || true
  done
}

fail_start() {
  echo "$me: $1" >&2
  log_tails
  stop_cluster
  exit 1
}

install_packages() {
  local missing=() p
  for p in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [[ ${#missing[@]} -eq 0 ]] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "$me: SKIP: ${missing[*]} not installed and no apt-get to install them"
    exit 77
  fi
  echo "$me: installing ${missing[*]}" >&2
  if ! { "${as_root[@]}" apt-get update -qq &&
         DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq \
           --no-install-recommends "${missing[@]}"; } >"${TMPDIR:-/tmp}/kelvin-slurm-apt.log" 2>&1; then
    echo "$me: SKIP: cannot install ${missing[*]} (apt-get failed; see ${TMPDIR:-/tmp}/kelvin-slurm-apt.log)"
    exit 77
  fi
}

write_config() {
  local host node_line
  host="$(hostname -s)"
  # slurmd -C: "NodeName=<host> CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=..
  # ThreadsPerCore=.. RealMemory=.."; the address is pinned to loopback (one node, resolvable or not).
  node_line="$(slurmd -C | head -n 1)"
  [[ "$node_line" == NodeName=* ]] || fail_start "slurmd -C printed no node line: $node_line"
  node_line="NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host ${node_line#NodeName=* }"
  cat >"$conf" <<EOF
# Written by scripts/slurm_test_cluster.sh: a hermetic single-node cluster for tests.
ClusterName=kelvintest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# socket: this cluster's munged; cred_expire: also how long a requeued job is held (+1 s).
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=$cred_expire
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/slurmd
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No systemd, no cgroups.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Look at pending jobs every 2 s (default 60), so a job whose begin time passes starts soon.
SchedulerParameters=sched_interval=2
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
MinJobAge=300
MailProg=/bin/true
${KELVIN_SLURM_EXTRA_CONF:-}
$node_line State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

start_cluster() {
  root_or_skip
  install_packages
  local cmd
  for cmd in munged slurmctld slurmd sinfo; do
    command -v "$cmd" >/dev/null || { echo "$me: SKIP: $cmd not found after installing slurm-wlm munge"; exit 77; }
  done
  getent passwd munge >/dev/null || { echo "$me: SKIP: no user munge (the munge package creates it)"; exit 77; }

  [[ -d "$dir" ]] && stop_cluster
  "${as_root[@]}" rm -rf "$dir"
  "${as_root[@]}" mkdir -p "$dir"/{state,spool/slurmd,run,log,munge}
  if [[ $(id -u) -ne 0 ]]; then "${as_root[@]}" chown "$(id -u):$(id -g)" "$dir" "$dir/log"; fi
  chmod 0755 "$dir"
  # munged refuses a key, socket or log directory others may write to.
  "${as_root[@]}" mkdir -p /run/munge
  "${as_root[@]}" chown munge:munge /run/munge
  "${as_root[@]}" chmod 0755 /run/munge
  "${as_root[@]}" sh -c "head -c 1024 /dev/urandom >'$dir/munge/munge.key'"
  "${as_root[@]}" touch "$dir/log/munged.log"
  "${as_root[@]}" chown munge:munge "$dir/munge" "$dir/munge/munge.key" "$dir/log/munged.log"
  "${as_root[@]}" chmod 0755 "$dir/munge"  # clients reach the socket in it
  "${as_root[@]}" chmod 0600 "$dir/munge/munge.key"
  write_config

  "${as_root[@]}" runuser -u munge -- munged --socket="$dir/munge/munge.socket" \
    --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" ||
    fail_start "munged did not start"
  "${as_root[@]}" slurmctld -f "$conf" || fail_start "slurmctld did not start"
  "${as_root[@]}" slurmd -f "$conf" || fail_start "slurmd did not start"

  local deadline=$((SECONDS + 30)) state=""
  while ((SECONDS < deadline)); do
    state="$(SLURM_CONF="$conf" timeout 5 sinfo -h -o %T 2>/dev/null | head -n 1 || true)"
    [[ "$state" == idle ]] && break
    sleep 0.5
  done
  [[ "$state" == idle ]] ||
    fail_start "the node is not idle 30 s after the daemons started (sinfo says '${state:-nothing}')"
  echo "$me: cluster up in $dir (node $(hostname -s) idle, Slurm $(slurmd -V | awk '{print $2}'))"
  echo "export SLURM_CONF=$conf"
}

case "$1" in
  start) start_cluster ;;
  stop)
    if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      as_root=(sudo -n)
    fi
    stop_cluster
    echo "$me: stopped the cluster in $dir" ;;
  status)
    if cluster_up; then
      echo "$me: up in $dir: $(SLURM_CONF="$conf" sinfo -h -o '%P %T %N' | head -n 1)"
      echo "export SLURM_CONF=$conf"
    else
      echo "$me: down (no running cluster in $dir)"
      exit 1
    fi ;;
  *) usage ;;
esac
