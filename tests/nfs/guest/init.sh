#!/bin/sh
# tests/nfs/guest/init.sh: PID 1 of the NFS tier's guest (root = this machine's / read-only + tmpfs overlay).
# Usage (from /share/boot.sh): init.sh <share> <python> <budget secs>
# Sets up, in order: a kernel nfsd exporting a tmpfs (lease and grace 10 s), host A's v4.2 and v3 mounts
# (local_lock=none) in the root namespaces, host B in its own network, UTS, mount and pid namespaces with its
# own machine id and boot id and its own mounts of the same server address, then runs a second checkout's
# points when asked ($share/beside.sh), then points.py, and powers off. Every wait is bounded; the guest always powers off (the host's timeout is the last resort).
share=$1; py=$2; budget=$3
here=$(dirname "$0")
exec > "$share/guest.log" 2>&1
t0=$(date +%s)
say() { echo "[init +$(( $(date +%s) - t0 ))s] $*"; }
done_off() { say "powering off"; sync; echo o > /proc/sysrq-trigger 2>/dev/null; poweroff -f; }
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev 2>/dev/null
# fresh /run, /tmp and /var/lib/nfs, with the checkout, its .venv and its interpreter kept in view when they
# lie under one of them (keep.sh; $share/keep lists them)
. "$here/keep.sh"
for d in /run /tmp /var/lib/nfs; do tmpfs_keeping "$d" "$share/keep"; done
# preflight: the interpreter and the points must be there, or the host is told why in one line
for need in "$py" "$here/points.py" "$here/hostb.sh"; do
  if [ ! -e "$need" ]; then
    echo "the guest cannot see $need (kept folders: $(tr '\n' ' ' < "$share/keep")): the checkout's place is hidden in the guest; clone it under another folder and run scripts/setup there" > "$share/preflight"
    say "preflight: $(cat "$share/preflight")"; done_off
  fi
done
mkdir -p /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak /var/lib/nfs/v4recovery /run/netns
hostname nfsvm
cat /proc/sys/kernel/random/uuid | tr -d - > /etc/machine-id
say "kernel $(uname -r), machine-id $(cat /etc/machine-id)"
for m in nfsd nfsv3 nfsv4 veth; do modprobe "$m" || say "modprobe $m failed"; done
ip link set lo up

# --- the network: host B behind a veth pair; the server's address 10.99.9.9 is on lo, so host A reaches it
# locally and host B through the veth, and both mount the same source (one lock manager name).
ip addr add 10.99.9.9/32 dev lo
ip netns add hostb
ip link add veth0 type veth peer name veth1
ip link set veth1 netns hostb
ip addr add 10.99.0.1/24 dev veth0; ip link set veth0 up
ip -n hostb addr add 10.99.0.2/24 dev veth1; ip -n hostb link set veth1 up; ip -n hostb link set lo up
ip -n hostb route add 10.99.9.9/32 via 10.99.0.1

# --- the server: kernel nfsd on a tmpfs, lease and grace (nfsd's and lockd's) 10 s
mkdir -p /srv/nfs && mount -t tmpfs -o size=256m tmpfs /srv/nfs && chmod 1777 /srv/nfs
echo "/srv/nfs *(rw,no_root_squash,insecure,sync,no_subtree_check,fsid=0)" > /etc/exports
mount -t nfsd nfsd /proc/fs/nfsd
echo 10 > /proc/fs/nfsd/nfsv4leasetime; echo 10 > /proc/fs/nfsd/nfsv4gracetime
# lockd's grace too (it is 5 x nlm_timeout = 50 s unset): an NFSv4 LOCK is refused while any lock manager is
# in grace, so the first point's first lock waited ~50 s in the client's NFS4ERR_GRACE back-off
echo 10 > /proc/sys/fs/nfs/nlm_grace_period || say "nlm_grace_period not set"
rpcbind -w; rpc.statd --no-notify; exportfs -ra; rpc.nfsd 8; rpc.mountd
say "nfsd up: $(exportfs -v | tr -s ' \n' ' ')"

# --- host A's mounts
mkdir -p /mnt/a4 /mnt/a3 /mnt/a4nocto
timeout 60 mount -t nfs -o vers=4.2,hard,local_lock=none 10.99.9.9:/ /mnt/a4 && say "a4 mounted"
timeout 60 mount -t nfs -o vers=3,hard,proto=tcp,local_lock=none 10.99.9.9:/srv/nfs /mnt/a3 && say "a3 mounted"

# --- host B: its own namespaces; hostb.sh mounts and then waits; we find its pid 1 from here
nsenter --net=/run/netns/hostb unshare --uts --mount --pid --fork --mount-proc \
  /bin/sh "$here/hostb.sh" "$share" &
unshare_pid=$!
i=0
while [ ! -e /tmp/hostb.ready ] && [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
hostb_pid=$(cat /proc/$unshare_pid/task/$unshare_pid/children 2>/dev/null | tr -d ' ')
say "host B ready=$(cat /tmp/hostb.ready 2>/dev/null) pid=$hostb_pid"
grep ' nfs' /proc/mounts
for f in /proc/fs/nfsd/clients/*/info; do say "nfsd client: $(grep -E 'name|address' "$f" | tr '\n' ' ')"; done

# a second checkout's points first, when the host asked for them (vm.Beside: the clone test's, issue 32)
if [ -f "$share/beside.sh" ]; then . "$share/beside.sh"; fi
left=$(( budget - ($(date +%s) - t0) - 10 ))
say "points: $left s left"
SOTD_NFS_HOSTB_PID=$hostb_pid timeout -k 5 "$left" "$py" "$here/points.py" "$share" || say "points.py exit $?"
say "points done"
done_off
