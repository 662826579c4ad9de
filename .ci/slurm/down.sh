#!/usr/bin/env bash
# Stops the single-node SLURM that .ci/slurm/up.sh started (each daemon by its pid file); the
# packages, configs and the accounting database stay, so the next up.sh is quick.
set -uo pipefail

LOGS=/tmp/slurm

stop() {  # stop NAME PIDFILE: SIGTERM, then wait up to 20 s for it to exit
  local name=$1 pidfile=$2 pid
  [[ -s $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 40); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "slurm down: $name ($pid) still running after 20 s" >&2
      return 1
    fi
    echo "slurm down: $name stopped"
  fi
  rm -f "$pidfile"
}

status=0
stop slurmd "$LOGS/slurmd.pid" || status=1
stop slurmctld "$LOGS/slurmctld.pid" || status=1
stop slurmdbd "$LOGS/slurmdbd.pid" || status=1
stop MariaDB /run/mysqld/mariadbd.pid || status=1
stop munged /run/munge/munged.pid || status=1
exit $status
