#!/usr/bin/env bash
# A single-node SLURM on this machine, loopback only, for tests/slurm (run as root):
# munge, MariaDB (accounting's store), slurmdbd (so sacct answers: submitit polls it),
# slurmctld and slurmd, Debian 12's packages (slurm-wlm 22.05). No systemd: the daemons are
# started directly, logs under /tmp/slurm. Idempotent: on a cluster that is up it only checks
# (about 1 s); from nothing (packages included) about 12 s.
# Stop it with .ci/slurm/down.sh.
set -euo pipefail

START=$(date +%s)
LOGS=/tmp/slurm
CLUSTER=ci
PARTITION=debug
# The step credential's lifetime is also how long a requeued job waits before it may start
# again (default 120 s): a short one lets the requeue tests finish in seconds.
CRED_EXPIRE=5
DB_PASS=slurm-ci-local

say() { echo "slurm up: $*"; }
took() { echo "slurm up: $1 in $(($(date +%s) - START)) s"; }

wait_for() {  # wait_for SECONDS WHAT COMMAND...: retry COMMAND once a second
  local limit=$1 what=$2 out
  shift 2
  for _ in $(seq "$limit"); do
    if out=$("$@" 2>&1); then return 0; fi
    sleep 1
  done
  echo "slurm up: $what not ready after ${limit} s: $out" >&2
  echo "slurm up: the last lines of the logs in $LOGS:" >&2
  tail -n 5 "$LOGS"/*.log >&2 || true
  exit 1
}

alive() {  # alive PIDFILE: the daemon it names is running
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop() {  # stop PIDFILE: SIGTERM to the daemon it names, wait until it is gone
  alive "$1" || return 0
  local pid
  pid=$(cat "$1")
  kill "$pid"
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  echo "slurm up: $1's daemon ($pid) did not stop" >&2
  exit 1
}

install_conf() {  # install_conf FILE: FILE.new replaces FILE when it differs (status 0 then)
  if cmp -s "$1.new" "$1"; then rm "$1.new"; return 1; fi
  mv "$1.new" "$1"
}

cluster_ready() {  # the node idle (or running jobs) and accounting answering
  local state
  state=$(sinfo -h -n localhost -o %T) || return 1
  [[ $state =~ ^(idle|mixed|allocated) ]] || { echo "node state: $state"; return 1; }
  sacct -n -X -S now >/dev/null
}

# 1. Packages. policy-rc.d keeps the packages' scripts from starting services themselves.
PACKAGES=(munge mariadb-server slurmdbd slurmctld slurmd slurm-client)
installed=$(dpkg-query -W -f '${Status}\n' "${PACKAGES[@]}" 2>/dev/null | grep -c 'ok installed' || true)
if [[ $installed == "${#PACKAGES[@]}" ]]; then
  say "packages already installed"
else
  say "installing ${PACKAGES[*]}"
  policy_made=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy_made=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  mkdir -p "$LOGS"
  if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${PACKAGES[@]}"; } \
      >"$LOGS/apt.log" 2>&1; then
    cat "$LOGS/apt.log" >&2
    if [[ $policy_made == 1 ]]; then rm -f /usr/sbin/policy-rc.d; fi
    exit 1
  fi
  if [[ $policy_made == 1 ]]; then rm -f /usr/sbin/policy-rc.d; fi
  took "packages installed"
fi

mkdir -p "$LOGS" /var/spool/slurmctld /var/spool/slurmd /etc/slurm

# 2. munge: a key, then the daemon as its own user.
if [[ ! -s /etc/munge/munge.key ]]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
touch "$LOGS/munged.log"
chown munge:munge "$LOGS/munged.log"
if ! alive /run/munge/munged.pid; then
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid --log-file="$LOGS/munged.log"
fi
wait_for 20 munge bash -c 'munge -n | unmunge'

# 3. MariaDB on loopback, the accounting database and its user.
mkdir -p /run/mysqld
touch "$LOGS/mariadb.log"
chown mysql:mysql /run/mysqld "$LOGS/mariadb.log"
if [[ ! -d /var/lib/mysql/mysql ]]; then
  mariadb-install-db --user=mysql --datadir=/var/lib/mysql >"$LOGS/mariadb-install.log" 2>&1
fi
if ! mariadb-admin ping >/dev/null 2>&1; then
  setsid nohup /usr/sbin/mariadbd --user=mysql --bind-address=127.0.0.1 \
    --log-error="$LOGS/mariadb.log" --pid-file=/run/mysqld/mariadbd.pid </dev/null >/dev/null 2>&1 &
fi
wait_for 60 MariaDB mariadb-admin ping
mariadb <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
SQL

# 4. The configs. The node's CPUs and memory are the machine's own, as slurmd sees them.
NODE=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]*/NodeName=localhost NodeAddr=127.0.0.1/' \
  -e 's/ UpTime=.*//')
cat >/etc/slurm/slurm.conf.new <<EOF
# Written by .ci/slurm/up.sh: a single-node cluster for the tests, loopback only.
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=$CRED_EXPIRE
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$LOGS/slurmctld.pid
SlurmdPidFile=$LOGS/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
# No cgroups in a container: processes are tracked by /proc, tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# A requeued job waits for its begin time (cred_expire), then for the next scheduling pass:
# pass every second, not every 30-60 s.
SchedulerParameters=sched_interval=1,bf_interval=1
ReturnToService=2
# Jobs may be requeued (submitit requeues a signalled job with scontrol requeue).
JobRequeue=1
# A finished job leaves squeue after 10 s (sacct keeps it).
MinJobAge=10
# SIGTERM to SIGKILL: a run finishes its step and checkpoints well within it.
KillWait=15
InactiveLimit=0
# sacct answers only with accounting; submitit polls it to follow its jobs.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
$NODE State=UNKNOWN
PartitionName=$PARTITION Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
cat >/etc/slurm/slurmdbd.conf.new <<EOF
# Written by .ci/slurm/up.sh.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
CommunicationParameters=NoInAddrAny
SlurmUser=root
LogFile=$LOGS/slurmdbd.log
PidFile=$LOGS/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
chmod 0600 /etc/slurm/slurmdbd.conf.new
# A changed config restarts the daemons that read it (a second run changes nothing).
if install_conf /etc/slurm/slurmdbd.conf; then stop "$LOGS/slurmdbd.pid"; fi
if install_conf /etc/slurm/slurm.conf; then stop "$LOGS/slurmd.pid"; stop "$LOGS/slurmctld.pid"; fi

# 5. The SLURM daemons (each forks into the background), the cluster registered in between.
alive "$LOGS/slurmdbd.pid" || slurmdbd
wait_for 60 slurmdbd sacctmgr -n list cluster
if [[ -z $(sacctmgr -n -P list cluster format=cluster where cluster=$CLUSTER) ]]; then
  sacctmgr -i add cluster "$CLUSTER" >/dev/null
fi
alive "$LOGS/slurmctld.pid" || slurmctld
alive "$LOGS/slurmd.pid" || slurmd -N localhost
wait_for 60 "the node (sinfo: idle) and sacct" cluster_ready
took "up: $(sinfo -h -o '%P %D node(s) %c CPUs %m MB %T')"
