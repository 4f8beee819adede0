#!/usr/bin/env bash
# Several hosts on one machine: scripts/testbed.sh up|down|status [N]
#
# `up` makes N hosts h1..hN (2-4, default 4) as network namespaces, each on a
# bridge with its own address and hostname, its own OpenSSH server (key login)
# and its own slurmd; one slurmctld and one munged serve them all from the root
# namespace. Nothing can leave the box: the hosts have no default route.
# `down` stops every daemon and removes every trace, also after a partial `up`.
# `exec hX CMD...` runs a command inside host hX (its network and hostname).
# docs/testbed.md says how to use it; run as root.
set -Eeuo pipefail
trap 'case $BASH_COMMAND in return*) ;; *) say "line $LINENO failed: $BASH_COMMAND" ;; esac' ERR
here=$(cd "$(dirname "$0")" && pwd)

dir=${LATTICE_TESTBED_DIR:-/run/lattice-testbed}
net=${LATTICE_TESTBED_NET:-10.213.15}    # the hosts' /24: hX is $net.X, the root namespace $net.254
cpus=${LATTICE_TESTBED_CPUS:-8}          # CPUs each slurmd claims (more than the box has is fine)
bridge=ltb0
head_name=tbhead                         # the root namespace's name on the bridge (slurmctld's host)
head_ip=$net.254
max_hosts=4
hosts_begin="# lattice-testbed begin (scripts/testbed.sh down removes this block)"
hosts_end="# lattice-testbed end"
marker=.lattice-testbed                  # in the state directory: `down` removes only a directory holding it

[[ $net =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "testbed: LATTICE_TESTBED_NET is three numbers like 10.213.15" >&2; exit 2; }

say() { echo "testbed: $*" >&2; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
die() { say "$*"; exit 1; }

host_ip() { echo "$net.${1#h}"; }
host_names() { local i; for ((i = 1; i <= $1; i++)); do echo "h$i"; done; }
# The hosts of the testbed that is up (from its state), else none.
up_hosts() { [ -f "$dir/hosts.list" ] && cat "$dir/hosts.list" || true; }

# --- running things inside a host -------------------------------------------
# Each host is a network namespace (/run/netns/hX, from `ip netns add`) and a
# UTS namespace kept in $dir/uts/hX, so every daemon and session of hX sees
# the hostname hX. nsenter, not `ip netns exec`: the latter remounts /sys and
# hides the cgroup mounts slurmd needs.
enter_host() { enter=(nsenter --net="/run/netns/$1" --uts="$dir/uts/$1"); }
in_host() { local enter; enter_host "$1"; shift; "${enter[@]}" "$@"; }
in_head() { nsenter --uts="$dir/uts/$head_name" "$@"; }

# start_daemon NAME CMD...: runs CMD in the background, detached from our
# stdin/stdout (a caller reading our output must not wait for the daemons)
# and from our lock (fd 9: it must not outlive this command),
# and records its pid in $dir/pids/NAME. CMD is a program, not a shell
# function, and its wrappers (nsenter) exec: the pid is the daemon's own.
start_daemon() {
    local name=$1; shift
    "$@" </dev/null >>"$dir/log/$name.out" 2>&1 9>&- &
    echo $! >"$dir/pids/$name"
    disown $!    # no "Killed" notice from this shell when `down` stops it
}

# --- up ----------------------------------------------------------------------
make_network() {
    local h
    ip link add "$bridge" type bridge
    ip link set "$bridge" alias "$dir"    # whose testbed it is (refuse_if_owned_elsewhere)
    ip addr add "$head_ip/24" dev "$bridge"
    ip link set "$bridge" up
    for h in "${hosts[@]}"; do
        ip netns add "$h"
        ip link add "ltb-$h" type veth peer name eth0 netns "$h"
        ip link set "ltb-$h" master "$bridge" up
        ip -n "$h" addr add "$(host_ip "$h")/24" dev eth0
        ip -n "$h" link set eth0 up
        ip -n "$h" link set lo up
    done
}

make_uts() {
    local h
    mkdir -p "$dir/uts"
    for h in "${hosts[@]}" "$head_name"; do
        touch "$dir/uts/$h"
        unshare --uts="$dir/uts/$h" hostname "$h"
    done
}

# The names go into /etc/hosts (a marked block, removed by `down`): every
# program must resolve them, in the root namespace and in each host (they
# share the root's files), through plain getaddrinfo: Slurm, ssh, MPICH's
# hydra and Lattice's own daemons alike. A private hosts file would only
# reach the programs that can be pointed at one. ssh's config and slurm.conf
# carry the addresses too, so they need no resolver at all.
write_hosts() {
    local h
    {
        echo "$head_ip $head_name"
        for h in "${hosts[@]}"; do echo "$(host_ip "$h") $h"; done
    } >"$dir/hosts"
    printf '%s\n' "${hosts[@]}" >"$dir/hostfile"
    remove_hosts_block
    # appended in place, not a new file renamed over it: in a container
    # /etc/hosts is often a bind mount that a rename cannot replace
    [ ! -s /etc/hosts ] || [ -z "$(tail -c 1 /etc/hosts)" ] || echo >>/etc/hosts
    { echo "$hosts_begin"; cat "$dir/hosts"; echo "$hosts_end"; } >>/etc/hosts
}

start_munge() {
    # the key is secret; the socket is for everyone (munged insists)
    mkdir -p "$dir/munge" "$dir/munge-socket"
    chmod 700 "$dir/munge"
    chmod 755 "$dir/munge-socket"
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
    start_daemon munged munged -F --key-file="$dir/munge/munge.key" \
        --socket="$dir/munge-socket/munge.socket" --pid-file="$dir/munge/munged.pid" \
        --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
}

write_ssh_config() {
    local s=$dir/ssh h
    mkdir -p "$s"
    chmod 700 "$s"
    ssh-keygen -q -t ed25519 -N '' -C lattice-testbed-host -f "$s/host_ed25519_key"
    ssh-keygen -q -t ed25519 -N '' -C lattice-testbed -f "$s/id_ed25519"
    cp "$s/id_ed25519.pub" "$s/authorized_keys"
    # one host key for all hosts, known under every name and address
    local names=()
    for h in "${hosts[@]}"; do names+=("$h" "$(host_ip "$h")"); done
    echo "$(IFS=,; echo "${names[*]}") $(cut -d' ' -f1,2 "$s/host_ed25519_key.pub")" >"$s/known_hosts"
    cat >"$s/sshd_config" <<EOF
# sshd of every testbed host; ListenAddress and PidFile come on its command line
HostKey $s/host_ed25519_key
AuthorizedKeysFile $s/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# the keys are in the testbed's own 0700 directory, whose parents may be /tmp's
StrictModes no
X11Forwarding no
PrintMotd no
PrintLastLog no
# sessions find the testbed's Slurm
SetEnv SLURM_CONF=$dir/slurm/slurm.conf
# the cheapest key exchange (REFERENCE.md 9); room for parallel launches
KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org
MaxStartups 100:30:200
Subsystem sftp internal-sftp
EOF
    {
        for h in "${hosts[@]}"; do printf 'Host %s\n    HostName %s\n' "$h" "$(host_ip "$h")"; done
        cat <<EOF
Host h? $net.*
    User root
    IdentityFile $s/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $s/known_hosts
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
    BatchMode yes
    KexAlgorithms curve25519-sha256,curve25519-sha256@libssh.org
    ConnectTimeout 5
    LogLevel ERROR
EOF
    } >"$s/config"
}

start_sshds() {
    local h enter
    mkdir -p /run/sshd    # sshd's privilege separation directory
    for h in "${hosts[@]}"; do
        enter_host "$h"
        start_daemon "sshd-$h" "${enter[@]}" /usr/sbin/sshd -D -f "$dir/ssh/sshd_config" \
            -o ListenAddress="$(host_ip "$h")" -o PidFile="$dir/run/sshd-$h.pid" \
            -E "$dir/log/sshd-$h.log"
    done
}

write_slurm_config() {
    local n=${#hosts[@]}
    mkdir -p "$dir/slurm" "$dir/slurm/state" "$dir/slurm/spool"
    cat >"$dir/slurm/slurm.conf" <<EOF
# The testbed's Slurm (scripts/testbed.sh): one slurmctld in the root
# namespace, one slurmd per host, all state under $dir.
ClusterName=lattice-testbed
SlurmctldHost=$head_name($head_ip)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge-socket/munge.socket
StateSaveLocation=$dir/slurm/state
SlurmdSpoolDir=$dir/slurm/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
# no cgroups: processes tracked through /proc, tasks not bound
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# each slurmd claims $cpus CPUs whatever the box has
SlurmdParameters=config_overrides
# no 1-3 s waits between back-to-back jobs; quick ends
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
KillWait=2
InactiveLimit=0
ReturnToService=2
MailProg=/bin/true
NodeName=h[1-$n] NodeAddr=$net.[1-$n] CPUs=$cpus State=UNKNOWN
PartitionName=testbed Nodes=h[1-$n] Default=YES MaxTime=INFINITE State=UP
EOF
}

start_slurm() {
    local h enter
    export SLURM_CONF=$dir/slurm/slurm.conf
    start_daemon slurmctld nsenter --uts="$dir/uts/$head_name" slurmctld -D -i -f "$SLURM_CONF"
    for h in "${hosts[@]}"; do
        enter_host "$h"
        start_daemon "slurmd-$h" "${enter[@]}" slurmd -D -N "$h" -f "$SLURM_CONF"
    done
}

write_env() {
    cat >"$dir/testbed.env" <<EOF
# source this: the testbed's Slurm, ssh and hosts (scripts/testbed.sh)
export LATTICE_TESTBED_DIR=$dir
export LATTICE_TESTBED_HOSTS="${hosts[*]}"
export LATTICE_TESTBED_HOSTFILE=$dir/hostfile
export LATTICE_TESTBED_SSH_CONFIG=$dir/ssh/config
export LATTICE_TESTBED_SSH="ssh -F $dir/ssh/config"
# the root namespace as the hosts reach it (not 127.0.0.1, which is each host's own)
export LATTICE_TESTBED_HEAD=$head_name
export LATTICE_TESTBED_HEAD_ADDR=$head_ip
export SLURM_CONF=$dir/slurm/slurm.conf
EOF
}

# The daemons `up` started that have ended already.
ended_daemons() {
    local f
    for f in "$dir"/pids/*; do
        [ -d "/proc/$(cat "$f")" ] || echo "${f##*/}"
    done
}

# wait_until SECONDS WHAT CMD...: retries CMD until it succeeds; gives up at
# once if a daemon has ended (it will not come back).
wait_until() {
    local limit=$1 what=$2 t0=$SECONDS ended; shift 2
    until "$@" >/dev/null 2>&1; do
        ended=$(ended_daemons)
        [ -z "$ended" ] || { say "waiting for $what: ended: "$ended" (logs in $dir/log)"; return 1; }
        ((SECONDS - t0 < limit)) || { say "gave up waiting for $what after ${limit}s"; return 1; }
        sleep 0.1
    done
}

ssh_answers() { [ "$(ssh -F "$dir/ssh/config" "$1" hostname)" = "$1" ]; }

all_idle() {
    local states
    states=$(sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
    [ "$(grep -c ' idle$' <<<"$states")" -eq ${#hosts[@]} ]
}

wait_ready() {
    local h pids=() rc=0
    for h in "${hosts[@]}"; do
        wait_until 20 "sshd on $h" ssh_answers "$h" &
        pids+=($!)
    done
    wait_until 30 "every slurmd idle in sinfo" all_idle || rc=1
    for h in "${pids[@]}"; do wait "$h" || rc=1; done
    return $rc
}

# After a failed `up`: the end of the logs of the daemons that ended, or of all.
show_failure() {
    local ended logs=() d
    ended=$(ended_daemons 2>/dev/null) || true
    for d in $ended; do logs+=("$dir/log/$d".*); done
    [ ${#logs[@]} -gt 0 ] || logs=("$dir"/log/*)
    say "up failed: taking down what was started; the end of its logs:"
    tail -n 8 "${logs[@]}" >&2 2>/dev/null || true
}

up() {
    local n=${1:-4}
    [[ $n =~ ^[2-4]$ ]] || die "N must be 2, 3 or 4 (got $n)"
    [ "$(id -u)" -eq 0 ] || die "run as root: it makes namespaces, a bridge and daemons"
    if [ -f "$dir/ready" ]; then
        local was; was=$(up_hosts | wc -l)
        [ "$was" -eq "$n" ] || die "already up with $was hosts; run '$0 down' first"
        hosts=($(up_hosts))
        export SLURM_CONF=$dir/slurm/slurm.conf
        if wait_ready; then say "already up: ${hosts[*]}"; return 0; fi
        say "up but not answering: taking it down and starting again"
    fi
    down quiet
    if [ -d "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
        die "$dir holds files the testbed did not make: choose another LATTICE_TESTBED_DIR"
    fi
    . "$here/lib/packages.sh"
    ensure_packages openssh-server munge slurmctld slurmd slurm-client

    hosts=($(host_names "$n"))
    local t0=$EPOCHREALTIME
    # a failed or interrupted `up` leaves nothing behind
    trap 'exit 130' INT TERM
    trap 'show_failure; down quiet' EXIT
    # others may pass through (munge's socket) but not list; the secrets
    # (ssh and munge keys) are in 0700 directories below
    mkdir -p "$dir"
    : >"$dir/$marker"
    chmod 711 "$dir"
    mkdir -p "$dir/log" "$dir/pids" "$dir/run"
    printf '%s\n' "${hosts[@]}" >"$dir/hosts.list"
    make_network
    make_uts
    write_hosts
    start_munge
    write_ssh_config
    start_sshds
    write_slurm_config
    start_slurm
    write_env
    wait_ready
    trap - EXIT INT TERM
    touch "$dir/ready"
    say "up: ${hosts[*]} in $(since "$t0") s; source $dir/testbed.env"
}

# --- down ----------------------------------------------------------------------
# The names (h1..h4, $bridge) are the machine's: one testbed at a time. The
# bridge's alias names the state directory of the testbed that made it.
refuse_if_owned_elsewhere() {
    local owner
    owner=$(cat "/sys/class/net/$bridge/ifalias" 2>/dev/null) || return 0
    [ -z "$owner" ] || [ "$owner" = "$dir" ] ||
        die "the testbed of $owner is up: LATTICE_TESTBED_DIR=$owner $0 down first"
}

remove_hosts_block() {
    local at kept
    at=$(grep -bxF "$hosts_begin" /etc/hosts | head -n 1 | cut -d: -f1) || true
    [ -n "$at" ] || return 0
    # Our block is last: cut the file there, so that other programs reading
    # /etc/hosts meanwhile never see it empty. Else (lines added after it)
    # rewrite it without the block.
    if [ "$(tail -n 1 /etc/hosts)" = "$hosts_end" ] && [ "$(grep -cxF "$hosts_begin" /etc/hosts)" -eq 1 ]; then
        truncate -s "$at" /etc/hosts
    else
        kept=$(awk -v b="$hosts_begin" -v e="$hosts_end" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' /etc/hosts)
        printf '%s\n' "$kept" >/etc/hosts
    fi
}

# The pids to stop: every process inside a host's network namespace (its
# daemons, their job steps, ssh sessions), and the daemons we started in the
# root namespace. Those are found by their command lines, which name our
# state directory, not only by their pid files: an `up` killed outright may
# have started one without writing its pid down.
testbed_pids() {
    local h
    for h in $(host_names $max_hosts); do
        [ -e "/run/netns/$h" ] && ip netns pids "$h" 2>/dev/null
    done
    ps -e -o pid=,comm=,args= | awk -v d="$dir/" \
        '($2 == "munged" || $2 == "slurmctld" || $2 == "nsenter") && index($0, d) { print $1 }'
}

stop_processes() {
    local pids t0=$SECONDS
    pids=$(testbed_pids | sort -u)
    [ -n "$pids" ] || return 0
    kill -TERM $pids 2>/dev/null || true
    # daemons take up to ~2 s on SIGTERM (REFERENCE.md 9); then no more waiting
    while pids=$(testbed_pids | sort -u) && [ -n "$pids" ]; do
        if ((SECONDS - t0 >= 3)); then kill -KILL $pids 2>/dev/null || true; fi
        ((SECONDS - t0 < 10)) || { say "still running: $pids"; return 1; }
        sleep 0.1
    done
}

remove_network() {
    local h t0=$SECONDS
    for h in $(host_names $max_hosts); do
        ip link del "ltb-$h" 2>/dev/null || true
        [ -e "/run/netns/$h" ] && ip netns del "$h"
    done
    ip link del "$bridge" 2>/dev/null || true
    # `ip netns del` is asynchronous: wait for the veths to go
    while ip -o link show | grep -qE ": (ltb-h[0-9]+|$bridge)[@:]"; do
        ((SECONDS - t0 < 10)) || { say "links still there after 10 s"; return 1; }
        sleep 0.1
    done
}

down() {
    local quiet=${1:-}
    [ "$(id -u)" -eq 0 ] || die "run as root"
    refuse_if_owned_elsewhere
    local t0=$EPOCHREALTIME
    stop_processes
    remove_network
    local f
    for f in "$dir"/uts/*; do
        [ -e "$f" ] && { umount "$f" 2>/dev/null || true; }
    done
    remove_hosts_block
    # only a directory the testbed made (LATTICE_TESTBED_DIR may name any)
    if [ -e "$dir/$marker" ]; then rm -rf "$dir"; fi
    [ -n "$quiet" ] || say "down in $(since "$t0") s"
}

# --- status ----------------------------------------------------------------------
daemon_state() {
    local f=$dir/pids/$1
    if [ -f "$f" ] && [ -d "/proc/$(cat "$f")" ]; then echo "$1 $(cat "$f")"; else echo "$1 DOWN"; fi
}

status() {
    local hosts h
    hosts=($(up_hosts))
    # exit 3 when down, as `systemctl status` does for a unit not running
    if [ ${#hosts[@]} -eq 0 ]; then echo "testbed: down"; exit 3; fi
    [ -f "$dir/ready" ] && echo "testbed: up, $dir" || echo "testbed: partly up (no 'ready'), $dir"
    printf '%-8s %-15s %-10s %s\n' HOST ADDRESS HOSTNAME DAEMONS
    printf '%-8s %-15s %-10s %s, %s\n' "(root)" "$head_ip" "$(in_head hostname 2>/dev/null || echo '?')" \
        "$(daemon_state slurmctld)" "$(daemon_state munged)"
    for h in "${hosts[@]}"; do
        printf '%-8s %-15s %-10s %s, %s\n' "$h" "$(host_ip "$h")" "$(in_host "$h" hostname 2>/dev/null || echo '?')" \
            "$(daemon_state "sshd-$h")" "$(daemon_state "slurmd-$h")"
    done
    [ -f "$dir/testbed.env" ] && echo "env: source $dir/testbed.env"
    SLURM_CONF=$dir/slurm/slurm.conf sinfo -N -o '%N %t %c' 2>/dev/null || echo "sinfo: no answer"
}

# up and down one at a time on this machine (the names are the machine's)
lock() {
    exec 9>>/run/lock/lattice-testbed.lock
    flock -w 300 9 || die "another up or down has held /run/lock/lattice-testbed.lock for 5 minutes"
}

case ${1:-} in
    up) lock; up "${2:-4}" ;;
    down) lock; down ;;
    status) status ;;
    exec)
        [ $# -ge 3 ] || die "usage: $0 exec hX CMD..."
        h=$2; shift 2
        [ -e "/run/netns/$h" ] || die "no host $h"
        enter_host "$h"
        exec "${enter[@]}" "$@" ;;
    *) echo "usage: $0 up [N] | down | status | exec hX CMD..." >&2; exit 2 ;;
esac
