#!/usr/bin/env bash
# A private one-node Slurm cluster on this machine, for tests of the sbatch scripts.
#
#   tools/slurm/local_cluster.sh start  DIR   # munged + slurmctld + slurmd, everything under DIR
#   tools/slurm/local_cluster.sh status DIR
#   tools/slurm/local_cluster.sh stop   DIR   # cancels its jobs, stops the three daemons
#   export SLURM_CONF=DIR/etc/slurm.conf      # then sbatch / squeue / scontrol talk to it
#
# Needs root (slurmd starts job steps as the submitting user) and Debian's slurm-wlm + munge
# (slurmctld, slurmd, munged). Nothing outside DIR is touched: the munge key, munge socket,
# state, spool, pid and log files all live there, and the daemons listen on their own ports
# (DICE_SLURM_PORT, default 16817, and the next one), so a real Slurm installation on the same
# machine is left alone. One private cluster per port pair at a time.
#
# Exit status: 0 ok, 1 a daemon failed (its log tail is printed), 2 usage, 77 this machine
# cannot run it (not root, or the daemons are not installed), so a test can skip.
set -euo pipefail

usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[[ $# -eq 2 ]] || usage
cmd=$1
dir=$2
case $cmd in start|stop|status) ;; *) usage ;; esac
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

conf=$dir/etc/slurm.conf
sock=$dir/munge/munge.socket
port=${DICE_SLURM_PORT:-16817}
export SLURM_CONF=$conf

log() { echo "local_cluster: $*"; }
die() { echo "local_cluster: $*" >&2; exit 1; }

pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

show_log() {
  [[ -f $1 ]] || return 0
  echo "--- last lines of $1" >&2
  tail -n 20 "$1" >&2
}

# Waits up to $2 seconds for the command in $1 to succeed.
wait_for() {
  local what=$1 secs=$2
  for ((i = 0; i < secs * 4; i++)); do
    if eval "$what" >/dev/null 2>&1; then return 0; fi
    sleep 0.25
  done
  return 1
}

check_prereqs() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "local_cluster: needs root (slurmd launches job steps as the submitting user)" >&2
    exit 77
  fi
  local missing=()
  for b in munged munge slurmctld slurmd sbatch squeue scontrol sinfo; do
    command -v "$b" >/dev/null 2>&1 || [[ -x /usr/sbin/$b ]] || missing+=("$b")
  done
  if ((${#missing[@]})); then
    echo "local_cluster: not installed: ${missing[*]} (Debian: apt-get install slurm-wlm munge)" >&2
    exit 77
  fi
}

# The Slurm daemons live in /usr/sbin, which a non-login root shell may lack in PATH.
export PATH=$PATH:/usr/sbin:/sbin

start_munge() {
  mkdir -p "$dir/munge"
  chmod 755 "$dir/munge"  # clients need to reach the socket; the key itself is 0400
  if [[ ! -f $dir/munge/munge.key ]]; then
    # A fresh random key: this cluster trusts only itself.
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
  fi
  if pid_alive "$dir/munge/munged.pid"; then return 0; fi
  # --force: munged refuses to run as root, and with its files outside /etc and /var, without it.
  munged --force --socket="$sock" --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" \
    || { show_log "$dir/log/munged.log"; die "munged did not start"; }
  wait_for "munge -n -S '$sock' | unmunge -S '$sock'" 10 \
    || { show_log "$dir/log/munged.log"; die "munged started but does not answer on $sock"; }
}

write_conf() {
  mkdir -p "$dir/etc" "$dir/state" "$dir/spool" "$dir/log" "$dir/run"
  local host node_line node mpi
  host=$(hostname -s)
  # slurmd -C measures this node (CPUs, sockets, cores, threads, RealMemory) exactly as slurmd
  # will check it at registration, so the node is not drained for claiming more than it has.
  node_line=$(slurmd -C | head -n 1)
  [[ $node_line == NodeName=* ]] || die "slurmd -C printed no node line: $node_line"
  node=${node_line%% *}
  node=${node#NodeName=}
  mpi=none
  [[ -e $(plugin_dir)/mpi_pmix.so ]] && mpi=pmix
  : > "$dir/etc/plugstack.conf"
  cat > "$conf" <<EOF
# Written by tools/slurm/local_cluster.sh: a private one-node cluster for tests.
ClusterName=dice-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire is also how long a requeued job waits before it may start again (default 120 s).
AuthInfo=socket=$sock,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$dir/etc/plugstack.conf
# No cgroups: containers and CI machines rarely delegate them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
# linear: a job gets the whole node, and --overcommit may then place more tasks than CPUs on
# it (3 ranks on a 2-core CI machine); cons_tres refuses --ntasks-per-node above the CPU count.
SelectType=select/linear
MpiDefault=$mpi
# A node that was down comes back by itself when slurmd registers again.
ReturnToService=2
JobRequeue=1
# Finished jobs stay visible to scontrol for 10 minutes (tests read their state and Restarts).
MinJobAge=600
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
$node_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

plugin_dir() {
  local d
  for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/aarch64-linux-gnu/slurm-wlm /usr/lib64/slurm /usr/lib/slurm; do
    [[ -d $d ]] && { echo "$d"; return; }
  done
  echo /nonexistent
}

node_name() { sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$conf"; }

do_start() {
  check_prereqs
  mkdir -p "$dir/log"
  start_munge
  if pid_alive "$dir/run/slurmctld.pid" && pid_alive "$dir/run/slurmd.pid"; then
    log "already running (export SLURM_CONF=$conf)"
    return 0
  fi
  write_conf
  if ! pid_alive "$dir/run/slurmctld.pid"; then
    slurmctld -f "$conf" || { show_log "$dir/log/slurmctld.log"; die "slurmctld did not start"; }
  fi
  wait_for "scontrol ping | grep -q UP" 20 || { show_log "$dir/log/slurmctld.log"; die "slurmctld does not answer"; }
  if ! pid_alive "$dir/run/slurmd.pid"; then
    slurmd -f "$conf" -N "$(node_name)" || { show_log "$dir/log/slurmd.log"; die "slurmd did not start"; }
  fi
  if ! wait_for "sinfo -h -N -o %T | grep -Eq '^(idle|mixed|allocated)'" 30; then
    sinfo -N -l >&2 || true
    show_log "$dir/log/slurmd.log"
    show_log "$dir/log/slurmctld.log"
    die "node $(node_name) did not become idle"
  fi
  log "up: node $(sinfo -h -N -o '%N %c CPUs %m MB'), MpiDefault=$(sed -n 's/^MpiDefault=//p' "$conf")"
  log "export SLURM_CONF=$conf"
}

stop_daemon() {
  local name=$1 pidfile=$2
  pid_alive "$pidfile" || return 0
  local pid
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 40; i++)); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
    sleep 0.25
  done
  log "$name ($pid) did not stop on SIGTERM: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
}

do_stop() {
  if [[ -f $conf ]] && pid_alive "$dir/run/slurmctld.pid"; then
    # Job steps run under slurmstepd, which outlives slurmd by design: end the jobs first.
    local jobs=()
    mapfile -t jobs < <(squeue -h -o %i 2>/dev/null)
    if ((${#jobs[@]})); then
      scancel --full "${jobs[@]}" 2>/dev/null || true
      wait_for "[[ -z \$(squeue -h -o %i) ]]" 30 || log "jobs still listed after scancel: $(squeue -h -o '%i %T' | tr '\n' ' ')"
    fi
  fi
  stop_daemon slurmd "$dir/run/slurmd.pid"
  stop_daemon slurmctld "$dir/run/slurmctld.pid"
  stop_daemon munged "$dir/munge/munged.pid"
  log "stopped ($dir)"
}

do_status() {
  local rc=0
  for d in "munged:$dir/munge/munged.pid" "slurmctld:$dir/run/slurmctld.pid" "slurmd:$dir/run/slurmd.pid"; do
    if pid_alive "${d#*:}"; then echo "${d%%:*}: running (pid $(cat "${d#*:}"))"; else echo "${d%%:*}: not running"; rc=1; fi
  done
  if ((rc == 0)); then
    sinfo -N -l || rc=1
    squeue || rc=1
  fi
  echo "export SLURM_CONF=$conf"
  return $rc
}

case $cmd in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
esac
