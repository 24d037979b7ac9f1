#!/usr/bin/env bash
# CI's Slurm step (called by .ci/run before the tests): a single-node Slurm cluster on this machine
# from Debian's packages (slurm-wlm, munge): munged, slurmctld and slurmd, one partition `lab` with
# this host as its only node. tests/e2e/test_fleet_slurm.py then submits a real job array to it.
#
#   .ci/slurm.sh          install (if missing), configure (if not configured by someone else), start
# Writes /etc/slurm/slurm.conf only when there is none or it is the one this script wrote.
set -euo pipefail
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
CONF=/etc/slurm/slurm.conf
MARK="# written by graph-lab .ci/slurm.sh"

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

# munge: a key (the package makes one; make it if absent), then the daemon as its own user.
if [ ! -s /etc/munge/munge.key ]; then
    $SUDO mungekey --create --force 2>/dev/null || $SUDO sh -c 'dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null'
    $SUDO chown munge:munge /etc/munge/munge.key && $SUDO chmod 600 /etc/munge/munge.key
fi
$SUDO mkdir -p /run/munge && $SUDO chown munge:munge /run/munge
if ! munge -n >/dev/null 2>&1; then
    $SUDO -u munge /usr/sbin/munged 2>/dev/null || $SUDO runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 20); do munge -n >/dev/null 2>&1 && break; sleep 0.5; done
fi
munge -n | unmunge >/dev/null

# slurm.conf for one node: this host, as slurmd sees it (CPUs, memory).
node_line="$(slurmd -C | head -1)"
node="$(hostname -s)"
if [ ! -f "$CONF" ] || grep -qF "$MARK" "$CONF"; then
    $SUDO tee "$CONF" >/dev/null <<CONFEOF
$MARK
ClusterName=graphlab
SlurmctldHost=$node
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
$node_line State=UNKNOWN
PartitionName=lab Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONFEOF
fi
$SUDO mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm

pgrep -x slurmctld >/dev/null || $SUDO slurmctld
pgrep -x slurmd >/dev/null || $SUDO slurmd
for _ in $(seq 60); do
    state="$(sinfo -h -n "$node" -o %t 2>/dev/null || true)"
    case "$state" in idle*|mix*|alloc*) break;; esac
    sleep 1
done
sinfo
case "$(sinfo -h -n "$node" -o %t)" in
    idle*|mix*|alloc*) echo "slurm: node $node is up";;
    *) echo "slurm: node $node did not come up"; $SUDO tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log; exit 1;;
esac
