#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for trying a sweep's SLURM path before a real cluster
# (docs/cluster.md, "Try it on a one-node cluster first"). Debian's packages, no systemd, no cgroups:
#   apt-get install -y munge slurmctld slurmd slurm-client     # as root; bookworm ships slurm 22.05
#   apt-get install -y slurmdbd mariadb-server                  # accounting, for sacct (see below)
#   scripts/slurm_local.sh start     # munged, slurmctld, slurmd; prints the SLURM_CONF line to export
#   export SLURM_CONF=/tmp/wif-slurm/slurm.conf
#   python train.py -m 'loader=glob(*)' preset=smoke device=cpu hydra/launcher=slurm \
#     hydra.launcher.gpus_per_node=0 hydra.launcher.cpus_per_task=1 hydra.launcher.mem_gb=1
#   scripts/slurm_local.sh status    # the daemons, sinfo, squeue
#   scripts/slurm_local.sh stop
# Everything but munge's socket (slurm.conf, munge key, spool, state, logs, the accounting database, the jobs'
# completion log) lives in $SLURM_LOCAL_DIR (default /tmp/wif-slurm). `start` is idempotent: a running
# cluster is left as it is. With slurmdbd and mariadb installed the cluster keeps accounting, as a real one
# does: submitit learns a job's state from `sacct`, and without it a job that ends without its result file
# (killed, cancelled before it wrote one) leaves the submitting sweep waiting for ever.
# Exit 3: the packages are missing (the tests skip on it); exit 1: a daemon did not come up (its log is shown).
set -euo pipefail

DIR="${SLURM_LOCAL_DIR:-/tmp/wif-slurm}"
CONF="$DIR/slurm.conf"
CTLD_PORT="${SLURM_LOCAL_PORT:-6817}"  # slurmd listens on the next port, slurmdbd on the one after
DB_PORT="${SLURM_LOCAL_DB_PORT:-$((CTLD_PORT + 1000))}"  # mariadb, on 127.0.0.1
NODE="$(hostname -s)"
# Munge at its default socket: sacct and sacctmgr reach slurmdbd through it whatever AuthInfo says.
MUNGE_SOCKET=/run/munge/munge.socket.2

need() {
  local missing=()
  for tool in munged mungekey slurmctld slurmd sbatch squeue sinfo scontrol; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || missing+=("$tool")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "slurm_local: missing ${missing[*]}: apt-get install -y munge slurmctld slurmd slurm-client" >&2
    exit 3
  fi
  if [ "$(id -u)" != 0 ]; then
    echo "slurm_local: run as root (slurmd starts jobs as their users; munged and the spool are root's here)" >&2
    exit 3
  fi
}
export PATH="$PATH:/usr/sbin:/sbin"

accounting() {  # slurmdbd and mariadb are installed: the cluster keeps accounting
  [ "${SLURM_LOCAL_ACCOUNTING:-1}" = 1 ] && command -v slurmdbd >/dev/null 2>&1 \
    && command -v mariadbd >/dev/null 2>&1 && command -v mariadb-install-db >/dev/null 2>&1
}

alive() {  # alive PIDFILE: the daemon it names is running
  [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

write_conf() {
  # The node as slurmd sees it (CPUs, sockets, cores, threads, memory), so it is never drained for a mismatch.
  local hw
  hw="$(slurmd -C | head -1 | sed -e "s/^NodeName=[^ ]*//" -e 's/UpTime=.*//')"
  cat >"$CONF" <<EOF
# Written by scripts/slurm_local.sh: a one-node cluster for trying wif's SLURM path, not for measuring.
ClusterName=wiflocal
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$((CTLD_PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# A container has no cgroup hierarchy of its own to give slurm: track a job's processes through /proc.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
# Each job's final state also goes to a text file (one line per job, JobState=...), and finished jobs stay
# visible to squeue/scontrol for an hour (MinJobAge); sacct answers when slurmdbd runs.
AccountingStorageType=$(accounting && echo accounting_storage/slurmdbd || echo accounting_storage/none)
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$((CTLD_PORT + 2))
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.log
MinJobAge=3600
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
# scancel and a time limit send SIGTERM, then SIGKILL this much later: time for a run to close as KILLED.
KillWait=20
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
NodeName=$NODE NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  accounting || return 0
  cat >"$DIR/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=$NODE
DbdAddr=127.0.0.1
DbdPort=$((CTLD_PORT + 2))
SlurmUser=root
PidFile=$DIR/slurmdbd.pid
LogFile=$DIR/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  chmod 0600 "$DIR/slurmdbd.conf"
}

start_db() {  # mariadb on 127.0.0.1:$DB_PORT, its data in $DIR/mysql; then slurmdbd (it reads the
  # slurmdbd.conf beside $SLURM_CONF)
  if ! alive "$DIR/mariadb.pid"; then
    if [ ! -d "$DIR/mysql/mysql" ]; then
      mariadb-install-db --user=root --datadir="$DIR/mysql" --auth-root-authentication-method=socket \
        --skip-test-db >"$DIR/mariadb-install.log" 2>&1
    fi
    setsid mariadbd --user=root --datadir="$DIR/mysql" --socket="$DIR/mysql.sock" --port="$DB_PORT" \
      --bind-address=127.0.0.1 --pid-file="$DIR/mariadb.pid" --log-error="$DIR/mariadb.log" \
      --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 </dev/null >/dev/null 2>&1 &
    wait_for 60 mariadb mariadb --socket="$DIR/mysql.sock" -e "select 1"
    mariadb --socket="$DIR/mysql.sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;"
  fi
  alive "$DIR/slurmdbd.pid" || slurmdbd
  wait_for 60 slurmdbd sacctmgr -n list cluster
  sacctmgr -i add cluster wiflocal >/dev/null 2>&1 || true  # before slurmctld, which then registers with it
}

munge_answers() {
  munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1
}

start_munge() {  # ours, with a key of its own; a munged already serving the socket (the system's) is used
  alive "$DIR/munged.pid" && return 0
  munge_answers && return 0
  mkdir -p "$DIR/munge" "$(dirname "$MUNGE_SOCKET")"
  chmod 0700 "$DIR/munge"
  [ -s "$DIR/munge/munge.key" ] || mungekey --create --keyfile="$DIR/munge/munge.key" 2>/dev/null \
    || dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$DIR/munge/munge.key"
  munged --force --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCKET" --pid-file="$DIR/munged.pid" \
    --log-file="$DIR/munged.log" --seed-file="$DIR/munge/munged.seed"
  wait_for 10 munged munge_answers
}

wait_for() {  # wait_for SECONDS WHAT CMD...: until CMD succeeds
  local deadline=$((SECONDS + $1)) what="$2"
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "slurm_local: $what did not come up" >&2
      tail -n 5 "$DIR"/*.log >&2 || true
      exit 1
    fi
    sleep 0.5
  done
}

node_ready() {
  sinfo -h -n "$NODE" -o %T | grep -qE '^(idle|mixed|allocated)'
}

start() {
  need
  mkdir -p "$DIR/ctld" "$DIR/spool"
  chmod 0755 "$DIR"
  alive "$DIR/slurmctld.pid" || write_conf  # a cluster that is up keeps the conf it started with
  export SLURM_CONF="$CONF"
  start_munge
  if accounting; then start_db; fi
  if ! alive "$DIR/slurmctld.pid"; then
    slurmctld -f "$CONF"
  fi
  wait_for 30 slurmctld scontrol ping
  if ! alive "$DIR/slurmd.pid"; then
    slurmd -f "$CONF" -N "$NODE"
  fi
  wait_for 60 "node $NODE" node_ready
  scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true  # a node drained by an old run
  echo "slurm_local: up ($DIR); export SLURM_CONF=$CONF"
}

stop_daemon() {  # stop_daemon NAME: SIGTERM, then SIGKILL after 20 s
  local pidfile="$DIR/$1.pid" pid
  alive "$pidfile" || return 0
  pid="$(cat "$pidfile")"
  kill "$pid"
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  kill -9 "$pid" 2>/dev/null || true
}

stop_daemons() {  # stop_daemons NAME...: side by side, each as stop_daemon does
  local name
  for name in "$@"; do stop_daemon "$name" & done
  wait
}

stop() {
  if [ -s "$CONF" ] && alive "$DIR/slurmctld.pid"; then
    SLURM_CONF="$CONF" scancel --user=root >/dev/null 2>&1 || true  # the jobs go first, as on a shutdown
  fi
  # The node and the controller first (the controller's last records go to the accounting daemon), then the
  # rest side by side: each daemon takes about 2 s to stop, 10 s one after another.
  stop_daemons slurmd slurmctld
  stop_daemons slurmdbd mariadb munged
  echo "slurm_local: stopped ($DIR kept: logs, jobcomp.log; rm -rf it for a fresh cluster)"
}

status() {
  local up=0
  local daemons=(munged slurmctld slurmd)
  if accounting; then daemons+=(mariadb slurmdbd); fi
  for daemon in "${daemons[@]}"; do
    if alive "$DIR/$daemon.pid"; then
      echo "$daemon: running (pid $(cat "$DIR/$daemon.pid"))"
    else
      echo "$daemon: not running"
      up=1
    fi
  done
  if [ "$up" = 0 ]; then
    export SLURM_CONF="$CONF"
    sinfo
    squeue --states=all
  fi
  return "$up"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status   (state in \$SLURM_LOCAL_DIR, default /tmp/wif-slurm)" >&2; exit 2 ;;
esac
