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

t_umount_fsck "$m" "$img"
t_done
