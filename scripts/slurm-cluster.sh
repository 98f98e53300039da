#!/usr/bin/env bash
# A throw-away single-node Slurm cluster on this machine, for the tests of `grade batch --backend slurm`.
#
#   scripts/slurm-cluster.sh start [--accounting]   install what is missing, configure, start, wait until idle
#   scripts/slurm-cluster.sh stop                    stop the daemons (slurmd, slurmctld, slurmdbd, mariadb)
#   scripts/slurm-cluster.sh status                  what runs, in which mode; exit 0 when sinfo answers
#
# Debian-like machine, as root. One node (this host, `hostname -s`, with its real CPUs and memory),
# one partition `debug`. `start` is idempotent: run again in the same mode it only checks; in the
# other mode (with or without slurmdbd accounting) it rewrites slurm.conf and restarts slurmctld and
# slurmd, so one machine tests both. Packages come from apt-get, only when missing. The daemons are
# started by hand (no systemd needed) and log to /var/log/slurm/. Job ids survive a restart (the
# state folder is kept), so accounting never sees one id twice.
#
# Not a production set-up: root runs the daemons, munge's key is the package's, nothing is hardened.
set -euo pipefail

CONF_DIR=/etc/slurm
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm
MODE_FILE=$CONF_DIR/.grader-test-cluster-mode
CLUSTER=grader
PARTITION=debug

say() { echo "slurm-cluster: $*" >&2; }
die() { say "$*"; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts daemons)"; }

install_missing() {
    local missing=()
    for package in "$@"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    say "installing ${missing[*]}"
    command -v apt-get >/dev/null || die "apt-get not found: install ${missing[*]} by hand"
    # policy-rc.d keeps the packages' own service starts away: this script starts the daemons.
    local policy=/usr/sbin/policy-rc.d made_policy=0
    if [ ! -e $policy ]; then printf '#!/bin/sh\nexit 101\n' > $policy; chmod 755 $policy; made_policy=1; fi
    local apt_status=0
    if ! ls /var/lib/apt/lists/*_Packages* >/dev/null 2>&1; then  # a fresh machine: no package lists yet
        apt-get update -q >/dev/null || apt_status=$?
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
        || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
             --no-install-recommends "${missing[@]}" >/dev/null; } || apt_status=$?
    [ $made_policy = 1 ] && rm -f $policy
    [ $apt_status = 0 ] || die "apt-get could not install ${missing[*]}"
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2; shift 2
    local deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || return 1
        sleep 0.5
    done
    say "$what"
}

write_slurm_conf() {  # write_slurm_conf ACCOUNTING(0|1)
    local host cpus memory
    host=$(hostname -s)
    cpus=$(nproc --all)
    memory=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
    memory=$((memory - 512))  # the daemons' own share; slurmd refuses a node claiming more than it has
    mkdir -p $CONF_DIR $STATE $SPOOL $LOGS
    {
        echo "# Written by scripts/slurm-cluster.sh: a single-node test cluster."
        echo "ClusterName=$CLUSTER"
        echo "SlurmctldHost=$host"
        echo "AuthType=auth/munge"
        echo "SlurmUser=root"
        echo "SlurmctldPidFile=/run/slurmctld.pid"
        echo "SlurmdPidFile=/run/slurmd.pid"
        echo "StateSaveLocation=$STATE"
        echo "SlurmdSpoolDir=$SPOOL"
        echo "SlurmctldLogFile=$LOGS/slurmctld.log"
        echo "SlurmdLogFile=$LOGS/slurmd.log"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core_Memory"
        echo "SchedulerType=sched/backfill"
        echo "ReturnToService=2"
        echo "MinJobAge=600"  # an ended job stays in scontrol for 10 minutes (the state without accounting)
        echo "KillWait=5"
        echo "JobAcctGatherType=jobacct_gather/linux"
        echo "JobAcctGatherFrequency=5"
        echo "MpiDefault=none"
        if [ "$1" = 1 ]; then
            echo "AccountingStorageType=accounting_storage/slurmdbd"
            echo "AccountingStorageHost=localhost"
        else
            echo "AccountingStorageType=accounting_storage/none"
        fi
        echo "NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN"
        echo "PartitionName=$PARTITION Nodes=$host Default=YES MaxTime=INFINITE State=UP"
    } > $CONF_DIR/slurm.conf
    [ -f $CONF_DIR/cgroup.conf ] || echo "CgroupPlugin=autodetect" > $CONF_DIR/cgroup.conf
}

start_munge() {
    if pgrep -x munged >/dev/null; then return 0; fi
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    [ -f /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
    chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
    chmod 400 /etc/munge/munge.key
    if id munge >/dev/null 2>&1; then
        su -s /bin/sh munge -c "/usr/sbin/munged" || /usr/sbin/munged --force
    else
        /usr/sbin/munged --force
    fi
    wait_for 20 "munge up" sh -c "munge -n | unmunge" || die "munge did not start"
}

start_mariadb() {
    if mysqladmin ping >/dev/null 2>&1; then return 0; fi
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql >/dev/null 2>&1 || mysql_install_db --user=mysql >/dev/null
    (setsid mysqld_safe --user=mysql >/dev/null 2>&1 &)
    wait_for 60 "mariadb up" mysqladmin ping || die "mariadb did not start (see /var/log/mysql/)"
}

start_slurmdbd() {
    if pid_alive /run/slurmdbd.pid; then return 0; fi
    cat > $CONF_DIR/slurmdbd.conf <<EOF
# Written by scripts/slurm-cluster.sh
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
LogFile=$LOGS/slurmdbd.log
PidFile=/run/slurmdbd.pid
EOF
    chmod 600 $CONF_DIR/slurmdbd.conf
    /usr/sbin/slurmdbd
    wait_for 60 "slurmdbd up" sacctmgr -n list cluster || die "slurmdbd did not start (see $LOGS/slurmdbd.log)"
    sacctmgr -i -Q add cluster $CLUSTER >/dev/null 2>&1 || true
}

stop_daemon() {  # stop_daemon NAME PIDFILE
    local pid
    if [ -f "$2" ]; then pid=$(cat "$2"); else pid=$(pgrep -x "$1" | head -1 || true); fi
    [ -n "${pid:-}" ] || return 0
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$2"
}

node_idle() { sinfo -h -N -o '%t' 2>/dev/null | grep -qx 'idle'; }

start() {
    local accounting=0
    [ "${1:-}" = "--accounting" ] && accounting=1
    need_root
    local packages=(munge slurm-client slurmctld slurmd)
    [ $accounting = 1 ] && packages+=(slurmdbd mariadb-server)
    install_missing "${packages[@]}"
    local wanted="accounting=$accounting"
    if [ "$(cat $MODE_FILE 2>/dev/null)" = "$wanted" ] && pid_alive /run/slurmctld.pid && pid_alive /run/slurmd.pid \
            && node_idle; then
        say "already running ($wanted)"
        return 0
    fi
    start_munge
    stop_daemon slurmd /run/slurmd.pid
    stop_daemon slurmctld /run/slurmctld.pid
    write_slurm_conf $accounting
    if [ $accounting = 1 ]; then start_mariadb; start_slurmdbd; fi
    echo "$wanted" > $MODE_FILE
    /usr/sbin/slurmctld
    /usr/sbin/slurmd
    wait_for 60 "slurmctld answers" scontrol ping || die "slurmctld did not start (see $LOGS/slurmctld.log)"
    # a node left down or drained by an earlier run comes back
    scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true
    wait_for 60 "node $(hostname -s) idle ($wanted)" node_idle \
        || die "the node did not become idle: $(sinfo -h -N -o '%t %E' 2>&1) (see $LOGS/slurmd.log)"
}

stop() {
    need_root
    scancel --user="$(id -un)" >/dev/null 2>&1 || true
    stop_daemon slurmd /run/slurmd.pid
    stop_daemon slurmctld /run/slurmctld.pid
    stop_daemon slurmdbd /run/slurmdbd.pid
    if mysqladmin ping >/dev/null 2>&1; then mysqladmin shutdown >/dev/null 2>&1 || true; fi
    rm -f $MODE_FILE
    say "stopped"
}

status() {
    local mode
    mode=$(cat $MODE_FILE 2>/dev/null || echo "not started by this script")
    if sinfo -h >/dev/null 2>&1; then
        echo "running ($mode)"
        sinfo -N -o '%N %P %t %c %m'
    else
        echo "not running"
        return 1
    fi
}

case "${1:-}" in
    start) shift; start "$@" ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start [--accounting] | stop | status" >&2; exit 2 ;;
esac
