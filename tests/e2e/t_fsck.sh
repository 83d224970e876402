#!/bin/bash
# t_fsck.sh - fsck.shoal against freshly formatted images damaged at offsets
# computed from the superblock (docs/FORMAT.md): each case checks the exit
# codes of -n (4: errors left), -y (1: corrected) and a second -n (0: clean),
# and that -n never changes the image.  Prints TAP; exits non-zero on failure.
set -euo pipefail

: "${SHOAL_BUILD:?SHOAL_BUILD must point at the build directory}"
MKFS=$SHOAL_BUILD/mkfs.shoal
FSCK=$SHOAL_BUILD/fsck.shoal
for b in "$MKFS" "$FSCK"; do
	if [ ! -x "$b" ]; then
		echo "1..0 # SKIP $b not built"
		exit 0
	fi
done

TMP=$(mktemp -d /tmp/t_fsck.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
IMG=$TMP/img
PRISTINE=$TMP/pristine
n=0
failed=0

ok() { n=$((n + 1)); echo "ok $n - $*"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }

# Run fsck with the given option and compare its exit code.
expect() {
	local want=$1 opt=$2 what=$3 rc=0 out
	out=$("$FSCK" "$opt" "$IMG" 2>&1) || rc=$?
	if [ "$rc" -eq "$want" ]; then
		ok "$what: fsck $opt exits $want"
	else
		not_ok "$what: fsck $opt exits $rc, expected $want"
		printf '%s\n' "$out" | sed 's/^/# /'
	fi
}

# -n must not write: the image is byte-identical afterwards.
expect_readonly() {
	local what=$1 before after
	before=$(md5sum <"$IMG")
	"$FSCK" -n "$IMG" >/dev/null 2>&1 || true
	after=$(md5sum <"$IMG")
	if [ "$before" = "$after" ]; then
		ok "$what: fsck -n leaves the image unchanged"
	else
		not_ok "$what: fsck -n changed the image"
	fi
}

# Little-endian integers and bytes at byte offsets of the image.
rd_u32() { od -An -t u4 -j "$1" -N 4 "$IMG" | tr -d ' '; }
rd_u64() { od -An -t u8 -j "$1" -N 8 "$IMG" | tr -d ' '; }
rd_u8() { od -An -t u1 -j "$1" -N 1 "$IMG" | tr -d ' '; }
wr_u8() { printf "\\$(printf '%03o' "$2")" | dd of="$IMG" bs=1 seek="$1" conv=notrunc status=none; }
flip_byte() { wr_u8 "$1" $(( $(rd_u8 "$1") ^ 0xff )); }
zero_block() { dd if=/dev/zero of="$IMG" bs="$BS" seek="$1" count=1 conv=notrunc status=none; }

fresh() { cp "$PRISTINE" "$IMG"; }

# Damage, then: -n finds it and changes nothing, -y repairs it, -n is clean.
repairable() {
	local what=$1
	expect_readonly "$what"
	expect 4 -n "$what"
	expect 1 -y "$what"
	expect 0 -n "$what (after -y)"
}

"$MKFS" -q "$PRISTINE" 128M
IMG=$PRISTINE
BS=$(rd_u32 36)            # sb_bsize
BLOCKS=$(rd_u64 48)        # sb_blocks
ROOT=$(rd_u64 192)         # sb_root
JFIRST=$(rd_u64 200)       # sb_jfirst
JBLOCKS=$(rd_u32 212)      # sb_jblocks
RGFIRST=$(rd_u64 216)      # sb_rgfirst
RGBLOCKS=$(rd_u32 228)     # sb_rgblocks
IMG=$TMP/img
echo "# bsize $BS, $BLOCKS blocks, root $ROOT, rgfirst $RGFIRST, rgblocks $RGBLOCKS"

fresh
expect 0 -n "fresh filesystem"
expect 0 -y "fresh filesystem"
expect_readonly "fresh filesystem"

# 1. a byte of the root dinode's di_atime (offset 64): only the CRC is wrong
fresh
flip_byte $((ROOT * BS + 70))
repairable "root dinode atime byte flipped"

# 2. the root dinode's magic: the root is rebuilt as an empty directory
fresh
flip_byte $((ROOT * BS))
repairable "root dinode magic flipped"

# 3. the root's two bitmap bits cleared (it looks free)
fresh
G=$(((ROOT - RGFIRST) / RGBLOCKS))
HDR=$((RGFIRST + G * RGBLOCKS))
K=$((ROOT - HDR - 1))
OFF=$((HDR * BS + 96 + K / 4))
wr_u8 "$OFF" $(( $(rd_u8 "$OFF") & ~(3 << (2 * (K % 4))) & 0xff ))
repairable "root bitmap bits cleared"

# 4. the primary superblock zeroed: found through the backup, rewritten
fresh
zero_block 0
repairable "primary superblock zeroed"

# 5. the backup superblock damaged
fresh
flip_byte $(((BLOCKS - 1) * BS + 100))
repairable "backup superblock damaged"

# 6. a resource group header damaged: rebuilt from the walk
fresh
flip_byte $((RGFIRST * BS + 52))
repairable "resource group header damaged"

# 7. the last resource group header zeroed
fresh
RGCOUNT=$(rd_u32 224)      # sb_rgcount
zero_block $((RGFIRST + (RGCOUNT - 1) * RGBLOCKS))
repairable "last resource group header zeroed"

# 7b. the root dinode zeroed entirely
fresh
zero_block "$ROOT"
repairable "root dinode zeroed"

# 8. journal 1's head damaged: rewritten clean
fresh
flip_byte $(((JFIRST + JBLOCKS) * BS + 40))
repairable "journal head damaged"

# 9. damage -y cannot repair: both superblocks gone -> operational error
fresh
zero_block 0
zero_block $((BLOCKS - 1))
expect 8 -n "both superblocks zeroed"
expect 8 -y "both superblocks zeroed"

# 10. usage and device errors
rc=0; "$FSCK" -n -y "$IMG" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 8 ] && ok "-n with -y is a usage error (8)" || not_ok "-n -y exits $rc, expected 8"
rc=0; "$FSCK" -n "$TMP/does-not-exist" >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 8 ] && ok "missing device exits 8" || not_ok "missing device exits $rc, expected 8"

echo "1..$n"
if [ "$failed" -ne 0 ]; then
	echo "# $failed of $n failed"
	exit 1
fi
echo "# all $n passed"
