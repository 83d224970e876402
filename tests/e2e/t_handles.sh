#!/usr/bin/env bash
# t_handles.sh - file handles (name_to_handle_at / open_by_handle_at, what
# an NFS server exports) survive the kernel dropping its inodes and a
# remount, as on ext4 (issue 24, defect 8: ESTALE, export support was off).
# A handle is the inode number and its generation; a handle of a file that
# was removed is ESTALE, also once its inode number is used again.
. "$(dirname "$0")/lib.sh"

img=$t_dir/img
m=$t_dir/mnt
t_mkfs "$img" 64M
t_mount "$img" "$m"
mkdir -p "$m/d/sub"
echo "file data" >"$m/d/sub/f"
echo "gone" >"$m/d/gone"

# handles.py save|open MNT FILE...: save writes each path's handle to
# FILE.h; open opens each saved handle and prints what it reads (a
# directory: its path and listing; or the errno name)
cat >"$t_dir/handles.py" <<'PY'
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
MAX = 128
class FH(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint), ("type", ctypes.c_int), ("h", ctypes.c_ubyte * MAX)]
cmd, mnt, store = sys.argv[1], sys.argv[2], sys.argv[3]
if cmd == "save":
    for p in sys.argv[4:]:
        fh = FH(MAX, 0)
        mid = ctypes.c_int(0)
        if libc.name_to_handle_at(-100, os.path.join(mnt, p).encode(), ctypes.byref(fh),
                                  ctypes.byref(mid), 0) != 0:
            print(p, errno.errorcode[ctypes.get_errno()])
            continue
        with open(os.path.join(store, p.replace("/", "_") + ".h"), "wb") as f:
            f.write(bytes(fh)[:8 + fh.bytes])
else:
    mfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    for p in sys.argv[4:]:
        raw = open(os.path.join(store, p.replace("/", "_") + ".h"), "rb").read()
        fh = FH.from_buffer_copy(raw + bytes(ctypes.sizeof(FH) - len(raw)))
        fd = libc.open_by_handle_at(mfd, ctypes.byref(fh), os.O_RDONLY)
        if fd < 0:
            print(p, errno.errorcode[ctypes.get_errno()])
            continue
        if os.path.isdir("/proc/self/fd/%d" % fd):
            # the kernel connects a directory to its path by ".." lookups
            where = os.path.relpath(os.readlink("/proc/self/fd/%d" % fd), mnt)
            print(p, where, ",".join(sorted(os.listdir(fd))))
        else:
            print(p, os.read(fd, 100).decode().strip())
        os.close(fd)
PY
"$T_PY" "$t_dir/handles.py" save "$m" "$t_dir" d d/sub d/sub/f d/gone
rm "$m/d/gone"
want=$'d d gone_new,sub\nd/sub d/sub f\nd/sub/f file data\nd/gone ESTALE'
echo new >"$m/d/gone_new" # may get the removed file's inode number
check_eq "handles open while the kernel has the inodes" "$want" \
	"$("$T_PY" "$t_dir/handles.py" open "$m" "$t_dir" d d/sub d/sub/f d/gone)"
sync
echo 2 >/proc/sys/vm/drop_caches
check_eq "handles open after the kernel dropped its inodes (drop_caches)" "$want" \
	"$("$T_PY" "$t_dir/handles.py" open "$m" "$t_dir" d d/sub d/sub/f d/gone)"
t_remount "$img" "$m"
check_eq "handles open after a remount" "$want" \
	"$("$T_PY" "$t_dir/handles.py" open "$m" "$t_dir" d d/sub d/sub/f d/gone)"
t_umount_fsck "$m" "$img"
t_done
