#!/usr/bin/env bash
# t_perm.sh - permissions as a non-root user on a mount with allow_other,
# as ext4: ownership of new files, EACCES on mode bits, sticky and set-group-ID
# directories, chmod/chown limits, setuid cleared by a write, access().
# The users are plain numeric ids run through setpriv (no account needed).
. "$(dirname "$0")/lib.sh"

U=4242     # the test user
O=4343     # another user
SG=4545    # a group the test user is not in
img=$t_dir/img
m=$t_dir/mnt
chmod 755 "$t_dir" # the test user must reach the mountpoint
t_mkfs "$img" 256M -J 8M
t_mount "$img" "$m" lock=nolock,allow_other
chmod 755 "$m"

as_user() { setpriv --reuid=$U --regid=$U --clear-groups -- "$@"; }
ut() { # t_try as the test user
	local T_RUNAS=(setpriv --reuid=$U --regid=$U --clear-groups --)
	t_try "$@"
}

check_eq "the test user can see the mount (allow_other)" OK "$(ut 'os.listdir(a[0])' "$m")"

# Fixtures made by root.
mkdir -m 1777 "$m/pub"
mkdir -m 0755 "$m/rdir"
echo secret >"$m/secret" && chmod 600 "$m/secret"
echo readonly >"$m/ro" && chmod 644 "$m/ro"
echo other >"$m/pub/other" && chown $O:$O "$m/pub/other"
echo '#!/bin/sh' >"$m/script" && chmod 755 "$m/script"
touch "$m/rdir/rootfile"

# --- ownership of new files --------------------------------------------------------
check_eq "user creates a file in a 1777 directory" OK "$(ut 'open(a[0], "w").write("mine")' "$m/pub/mine")"
check_eq "new file belongs to the caller's uid and gid" "$U $U" "$(stat -c '%u %g' "$m/pub/mine")"
check_eq "new file mode follows the caller's umask (022)" 644 "$(stat -c %a "$m/pub/mine")"
check_eq "umask 077 gives 600" 600 "$(umask 077 && ut 'open(a[0], "w")' "$m/pub/mine077" >/dev/null && stat -c %a "$m/pub/mine077")"
check_eq "user mkdir" OK "$(ut 'os.mkdir(a[0])' "$m/pub/mydir")"
check_eq "new directory belongs to the caller" "$U $U 755" "$(stat -c '%u %g %a' "$m/pub/mydir")"
check_eq "user symlink and mkfifo belong to the caller" "$U $U $U $U" "$(ut '
os.symlink("mine", a[0]); os.mkfifo(a[1])' "$m/pub/mylink" "$m/pub/myfifo" >/dev/null
	stat -c '%u %g' "$m/pub/mylink" "$m/pub/myfifo" | xargs)"

# --- denied by mode bits ---------------------------------------------------------------
check_eq "reading a 0600 root file: EACCES" EACCES "$(ut 'open(a[0]).read()' "$m/secret")"
check_eq "writing a 0644 root file: EACCES" EACCES "$(ut 'open(a[0], "a")' "$m/ro")"
check_eq "truncating a 0644 root file: EACCES" EACCES "$(ut 'os.truncate(a[0], 0)' "$m/ro")"
check_eq "reading a 0644 root file works" readonly "$(as_user cat "$m/ro")"
check_eq "creating in a 0755 root directory: EACCES" EACCES "$(ut 'open(a[0], "w")' "$m/rdir/x")"
check_eq "mkdir in a 0755 root directory: EACCES" EACCES "$(ut 'os.mkdir(a[0])' "$m/rdir/x")"
check_eq "unlinking in a 0755 root directory: EACCES" EACCES "$(ut 'os.unlink(a[0])' "$m/rdir/rootfile")"
check_eq "renaming out of a 0755 root directory: EACCES" EACCES \
	"$(ut 'os.rename(a[0], a[1])' "$m/rdir/rootfile" "$m/pub/stolen")"
chmod 711 "$m/rdir"
check_eq "listing a 0711 directory: EACCES" EACCES "$(ut 'os.listdir(a[0])' "$m/rdir")"
check_eq "but a known name in it can be stat'ed" OK "$(ut 'os.stat(a[0])' "$m/rdir/rootfile")"
chmod 700 "$m/rdir"
check_eq "no search permission: stat inside gives EACCES" EACCES "$(ut 'os.stat(a[0])' "$m/rdir/rootfile")"
check_eq "root still reads a user's 0600 file" mine \
	"$(chmod 600 "$m/pub/mine" && cat "$m/pub/mine")"
check_eq "executing a 0644 file: EACCES" EACCES "$(ut 'os.execv(a[0], [a[0]])' "$m/ro")"
cp /bin/echo "$m/xonly" && chmod 711 "$m/xonly"
check_eq "executing another user's 0711 binary works (exec needs x only)" OK \
	"$(ut 'os.execv(a[0], [a[0], "OK"])' "$m/xonly")"
chmod 111 "$m/xonly"
check_eq "... and a 0111 one" OK "$(ut 'os.execv(a[0], [a[0], "OK"])' "$m/xonly")"
check_eq "... but reading it: EACCES" EACCES "$(ut 'open(a[0]).read()' "$m/xonly")"

# --- sticky directory -------------------------------------------------------------------
check_eq "sticky: cannot unlink another user's file: EPERM" EPERM "$(ut 'os.unlink(a[0])' "$m/pub/other")"
check_eq "sticky: cannot rename another user's file: EPERM" EPERM \
	"$(ut 'os.rename(a[0], a[1])' "$m/pub/other" "$m/pub/taken")"
check_eq "sticky: cannot replace another user's file by rename: EPERM" EPERM \
	"$(ut 'os.rename(a[0], a[1])' "$m/pub/mine077" "$m/pub/other")"
check_eq "sticky: the other file is untouched" "other $O" "$(cat "$m/pub/other") $(stat -c %u "$m/pub/other")"
check_eq "sticky: can rename own file" OK "$(ut 'os.rename(a[0], a[1])' "$m/pub/mine077" "$m/pub/mine2")"
check_eq "sticky: can unlink own file" OK "$(ut 'os.unlink(a[0])' "$m/pub/mine2")"
check_eq "sticky: root can unlink anyone's file" OK "$(t_try 'os.unlink(a[0])' "$m/pub/other")"

# --- set-group-ID directory ---------------------------------------------------------------
mkdir "$m/sg"
chown root:$SG "$m/sg"
chmod 2777 "$m/sg"
check_eq "setgid directory: new file gets the directory's group" "$U $SG" \
	"$(ut 'open(a[0], "w")' "$m/sg/f" >/dev/null && stat -c '%u %g' "$m/sg/f")"
check_eq "setgid directory: new subdirectory gets the group and the setgid bit" "$U $SG 2755" \
	"$(ut 'os.mkdir(a[0])' "$m/sg/sub" >/dev/null && stat -c '%u %g %a' "$m/sg/sub")"
check_eq "setgid directory: inherited through a second level" "$SG" \
	"$(ut 'open(a[0], "w")' "$m/sg/sub/g" >/dev/null && stat -c '%g' "$m/sg/sub/g")"
check_eq "setgid directory: a file created with S_ISGID by a non-member loses it" "$SG 755" "$(ut '
fd = os.open(a[0], os.O_CREAT | os.O_WRONLY, 0o2755); os.close(fd)' "$m/sg/sgidfile" >/dev/null
	stat -c '%g %a' "$m/sg/sgidfile")"

# --- chmod / chown -----------------------------------------------------------------------
check_eq "chmod of someone else's file: EPERM" EPERM "$(ut 'os.chmod(a[0], 0o777)' "$m/ro")"
check_eq "chmod of own file" "OK 640" "$(ut 'os.chmod(a[0], 0o640)' "$m/pub/mine") $(stat -c %a "$m/pub/mine")"
check_eq "chown of own file to another user: EPERM" EPERM "$(ut 'os.chown(a[0], int(a[1]), -1)' "$m/pub/mine" $O)"
check_eq "chgrp of own file to a group the user is not in: EPERM" EPERM \
	"$(ut 'os.chown(a[0], -1, int(a[1]))' "$m/pub/mine" $SG)"
check_eq "chown of own file to its own ids is allowed" OK "$(ut 'os.chown(a[0], int(a[1]), int(a[1]))' "$m/pub/mine" $U)"
check_eq "chown of someone else's file: EPERM" EPERM "$(ut 'os.chown(a[0], int(a[1]), -1)' "$m/ro" $U)"
check_eq "chmod g+s of own file in a group the user is not in drops S_ISGID" "OK 640" \
	"$(chgrp $SG "$m/pub/mine" && ut 'os.chmod(a[0], 0o2640)' "$m/pub/mine") $(stat -c %a "$m/pub/mine")"
check_eq "utime with explicit times on someone else's file: EPERM" EPERM \
	"$(ut 'os.utime(a[0], (1, 1))' "$m/ro")"
check_eq "setting a trusted.* xattr: EPERM" EPERM "$(ut 'os.setxattr(a[0], "trusted.x", b"1")' "$m/pub/mydir")"
check_eq "setting a user.* xattr on own file" OK "$(ut 'os.setxattr(a[0], "user.x", b"1")' "$m/pub/mydir")"
check_eq "setting a user.* xattr on a read-only file: EACCES" EACCES \
	"$(ut 'os.setxattr(a[0], "user.x", b"1")' "$m/ro")"
check_eq "chattr +i by a non-root user: EPERM" EPERM "$(ut '
import fcntl, struct
fd = os.open(a[0], os.O_RDONLY)
fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x10))' "$m/pub/mydir")"

# --- setuid cleared by a write ---------------------------------------------------------------
echo s >"$m/pub/suid_root" && chmod 4777 "$m/pub/suid_root"
check_eq "a non-owner's write to a world-writable setuid file succeeds" OK \
	"$(ut 'fd = os.open(a[0], os.O_WRONLY | os.O_APPEND); os.write(fd, b"x"); os.close(fd)' "$m/pub/suid_root")"
check_eq "... and clears setuid (as ext4)" 777 "$(stat -c %a "$m/pub/suid_root")"
check_eq "... and the data is there" "sx" "$(tr -d '\n' <"$m/pub/suid_root")"
ut 'open(a[0], "w").write("x"); os.chmod(a[0], 0o4755)' "$m/pub/suid_own" >/dev/null
check_eq "the owner may set setuid on own file" 4755 "$(stat -c %a "$m/pub/suid_own")"
check_eq "a write by the owner clears setuid too" 755 \
	"$(ut 'fd = os.open(a[0], os.O_WRONLY | os.O_APPEND); os.write(fd, b"y"); os.close(fd)' "$m/pub/suid_own" >/dev/null && stat -c %a "$m/pub/suid_own")"
echo g >"$m/pub/sgid_x" && chmod 2777 "$m/pub/sgid_x"
check_eq "a non-owner's write to a setgid, group-executable file succeeds" OK \
	"$(ut 'fd = os.open(a[0], os.O_WRONLY | os.O_APPEND); os.write(fd, b"x"); os.close(fd)' "$m/pub/sgid_x")"
check_eq "... and clears setgid" 777 "$(stat -c %a "$m/pub/sgid_x")"
echo r >"$m/pub/suid_rootw" && chmod 4777 "$m/pub/suid_rootw"
check_eq "a write by root keeps setuid" 4777 \
	"$(echo more >>"$m/pub/suid_rootw" && stat -c %a "$m/pub/suid_rootw")"
chmod 4777 "$m/pub/suid_root"
check_eq "truncate of a setuid file by a non-owner succeeds" OK "$(ut 'os.truncate(a[0], 0)' "$m/pub/suid_root")"
check_eq "... and clears setuid" 777 "$(stat -c %a "$m/pub/suid_root")"
echo g >"$m/pub/sgid_noexec" && chmod 2666 "$m/pub/sgid_noexec"
check_eq "a non-owner's write keeps setgid without group execute (as ext4)" "OK 2666" \
	"$(ut 'fd = os.open(a[0], os.O_WRONLY | os.O_APPEND); os.write(fd, b"x"); os.close(fd)' "$m/pub/sgid_noexec") $(stat -c %a "$m/pub/sgid_noexec")"
ut 'open(a[0], "w").write("m" * 8192); os.chmod(a[0], 0o4755)' "$m/pub/suid_map" >/dev/null
check_eq "a write through a shared mapping keeps setuid (as ext4)" "OK 4755" \
	"$(ut 'import mmap; fd = os.open(a[0], os.O_RDWR); mm = mmap.mmap(fd, 8192); mm[0:1] = b"w"; mm.flush(); mm.close(); os.fsync(fd); os.close(fd)' "$m/pub/suid_map") $(stat -c %a "$m/pub/suid_map")"

# --- file capabilities dropped by write and truncate (as ext4), for root too ----------------
# (the mount asks the kernel for FUSE_HANDLE_KILLPRIV_V2: libshoal drops them)
cap_set() { "$T_PY" -c 'import os, struct, sys; os.setxattr(sys.argv[1], "security.capability", struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0))' "$1"; }
cap_has() { "$T_PY" -c '
import os, sys
try:
    os.getxattr(sys.argv[1], "security.capability"); print("cap")
except OSError:
    print("none")' "$1"; }
echo c >"$m/pub/capw" && cap_set "$m/pub/capw"
check_eq "security.capability set" cap "$(cap_has "$m/pub/capw")"
echo more >>"$m/pub/capw"
check_eq "a write by root drops security.capability" none "$(cap_has "$m/pub/capw")"
echo c >"$m/pub/capt" && cap_set "$m/pub/capt" && truncate -s 1 "$m/pub/capt"
check_eq "a truncate by root drops security.capability" none "$(cap_has "$m/pub/capt")"
echo c >"$m/pub/capr" && cap_set "$m/pub/capr" && cat "$m/pub/capr" >/dev/null && chmod 644 "$m/pub/capr"
check_eq "a read and a chmod keep security.capability" cap "$(cap_has "$m/pub/capr")"

echo c >"$m/pub/capu" && chmod 666 "$m/pub/capu" && cap_set "$m/pub/capu"
check_eq "a non-root write to a world-writable file with a capability succeeds" OK \
	"$(ut 'fd = os.open(a[0], os.O_WRONLY | os.O_APPEND); os.write(fd, b"x"); os.close(fd)' "$m/pub/capu")"
check_eq "... and drops security.capability (as ext4)" none "$(cap_has "$m/pub/capu")"
cap_set "$m/pub/capu"
check_eq "a non-root fallocate of such a file succeeds" OK \
	"$(ut 'fd = os.open(a[0], os.O_WRONLY); os.posix_fallocate(fd, 0, 65536); os.close(fd)' "$m/pub/capu")"
check_eq "... and drops security.capability (as ext4)" none "$(cap_has "$m/pub/capu")"
check_eq "removing security.capability by hand stays root's" EPERM \
	"$(cap_set "$m/pub/capu"; ut 'os.removexattr(a[0], "security.capability")' "$m/pub/capu")"

# --- set-ID bits dropped by fallocate and punch-hole (ext4: file_modified) -----------------
echo f >"$m/pub/suid_fa" && chmod 4777 "$m/pub/suid_fa"
check_eq "a non-owner's fallocate clears setuid" "OK 777" \
	"$(ut 'fd = os.open(a[0], os.O_WRONLY); os.posix_fallocate(fd, 0, 65536); os.close(fd)' "$m/pub/suid_fa") $(stat -c %a "$m/pub/suid_fa")"
chmod 6777 "$m/pub/suid_fa"
check_eq "a non-owner's punch-hole clears setuid and setgid" "OK 777" \
	"$(ut 'fd = os.open(a[0], os.O_WRONLY)
if ctypes.CDLL(None, use_errno=True).fallocate(fd, 3, ctypes.c_long(0), ctypes.c_long(4096)):
    raise OSError(ctypes.get_errno(), "fallocate")' "$m/pub/suid_fa") $(stat -c %a "$m/pub/suid_fa")"
chmod 4777 "$m/pub/suid_fa"
check_eq "a fallocate by root keeps setuid" 4777 \
	"$("$T_PY" -c 'import os, sys; fd = os.open(sys.argv[1], os.O_WRONLY); os.posix_fallocate(fd, 0, 8192)' "$m/pub/suid_fa" && stat -c %a "$m/pub/suid_fa")"

# --- access() -------------------------------------------------------------------------------
check_eq "access() for the test user" "False False True True False True False True False" "$(as_user "$T_PY" -c '
import os, sys
m = sys.argv[1]
print(os.access(m + "/secret", os.R_OK), os.access(m + "/ro", os.W_OK), os.access(m + "/ro", os.R_OK),
      os.access(m + "/script", os.X_OK), os.access(m + "/ro", os.X_OK),
      os.access(m + "/pub", os.W_OK), os.access(m + "/rdir", os.X_OK),
      os.access(m + "/pub/mydir", os.W_OK | os.X_OK), os.access(m + "/nope", os.F_OK))' "$m")"
check_eq "access() for root" "True True True" "$("$T_PY" -c '
import os, sys
m = sys.argv[1]
print(os.access(m + "/secret", os.R_OK | os.W_OK), os.access(m + "/ro", os.W_OK), os.access(m + "/script", os.X_OK))' "$m")"

# --- persistence ---------------------------------------------------------------------------
stat -c '%n %u %g %a' "$m"/pub/* "$m"/sg/* "$m"/sg/sub/* | sort >"$t_dir/before"
t_umount "$m"
t_mount "$img" "$m" lock=nolock,allow_other
stat -c '%n %u %g %a' "$m"/pub/* "$m"/sg/* "$m"/sg/sub/* | sort >"$t_dir/after"
check "owners, groups and modes persist across remount" diff "$t_dir/before" "$t_dir/after"
t_done
