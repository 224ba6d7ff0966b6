#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying crux's submitit_slurm launcher (as root, on 127.0.0.1).
#
#   sudo bash scripts/slurm.sh start DIR   # installs slurm-wlm and munge if absent; prints `export SLURM_CONF=...`
#   SLURM_CONF=DIR/slurm.conf crux-sweep accumulation hydra/launcher=submitit_slurm
#   sudo bash scripts/slurm.sh stop DIR
#
# Everything lives in DIR: a munge key and socket, slurm.conf (free ports, every file path under DIR), the
# controller's state, the logs. slurmctld and slurmd run in the foreground (-D) as background processes, with
# no cgroup plugin (proctrack/linuxproc, task/none), so the cluster starts in a container without systemd.
# Clients (sbatch, squeue, submitit) find it through SLURM_CONF. Slurm 22.05 has no accounting here, so
# `sacct` answers nothing; submitit then follows jobs by their result files.
set -euo pipefail

# shellcheck source=scripts/services.sh
source "$(dirname "$0")/services.sh"
service_arguments "start|stop DIR" "$@"  # sets action and dir

stop() {
    stop_session "$dir/slurmd.session"
    stop_session "$dir/slurmctld.session"
    stop_session "$dir/munge/munged.session"
}

start() {
    [[ $(id -u) -eq 0 ]] || { echo "slurm.sh: start needs root (slurmd runs jobs as their users)" >&2; exit 1; }
    command -v slurmctld >/dev/null && command -v munged >/dev/null || install_packages slurm-wlm munge
    mkdir -p "$dir"/{munge,state,spool}
    chmod 755 "$dir"
    chown munge:munge "$dir/munge"
    chmod 700 "$dir/munge"
    runuser -u munge -- test -w "$dir/munge" || {
        echo "slurm.sh: user munge cannot reach $dir (a folder above it is closed to other users); choose a" \
             "folder under /tmp or /srv" >&2; exit 1; }
    local key=$dir/munge/munge.key socket=$dir/munge/munge.socket
    [[ -f $key ]] || runuser -u munge -- mungekey --create --keyfile="$key"
    start_session "$dir/munge/munged.session" "$dir/munged.log" runuser -u munge -- munged --foreground --force \
        --socket="$socket" --key-file="$key" --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
        --seed-file="$dir/munge/munged.seed"
    wait_until 10 "$dir/munge/munged.session" "$dir/munged.log" munged \
        bash -c "munge --socket='$socket' -n | unmunge --socket='$socket'" || { stop; exit 1; }

    local host cpus memory
    host=$(hostname -s)
    cpus=$(nproc)
    memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 9 / 10 ))
    cat >"$dir/slurm.conf" <<EOF
ClusterName=crux
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
MinJobAge=3600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$dir/slurm.conf
    start_session "$dir/slurmctld.session" "$dir/slurmctld.log" slurmctld -D -i -f "$SLURM_CONF"
    wait_until 30 "$dir/slurmctld.session" "$dir/slurmctld.log" slurmctld scontrol ping || { stop; exit 1; }
    start_session "$dir/slurmd.session" "$dir/slurmd.log" slurmd -D -f "$SLURM_CONF"
    wait_until 30 "$dir/slurmd.session" "$dir/slurmd.log" "slurmd (node $host idle)" \
        bash -c "sinfo -h -n '$host' -o %t | grep -qx idle" || { stop; exit 1; }
    echo "export SLURM_CONF=$SLURM_CONF"
}

case $action in
    start) start ;;
    stop) stop ;;
    *) usage ;;
esac
