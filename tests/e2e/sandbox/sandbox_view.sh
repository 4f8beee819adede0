#!/bin/sh
# The node's view from inside a job (tests/e2e/test_t0810_sandbox.py): one
# "key value" line per question, so the test asserts on words, not layouts.
#   sandbox_view.sh view PATH...   the view: processes, name, /tmp, /proc/1, mounts, PATHs
#   sandbox_view.sh write          what a job of root may change: /, /usr, sysctls, mounts
#   sandbox_view.sh wait           "ready", then waits to be killed
case "$1" in
view)
    shift
    echo "node $LATTICE_NODE"
    echo "hostname $(hostname)"
    echo "pid1 $(tr '\0' ' ' </proc/1/cmdline)"
    echo "pidns $(readlink /proc/self/ns/pid)"
    echo "procs $(ps -eo pid=,comm= | awk '{print $1 ":" $2}' | tr '\n' ' ')"
    echo "tmp [$(ls -A /tmp | tr '\n' ' ')]"
    echo "mounts $(awk '{print $5}' /proc/self/mountinfo | sort | tr '\n' ' ')"
    for p in "$@"; do
        if [ -e "$p" ]; then echo "seen $p"; else echo "unseen $p"; fi
    done
    ;;
write)
    mount -o remount,rw / 2>/dev/null; echo "remount-root $?"
    mount -t tmpfs x /tmp 2>/dev/null; echo "mount-tmpfs $?"
    umount /proc/sys 2>/dev/null; echo "umount-proc-sys $?"
    (echo x >/usr/lattice-sandbox-probe) 2>/dev/null; echo "write-usr $?"
    (echo x >/lattice-sandbox-probe) 2>/dev/null; echo "write-root $?"
    (echo core >/proc/sys/kernel/core_pattern) 2>/dev/null; echo "write-sysctl $?"
    (echo x >/tmp/mine) 2>/dev/null; echo "write-tmp $?"
    echo "uid $(id -u)"
    ;;
wait)
    echo ready
    exec sleep 100000
    ;;
esac
