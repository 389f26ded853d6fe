#!/bin/sh
# tests/nfs/guest/hostb.sh: pid 1 of "host B" inside the guest (own network, UTS, mount and pid namespaces).
# Gives B its own host name, machine id and boot id (bind mounts, testing-notes §2.9), its own rpcbind and
# statd (NLM for v3 from this network namespace), and its mounts of the server at 10.99.9.9; then writes
# /tmp/hostb.ready (the tmpfs is shared with host A) and waits to be killed with the guest.
share=$1
log() { echo "[hostb] $*"; }
hostname hostb
mkdir -p /tmp/hostb
cat /proc/sys/kernel/random/uuid | tr -d - > /tmp/hostb/machine-id
cat /proc/sys/kernel/random/uuid > /tmp/hostb/boot_id
mount --bind /tmp/hostb/machine-id /etc/machine-id
mount --bind /tmp/hostb/boot_id /proc/sys/kernel/random/boot_id
log "machine-id $(cat /etc/machine-id) boot_id $(cat /proc/sys/kernel/random/boot_id)"
# B's own rpcbind/statd: a private /run and /var/lib/nfs in this mount namespace
. "$(dirname "$0")/keep.sh"  # the checkout stays in view if it lies under /run (see keep.sh)
tmpfs_keeping /run "$share/keep"; tmpfs_keeping /var/lib/nfs "$share/keep"
mkdir -p /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak
rpcbind -w; rpc.statd --no-notify
mkdir -p /mnt/b4 /mnt/b3 /mnt/b4nocto /mnt/b3nocto
ok=""
timeout 60 mount -t nfs -o vers=4.2,hard,local_lock=none 10.99.9.9:/ /mnt/b4 && ok="$ok b4"
timeout 60 mount -t nfs -o vers=3,hard,proto=tcp,local_lock=none 10.99.9.9:/srv/nfs /mnt/b3 && ok="$ok b3"
timeout 60 mount -t nfs -o vers=4.2,hard,local_lock=none,nocto,nosharecache 10.99.9.9:/ /mnt/b4nocto && ok="$ok b4nocto"
timeout 60 mount -t nfs -o vers=3,hard,proto=tcp,local_lock=none,nocto,nosharecache 10.99.9.9:/srv/nfs /mnt/b3nocto && ok="$ok b3nocto"
log "mounted:$ok"
echo "$ok" > /tmp/hostb.ready
exec sleep 100000
