#!/usr/bin/env bash
# t_cluster_acl.sh - what one node does to permissions governs another at
# once (issue 24, issue 23 defect 11): an access ACL set on node a decides
# who reads the file on node b (its mask too), chmod there changes the
# mask here, a default ACL set on a is inherited by a file b makes, and
# chattr +i on a is enforced and seen (ctime) on b.  Two nodes through a
# private shoal-lockd, allow_other, plain numeric users through setpriv.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_cluster.sh"

U=4242     # a member of group G
N=4343     # a user named in the ACLs
G=4646
chmod 755 "$t_dir"
c_setup 2 256M allow_other
A=$(c_mnt a)
B=$(c_mnt b)
chmod 755 "$A"

acl_set() { # PATH access|default ENTRIES... (as t_acl.sh)
	"$T_PY" - "$@" <<'PY'
import os, struct, sys
tags = {"u": (1, 2), "g": (4, 8), "m": (0x10, 0x10), "o": (0x20, 0x20)}
path, kind, ents = sys.argv[1], sys.argv[2], sys.argv[3:]
out = []
for e in ents:
    t, q, p = e.split(":")
    perm = sum(v for c, v in (("r", 4), ("w", 2), ("x", 1)) if c in p)
    out.append((tags[t][1 if q else 0], perm, int(q) if q else 0xffffffff))
out.sort(key=lambda x: (x[0], x[2]))
os.setxattr(path, "system.posix_acl_" + kind,
            struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *x) for x in out))
PY
}
ug() { local T_RUNAS=(setpriv --reuid=$U --regid=$U --groups=$G --); t_try "$@"; }
un() { local T_RUNAS=(setpriv --reuid=$N --regid=$N --clear-groups --); t_try "$@"; }

echo data >"$A/f" && chown 0:$G "$A/f" && chmod 640 "$A/f"
check_eq "b: the group member reads the 0640 file" OK "$(ug 'open(a[0]).read()' "$B/f")"
check_eq "b: the other user cannot" EACCES "$(un 'open(a[0]).read()' "$B/f")"
acl_set "$A/f" access u::rw u:$N:r g::- m::r o::-
check_eq "a sets an ACL: b sees the mode at once" 640 "$(stat -c %a "$B/f")"
check_eq "... the group member (group::---) cannot read on b" EACCES "$(ug 'open(a[0]).read()' "$B/f")"
check_eq "... the named user can" OK "$(un 'open(a[0]).read()' "$B/f")"
chmod 600 "$A/f"
check_eq "a: chmod 600 (mask ---): the named user cannot read on b" EACCES \
	"$(un 'open(a[0]).read()' "$B/f")"

mkdir -m 755 "$A/d"
ls "$B/d" >/dev/null
acl_set "$A/d" default u::rwx u:$N:rx g::rx m::rwx o::-
check_eq "a sets a default ACL: a file b makes inherits it" "OK 660" \
	"$(umask 022; t_try 'os.close(os.open(a[0], os.O_CREAT | os.O_WRONLY, 0o666))' "$B/d/f") $(stat -c %a "$B/d/f")"
check_eq "... and a sees the same" 660 "$(stat -c %a "$A/d/f")"
check_eq "... the named user reads it on a" OK "$(un 'open(a[0]).read()' "$A/d/f")"

echo x >"$A/imm"
ct0=$(stat -c %z "$B/imm")
chattr +i "$A/imm"
check "a: chattr +i: b sees the new ctime" test "$ct0" != "$(stat -c %z "$B/imm")"
check_eq "... and b refuses a write: EPERM" EPERM "$(t_try 'open(a[0], "a")' "$B/imm")"
chattr -i "$A/imm"

c_umount_all
c_fsck_check
t_done
