#!/usr/bin/env bash
# A single-node SLURM on this machine, for testing the workflow's SLURM profile (make test-slurm).
#
#   sudo bash workflow/scripts/slurm_local.sh          install (Debian), configure, start; idempotent
#   bash workflow/scripts/slurm_local.sh --check       exit 0 if the cluster answers, 1 otherwise
#
# Installs Debian's slurm-wlm and munge (apt-get), writes /etc/slurm/slurm.conf for one node (this host,
# every CPU, partition "cpu"), and starts munged, slurmctld and slurmd unless they already answer.
# Safe to rerun: packages already present are not reinstalled, a running daemon is left running
# (after a config change slurmctld is told to `scontrol reconfigure`), and a node left down or drained
# by an earlier run is resumed. Exits non-zero with one line on stderr when SLURM cannot start.
#
# Job status: accounting is off (no slurmdbd), so `sacct` knows no jobs. The workflow's SLURM profile
# therefore asks the executor plugin for `slurm-status-command: squeue`, which sees finished jobs for
# MinJobAge seconds; the plugin uses squeue only while MinJobAge >= 3 x its first status-check delay
# (40 s by default), so MinJobAge stays at 300 s here.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
LOG_DIR=/var/log/slurm
PARTITION=cpu
NODE="$(hostname -s)"

say() { echo "slurm_local: $*" >&2; }
die() { say "$*"; exit 1; }

controller_up() { scontrol ping 2>/dev/null | grep -q "is UP"; }
node_state() { sinfo -h -N -n "$NODE" -o %T 2>/dev/null | head -n1; }
node_ready() { case "$(node_state)" in idle*|mix*|alloc*|completing*) return 0 ;; *) return 1 ;; esac; }

if [[ "${1:-}" == "--check" ]]; then
    command -v sbatch >/dev/null && controller_up && node_ready && exit 0
    exit 1
fi
[[ "$(id -u)" == 0 ]] || die "must run as root (it installs packages and starts daemons)"

# 1. Packages (Debian): only what is missing.
missing=()
for pkg in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} by hand"
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. Configuration: one node with this machine's CPUs and memory, written only when it changes.
cpus="$(nproc)"
mem_mb="$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)"
mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd /run/munge
new_conf="$(mktemp)"
trap 'rm -f "$new_conf"' EXIT
cat >"$new_conf" <<EOF
# Written by workflow/scripts/slurm_local.sh: a single-node test cluster on $NODE.
ClusterName=cherry-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
# No cgroups in containers: track processes by parent id, bind no tasks.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# Finished jobs stay visible to squeue this long: the executor plugin's squeue status needs >= 120 s.
MinJobAge=300
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
changed=0
if ! cmp -s "$new_conf" "$CONF"; then
    install -m 644 "$new_conf" "$CONF"
    changed=1
fi

# 3. Daemons: munge, then the controller, then the node daemon; each only if it does not answer.
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "starting munged"
    [[ -s /etc/munge/munge.key ]] || { mungekey --create 2>/dev/null || create-munge-key -f; }
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
    chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
    for _ in $(seq 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
    munge -n | unmunge >/dev/null 2>&1 || die "munge does not answer (see /var/log/munge/munged.log)"
fi
if controller_up; then
    ((changed)) && { say "configuration changed: scontrol reconfigure"; scontrol reconfigure; }
else
    say "starting slurmctld"
    slurmctld || die "slurmctld did not start (see $LOG_DIR/slurmctld.log)"
    for _ in $(seq 30); do controller_up && break; sleep 0.5; done
    controller_up || die "slurmctld does not answer (see $LOG_DIR/slurmctld.log)"
fi
if ! pgrep -x slurmd >/dev/null; then
    say "starting slurmd"
    slurmd || die "slurmd did not start (see $LOG_DIR/slurmd.log)"
fi

# 4. Wait for the node; resume it if an earlier run left it down or drained.
for i in $(seq 60); do
    node_ready && break
    case "$(node_state)" in
        down*|drain*|fail*) scontrol update NodeName="$NODE" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.5
done
node_ready || die "node $NODE is '$(node_state)', not idle (see $LOG_DIR/slurmd.log)"
say "up: $(sinfo --version), node $NODE with $cpus CPUs in partition $PARTITION (MinJobAge 300 s)"
