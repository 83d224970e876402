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

t_umount_fsck "$m" "$img"
t_done
