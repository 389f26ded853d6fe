# tests/nfs/guest/keep.sh (sourced by init.sh and hostb.sh): a fresh tmpfs that keeps the checkout visible.
# tmpfs_keeping <dir> <keep file>: mount a new tmpfs on <dir>, then bind back over it each folder the keep
# file names (one a line; tests/nfs/vm.py's keep_paths: the checkout, its .venv, the interpreter) that lay
# under <dir>, so a checkout under /tmp (or /run) still runs in the guest (issue 32). Each kept folder is
# first bound aside on /keep.<n> (a folder of the overlay root), then bound back and let go.
tmpfs_keeping() {
    _d=$1; _list=$2; _n=0
    while IFS= read -r _p; do
        case "$_p" in "$_d"/*) mkdir -p "/keep.$_n" && mount --bind "$_p" "/keep.$_n"; _n=$((_n + 1)) ;; esac
    done < "$_list"
    mount -t tmpfs tmpfs "$_d"
    _n=0
    while IFS= read -r _p; do
        case "$_p" in
            "$_d"/*)
                mkdir -p "$_p" && mount --bind "/keep.$_n" "$_p" && umount "/keep.$_n"
                _n=$((_n + 1)) ;;
        esac
    done < "$_list"
}
