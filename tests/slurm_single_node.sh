#!/bin/bash
# A real single-node Slurm cluster for tests/test_executors.py (root; Debian's slurmctld,
# slurmd, slurm-client, munge, slurmdbd and mariadb-server, which `make tools` installs).
#   slurm_single_node.sh up DIR     write DIR/slurm.conf, start munged, MariaDB, slurmdbd,
#                                   slurmctld and slurmd; returns once the node is idle
#   slurm_single_node.sh down DIR   stop them all and remove their state
# Accounting (slurmdbd) is needed: submitit learns with sacct that a job was killed.
# Clients and submitit find the cluster through SLURM_CONF=DIR/slurm.conf.
set -euo pipefail
action=$1; R=$2
export SLURM_CONF=$R/slurm.conf
if [ "$action" = down ]; then
  scancel --full --user=root >/dev/null 2>&1 || true
  scontrol shutdown >/dev/null 2>&1 || true          # slurmctld and slurmd
  # job steps whose slurmd is gone do not end by themselves: stop the ones of this cluster
  for pid in $(pgrep -x slurmstepd); do
    grep -qx "$pid" "$R/stepd-before" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  done
  for pf in $R/slurmctld.pid $R/slurmd.pid $R/slurmdbd.pid $R/db/mysqld.pid $R/munged.pid; do
    [ -f "$pf" ] && kill -TERM "$(cat "$pf")" 2>/dev/null || true
  done
  # still running (zombies aside: daemons started with setsid are reaped late here)
  alive() { ps -eo stat=,comm= | awk '$1 !~ /Z/ && $2 ~ /^(slurmctld|slurmd|slurmdbd|slurmstepd)$/'
            for pf in $R/db/mysqld.pid $R/munged.pid; do
              [ -f "$pf" ] && ps -o stat= -p "$(cat "$pf")" 2>/dev/null | grep -qv Z \
                && echo "$pf"; done; }
  for _ in $(seq 100); do [ -z "$(alive)" ] && break; sleep 0.2; done
  rm -rf "$R"
  exit 0
fi
host=$(hostname -s)
mkdir -p "$R/state" "$R/spool" "$R/log" "$R/db"
pgrep -x slurmstepd > "$R/stepd-before" || true    # another Slurm's steps are left alone
cat > "$R/slurm.conf" <<CONF
ClusterName=decobench
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=$R/state
SlurmdSpoolDir=$R/spool
SlurmctldPidFile=$R/slurmctld.pid
SlurmdPidFile=$R/slurmd.pid
SlurmctldLogFile=$R/log/slurmctld.log
SlurmdLogFile=$R/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
KillWait=5
MinJobAge=300
MailProg=/bin/true
NodeName=$host CPUs=$(nproc) RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$R/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$R/log/slurmdbd.log
PidFile=$R/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=13306
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
chmod 600 "$R/slurmdbd.conf"
wait_for() { for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
[ -f /etc/munge/munge.key ] || runuser -u munge -- mungekey --create
if ! pgrep -x munged > /dev/null; then            # a system munged serves as well
  install -d -o munge -g munge -m 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged --pid-file=/run/munge/munged.pid
  cp /run/munge/munged.pid "$R/munged.pid"
fi
mariadb-install-db --user=root --datadir="$R/db/data" --auth-root-authentication-method=normal \
  --skip-test-db > "$R/log/mariadb-install.log" 2>&1
setsid mariadbd --no-defaults --user=root --datadir="$R/db/data" --socket="$R/db/mysqld.sock" \
  --pid-file="$R/db/mysqld.pid" --port=13306 --bind-address=127.0.0.1 \
  --log-error="$R/log/mariadb.log" --innodb-buffer-pool-size=32M > /dev/null 2>&1 < /dev/null &
wait_for mariadb --no-defaults -uroot --socket="$R/db/mysqld.sock" -e 'select 1'
mariadb --no-defaults -uroot --socket="$R/db/mysqld.sock" -e "CREATE USER IF NOT EXISTS \
  'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
setsid slurmdbd -D > "$R/log/slurmdbd.out" 2>&1 < /dev/null &
wait_for sacctmgr -n show cluster
setsid slurmctld -D -i > "$R/log/slurmctld.out" 2>&1 < /dev/null &
setsid slurmd -D > "$R/log/slurmd.out" 2>&1 < /dev/null &
for _ in $(seq 300); do [ "$(sinfo -h -o %T 2>/dev/null)" = idle ] && exit 0; sleep 0.2; done
echo "the Slurm node did not become idle; logs in $R/log" >&2
exit 1
