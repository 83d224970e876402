#!/usr/bin/env bash
# t_acl.sh - POSIX ACLs as ext4 has them: the mode an access ACL implies,
# seen at once by stat.  ACLs are set through their xattrs (the acl
# package's setfacl need not be installed): acl_set PATH NAME ENTRIES,
# entries "u::rw u:4242:r g::- m::r o::-" as setfacl spells them.
. "$(dirname "$0")/lib.sh"

U=4242     # the test user
G=4646     # a group the test user is in (supplementary)
img=$t_dir/img
m=$t_dir/mnt
chmod 755 "$t_dir"
t_mkfs "$img" 128M -J 8M
t_mount "$img" "$m" lock=nolock,allow_other
chmod 755 "$m"

acl_set() { # PATH access|default ENTRIES...
	"$T_PY" - "$@" <<'PY'
import os, struct, sys
tags = {"u": (1, 2), "g": (4, 8), "m": (0x10, 0x10), "o": (0x20, 0x20)}
path, kind, ents = sys.argv[1], sys.argv[2], sys.argv[3:]
out = []
for e in ents:
    t, q, p = e.split(":")
    perm = sum(v for c, v in (("r", 4), ("w", 2), ("x", 1)) if c in p)
    tag = tags[t][1 if q else 0]
    out.append((tag, perm, int(q) if q else 0xffffffff))
out.sort(key=lambda x: (x[0], x[2]))
os.setxattr(path, "system.posix_acl_" + kind,
            struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *x) for x in out))
PY
}
acl_get() { # PATH access|default: the entries, as acl_set takes them
	"$T_PY" - "$@" <<'PY'
import os, struct, sys
try:
    v = os.getxattr(sys.argv[1], "system.posix_acl_" + sys.argv[2])
except OSError:
    print("none"); sys.exit(0)
names = {1: "u", 2: "u", 4: "g", 8: "g", 0x10: "m", 0x20: "o"}
out = []
for off in range(4, len(v), 8):
    tag, perm, qid = struct.unpack_from("<HHI", v, off)
    q = str(qid) if tag in (2, 8) else ""
    p = "".join(c if perm & b else "" for c, b in (("r", 4), ("w", 2), ("x", 1))) or "-"
    out.append("%s:%s:%s" % (names[tag], q, p))
print(" ".join(out))
PY
}
ut() { # t_try as the test user, in group G
	local T_RUNAS=(setpriv --reuid=$U --regid=$U --groups=$G --)
	t_try "$@"
}

# --- the mode an access ACL implies, seen at once ----------------------------------------
echo secret >"$m/f" && chmod 600 "$m/f"
stat -c %a "$m/f" >/dev/null # the kernel caches the attributes
acl_set "$m/f" access u::rw u:$U:r g::- m::r o::-
check_eq "setting an access ACL: the mode's group bits are the mask, seen by stat at once" \
	640 "$(stat -c %a "$m/f")"

# --- enforced with the mask (POSIX.1e), not by the mode bits alone ------------------------
N=4343     # a user named in the ACLs
un() { local T_RUNAS=(setpriv --reuid=$N --regid=$N --clear-groups --); t_try "$@"; }
echo data >"$m/g" && chown 0:$G "$m/g" && chmod 600 "$m/g"
acl_set "$m/g" access u::rw u:$N:r g::- m::r o::-
check_eq "mode 0640 from the mask" 640 "$(stat -c %a "$m/g")"
check_eq "a member of the file's group cannot read it (group::---)" EACCES \
	"$(ut 'open(a[0]).read()' "$m/g")"
check_eq "the named user can read it" OK "$(un 'open(a[0]).read()' "$m/g")"
check_eq "the named user cannot write it (mask r)" EACCES "$(un 'open(a[0], "a")' "$m/g")"
acl_set "$m/g" access u::rw u:$N:rw g::r m::rw o::-
check_eq "a named user's rw and the mask rw: writing works" OK "$(un 'open(a[0], "a")' "$m/g")"
check_eq "the group's r: reading works" OK "$(ut 'open(a[0]).read()' "$m/g")"

# --- chmod changes the mask, not the group entry (posix_acl_chmod) -----------------------
chmod 600 "$m/g"
check_eq "chmod 600: the mask becomes ---, the entries stay" \
	"u::rw u:$N:rw g::r m::- o::-" "$(acl_get "$m/g" access)"
check_eq "... and the named user can no longer read" EACCES "$(un 'open(a[0]).read()' "$m/g")"
chmod 654 "$m/g"
check_eq "chmod 654: user, mask and other follow the mode" \
	"u::rw u:$N:rw g::r m::rx o::r" "$(acl_get "$m/g" access)"
check_eq "... mode 654" 654 "$(stat -c %a "$m/g")"
check_eq "... and the named user reads again" OK "$(un 'open(a[0]).read()' "$m/g")"

# --- default ACLs are inherited (posix_acl_create), the umask then ignored ----------------
mkdir -m 755 "$m/d"
acl_set "$m/d" default u::rwx u:$N:rx g::rx m::rwx o::-
check_eq "a default ACL is stored" "u::rwx u:$N:rx g::rx m::rwx o::-" "$(acl_get "$m/d" default)"
check_eq "a new file: mode from the default ACL and the asked mode, not the umask" "OK 660" \
	"$(umask 022; t_try 'os.close(os.open(a[0], os.O_CREAT | os.O_WRONLY, 0o666))' "$m/d/f") $(stat -c %a "$m/d/f")"
check_eq "... its access ACL: the default ACL masked by the mode" \
	"u::rw u:$N:rx g::rx m::rw o::-" "$(acl_get "$m/d/f" access)"
check_eq "... no default ACL on a file" none "$(acl_get "$m/d/f" default)"
check_eq "... the named user may read it" OK "$(un 'open(a[0]).read()' "$m/d/f")"
check_eq "a new directory: mode 770 and both ACLs" \
	"OK 770 u::rwx u:$N:rx g::rx m::rwx o::- u::rwx u:$N:rx g::rx m::rwx o::-" \
	"$(umask 077; t_try 'os.mkdir(a[0], 0o777)' "$m/d/sub") $(stat -c %a "$m/d/sub") $(acl_get "$m/d/sub" access) $(acl_get "$m/d/sub/" default)"
check_eq "... and its files inherit in turn" "OK 640" \
	"$(t_try 'os.close(os.open(a[0], os.O_CREAT | os.O_WRONLY, 0o640))' "$m/d/sub/g") $(stat -c %a "$m/d/sub/g")"
check_eq "a symlink has no ACL (EOPNOTSUPP)" ENOTSUP \
	"$(ln -s f "$m/d/l" && t_try 'os.getxattr(a[0], "system.posix_acl_access", follow_symlinks=False)' "$m/d/l")"
mkdir "$m/dmin"
acl_set "$m/dmin" default u::rwx g::rx o::r
check_eq "a minimal default ACL: the mode it implies, no access ACL" "OK 644 none" \
	"$(umask 077; t_try 'os.close(os.open(a[0], os.O_CREAT | os.O_WRONLY, 0o666))' "$m/dmin/f") $(stat -c %a "$m/dmin/f") $(acl_get "$m/dmin/f" access)"
check_eq "without a default ACL the umask applies" "OK 600" \
	"$(umask 077; t_try 'os.close(os.open(a[0], os.O_CREAT | os.O_WRONLY, 0o666))' "$m/nodef") $(stat -c %a "$m/nodef")"
check_eq "... and to mkdir" "OK 700" "$(umask 077; t_try 'os.mkdir(a[0], 0o777)' "$m/nodefd") $(stat -c %a "$m/nodefd")"

# --- set-group-ID with ACLs ----------------------------------------------------------------
SG=4545    # a group the test user is not in
mkdir "$m/pub" && chmod 1777 "$m/pub"
ut 'open(a[0], "w")' "$m/pub/sg" >/dev/null
chgrp $SG "$m/pub/sg" && chmod 2770 "$m/pub/sg"
check_eq "the owner, not in the file's group, sets an ACL: S_ISGID dropped (posix_acl_update_mode)" \
	"OK 770" "$("$T_PY" -c 1 && ut 'import struct
os.setxattr(a[0], "system.posix_acl_access", struct.pack("<I", 2) + b"".join(struct.pack("<HHI", t, p, 0xffffffff) for t, p in ((1, 7), (4, 7), (0x20, 0))))' "$m/pub/sg") $(stat -c %a "$m/pub/sg")"
mkdir "$m/sgd" && chgrp $SG "$m/sgd" && chmod 2777 "$m/sgd"
acl_set "$m/sgd" default u::rwx g::rwx o::rwx
check_eq "a setgid directory with a default ACL: a new subdirectory is setgid and in its group" \
	"OK 2777 $SG" "$(umask 022; ut 'os.mkdir(a[0], 0o777)' "$m/sgd/sub") $(stat -c '%a %g' "$m/sgd/sub")"
check_eq "... a file made S_ISGID by a non-member loses it, after the ACL's mask" "OK 755" \
	"$(ut 'os.close(os.open(a[0], os.O_CREAT | os.O_WRONLY, 0o2755))' "$m/sgd/f") $(stat -c %a "$m/sgd/f")"

t_umount_fsck "$m" "$img"
t_done
