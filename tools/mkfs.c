/*
 * mkfs.c - mkfs.shoal: make a shoal filesystem on an image file or a block
 * device.  The format itself is shoal_format() in core/format.c; this file
 * parses the command line, prepares the device and talks to the user.
 *
 * Invariants:
 *  (1) every check that can refuse (arguments, size, an existing filesystem,
 *      a shrinking image) runs before the device is created, resized or
 *      written, so a refused run leaves it as it was;
 *  (2) without -f, a device that holds a shoal superblock, or any filesystem
 *      or partition table libblkid knows, is never written;
 *  (3) an image file this run created is removed again if the run fails;
 *  (4) with or without -f, a shoal filesystem whose heartbeat (hb.c)
 *      changes while mkfs watches it is in use on some machine, and is
 *      never written.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <blkid/blkid.h>

#include "dev.h"
#include "hb.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"

#define PROG "mkfs.shoal"
#define EXIT_OK 0
#define EXIT_ERR 1

/* Limits mirrored from core/format.c, checked here for clear messages. */
#define MKFS_MAX_JOURNALS 256u
#define MKFS_MIN_JBLOCKS 256u
#define MKFS_MIN_RG_BLOCKS 64u

struct mkfs_args {
	uint32_t ma_journals;
	uint64_t ma_jbytes;
	uint32_t ma_bsize;
	const char *ma_locktable;
	int ma_force;
	int ma_quiet;
	const char *ma_path;
	uint64_t ma_size; /* 0: not given */
};

struct mkfs_progress {
	struct timespec mp_start;
	int mp_quiet;
	int mp_shown; /* a progress line is on the terminal */
	int mp_last;  /* last percentage printed */
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " PROG " [-j NODES] [-J JOURNAL_SIZE] [-t CLUSTER:FSNAME] [-b BLOCK_SIZE]\n"
		"                  [-f] [-q] DEVICE [SIZE]\n"
		"\n"
		"Make a shoal filesystem on DEVICE, a block device or an image file.\n"
		"\n"
		"  -j NODES          journals, one per node that mounts it (1-256, default 2)\n"
		"  -J JOURNAL_SIZE   size of each journal (default: 1/8 of the device shared by\n"
		"                    the journals, 8M to 128M; a bare number is MiB)\n"
		"  -t CLUSTER:FSNAME lock table name (default shoal:UUID, this filesystem's own;\n"
		"                    at most 63 bytes)\n"
		"  -b BLOCK_SIZE     block size: 1024, 2048, 4096 (default), ... 65536\n"
		"  -f                overwrite an existing filesystem; allow shrinking an image\n"
		"                    (never one mounted on some machine: a shoal filesystem\n"
		"                    whose heartbeat changes while mkfs watches it, a few\n"
		"                    seconds, is refused)\n"
		"  -q                quiet: print errors only\n"
		"  -h                show this help\n"
		"\n"
		"SIZE (bytes, or with a suffix K, M, G, T: powers of 1024) creates the image\n"
		"file if it does not exist and grows or truncates it to SIZE (sparse).  For a\n"
		"block device SIZE must not exceed the device; the default is all of it.\n"
		"\n"
		"Exit status: 0 success; 1 failure (bad usage, device refused or too small,\n"
		"I/O error).\n");
}

static void die_errno(const char *what, int err)
{
	fprintf(stderr, PROG ": %s: %s\n", what, strerror(err));
	exit(EXIT_ERR);
}

static void die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, PROG ": ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry '" PROG " -h' for help.\n");
	exit(EXIT_ERR);
}

/* A size: digits with an optional K/M/G/T suffix ("KiB" and "KB" too). */
static int parse_size(const char *s, uint64_t bare_unit, uint64_t *out)
{
	uint64_t v = 0, unit = bare_unit;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -ERANGE;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	if (*p) {
		switch (*p | 0x20) {
		case 'k': unit = 1ull << 10; break;
		case 'm': unit = 1ull << 20; break;
		case 'g': unit = 1ull << 30; break;
		case 't': unit = 1ull << 40; break;
		default: return -EINVAL;
		}
		p++;
		if (strcmp(p, "") && strcmp(p, "B") && strcmp(p, "iB"))
			return -EINVAL;
	}
	if (v && unit > UINT64_MAX / v)
		return -ERANGE;
	*out = v * unit;
	return 0;
}

static void human(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", bytes);
	else
		snprintf(buf, len, "%.2f %s", v, units[u]);
}

static int locktable_ok(const char *lt)
{
	const char *colon = strchr(lt, ':');

	return colon && !strchr(colon + 1, ':') && colon != lt && colon[1] &&
	       strlen(lt) < SHOAL_LOCKNAME_LEN;
}

static void parse_args(int argc, char **argv, struct mkfs_args *a)
{
	uint64_t v;
	int c;

	memset(a, 0, sizeof(*a));
	a->ma_journals = 2;
	a->ma_jbytes = 0; /* chosen from the size once it is known */
	a->ma_bsize = SHOAL_DEFAULT_BSIZE;
	a->ma_locktable = NULL; /* shoal_format: "shoal:" + the UUID */
	while ((c = getopt(argc, argv, "j:J:t:b:fqh")) != -1) {
		switch (c) {
		case 'j':
			if (parse_size(optarg, 1, &v) || v < 1 || v > MKFS_MAX_JOURNALS)
				die_usage("-j %s: journals must be 1 to 256", optarg);
			a->ma_journals = (uint32_t)v;
			break;
		case 'J':
			if (parse_size(optarg, 1ull << 20, &v) || v == 0)
				die_usage("-J %s: not a size", optarg);
			a->ma_jbytes = v;
			break;
		case 't':
			if (!locktable_ok(optarg))
				die_usage("-t %s: must be CLUSTER:FSNAME, at most 63 bytes", optarg);
			a->ma_locktable = optarg;
			break;
		case 'b':
			if (parse_size(optarg, 1, &v) || v < SHOAL_MIN_BSIZE || v > SHOAL_MAX_BSIZE ||
			    (v & (v - 1)))
				die_usage("-b %s: block size must be a power of two, 1024 to 65536",
					  optarg);
			a->ma_bsize = (uint32_t)v;
			break;
		case 'f':
			a->ma_force = 1;
			break;
		case 'q':
			a->ma_quiet = 1;
			break;
		case 'h':
			usage(stdout);
			exit(EXIT_OK);
		default:
			usage(stderr);
			exit(EXIT_ERR);
		}
	}
	if (optind >= argc || argc - optind > 2) {
		usage(stderr);
		exit(EXIT_ERR);
	}
	a->ma_path = argv[optind];
	if (argc - optind == 2 && (parse_size(argv[optind + 1], 1, &a->ma_size) || !a->ma_size))
		die_usage("SIZE %s: not a size", argv[optind + 1]);
	if (a->ma_jbytes && a->ma_jbytes / a->ma_bsize < MKFS_MIN_JBLOCKS) {
		char buf[64];
		snprintf(buf, sizeof(buf), "%u", MKFS_MIN_JBLOCKS * a->ma_bsize);
		die_usage("-J: a journal needs at least 256 blocks (%s bytes)", buf);
	}
}

/*
 * Invariant 4: refuse a shoal filesystem that a node on some machine has
 * mounted (its heartbeat changes); a crashed node's stale one is no reason.
 */
static void check_heartbeat(const struct mkfs_args *a)
{
	struct shoal_dev *dev;
	struct shoal_sb sb;
	char msg[200];
	int err;

	err = dev_open(a->ma_path, 1, &dev);
	if (err)
		die_errno(a->ma_path, -err);
	err = hb_read_sb(dev, &sb);
	if (!err)
		err = hb_check(dev, &sb, HB_ALL, 0, msg, sizeof(msg));
	dev_close(dev);
	if (err == -EBUSY) {
		fprintf(stderr, PROG ": %s: the shoal filesystem on it is in use on another "
				     "machine: %s; refusing to format it (unmount it there first)\n",
			a->ma_path, msg);
		exit(EXIT_ERR);
	}
	if (err < 0 && err != -ENOENT && err != -EOPNOTSUPP)
		die_errno(a->ma_path, -err);
}

/*
 * Refuse a device holding a filesystem (invariant 2): shoal's own superblock
 * at block 0 for any block size, then whatever libblkid recognises.
 */
static void check_existing(const struct mkfs_args *a, uint64_t cur_size)
{
	uint8_t buf[4096];
	const struct shoal_mh *mh = (const void *)buf;
	const char *type = NULL;
	blkid_probe pr;
	size_t len = cur_size < sizeof(buf) ? (size_t)cur_size : sizeof(buf);
	int fd, rc;

	fd = open(a->ma_path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die_errno(a->ma_path, errno);
	memset(buf, 0, sizeof(buf));
	if (pread(fd, buf, len, 0) < 0)
		die_errno(a->ma_path, errno);
	close(fd);
	if (len >= sizeof(*mh) && mh->mh_magic == SHOAL_MAGIC && mh->mh_type == SHOAL_MT_SB) {
		fprintf(stderr, PROG ": %s contains a shoal filesystem; use -f to overwrite\n",
			a->ma_path);
		exit(EXIT_ERR);
	}

	pr = blkid_new_probe_from_filename(a->ma_path);
	if (!pr)
		die_errno(a->ma_path, errno ? errno : EIO);
	blkid_probe_enable_superblocks(pr, 1);
	blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_TYPE);
	blkid_probe_enable_partitions(pr, 1);
	rc = blkid_do_safeprobe(pr);
	if (rc == -2) {
		fprintf(stderr, PROG ": %s contains several filesystem signatures; use -f to "
				"overwrite\n", a->ma_path);
		exit(EXIT_ERR);
	}
	if (rc < 0) {
		fprintf(stderr, PROG ": %s: cannot probe for an existing filesystem\n",
			a->ma_path);
		exit(EXIT_ERR);
	}
	if (rc == 0 && blkid_probe_lookup_value(pr, "TYPE", &type, NULL) == 0) {
		fprintf(stderr, PROG ": %s contains a %s filesystem; use -f to overwrite\n",
			a->ma_path, type);
		exit(EXIT_ERR);
	}
	if (rc == 0 && blkid_probe_lookup_value(pr, "PTTYPE", &type, NULL) == 0) {
		fprintf(stderr, PROG ": %s contains a %s partition table; use -f to overwrite\n",
			a->ma_path, type);
		exit(EXIT_ERR);
	}
	blkid_free_probe(pr);
}

/*
 * Erase the signatures of what was there before (as wipefs -a does), so that
 * blkid and mount do not keep seeing an old filesystem whose magic lies in a
 * block the format does not write (shoal only writes its metadata blocks).
 */
static int wipe_signatures(const char *path)
{
	blkid_probe pr;
	int fd, err = 0;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	pr = blkid_new_probe();
	if (!pr) {
		err = -ENOMEM;
		goto out_close;
	}
	if (blkid_probe_set_device(pr, fd, 0, 0)) {
		err = -EIO;
		goto out_free;
	}
	blkid_probe_enable_superblocks(pr, 1);
	blkid_probe_set_superblocks_flags(pr, BLKID_SUBLKS_MAGIC);
	blkid_probe_enable_partitions(pr, 1);
	blkid_probe_set_partitions_flags(pr, BLKID_PARTS_MAGIC);
	while (blkid_do_probe(pr) == 0) {
		if (blkid_do_wipe(pr, 0)) {
			err = -EIO;
			break;
		}
	}
	if (!err && fsync(fd) < 0)
		err = -errno;
out_free:
	blkid_free_probe(pr);
out_close:
	close(fd);
	return err;
}

static void progress(void *arg, uint64_t done, uint64_t total)
{
	struct mkfs_progress *mp = arg;
	struct timespec now;
	int pct;

	if (mp->mp_quiet || !total)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec - mp->mp_start.tv_sec +
		    (now.tv_nsec - mp->mp_start.tv_nsec) / 1e9 < 1.0)
		return;
	pct = (int)(done * 100 / total);
	if (pct == mp->mp_last)
		return;
	mp->mp_last = pct;
	mp->mp_shown = 1;
	fprintf(stderr, "Formatting: %d%%\r", pct);
	fflush(stderr);
}

static void print_summary(const struct mkfs_args *a, const struct shoal_format_info *fi)
{
	const uint8_t *u = fi->fi_uuid;
	uint64_t bytes = fi->fi_blocks * fi->fi_bsize;
	char hs[32], hj[32];

	human(bytes, hs, sizeof(hs));
	human(fi->fi_jblocks * fi->fi_bsize, hj, sizeof(hj));
	printf("Device:          %s\n", a->ma_path);
	printf("Size:            %" PRIu64 " bytes (%s)\n", bytes, hs);
	printf("Block size:      %" PRIu32 "\n", fi->fi_bsize);
	printf("Blocks:          %" PRIu64 "\n", fi->fi_blocks);
	printf("Resource groups: %" PRIu32 "\n", fi->fi_rgcount);
	printf("Journals:        %" PRIu32 " x %s (%" PRIu64 " blocks each)\n", fi->fi_journals,
	       hj, fi->fi_jblocks);
	printf("Lock table:      %s\n", fi->fi_locktable);
	printf("UUID:            %02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
	       "%02x%02x%02x%02x%02x%02x\n",
	       u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12],
	       u[13], u[14], u[15]);
}

int main(int argc, char **argv)
{
	struct shoal_format_opts fo = { 0 };
	struct shoal_format_info fi;
	struct mkfs_progress mp = { 0 };
	struct mkfs_args a;
	struct shoal_dev *dev;
	struct stat st;
	uint64_t size, cur = 0, min;
	int exists = 1, created = 0, isblk = 0, err, fd;

	parse_args(argc, argv, &a);

	/* Invariant 1: decide everything before touching the device. */
	if (stat(a.ma_path, &st) < 0) {
		if (errno != ENOENT)
			die_errno(a.ma_path, errno);
		exists = 0;
		if (!a.ma_size) {
			fprintf(stderr, PROG ": %s: %s (give a SIZE to create an image file)\n",
				a.ma_path, strerror(ENOENT));
			return EXIT_ERR;
		}
		size = a.ma_size;
	} else if (S_ISREG(st.st_mode)) {
		cur = (uint64_t)st.st_size;
		size = a.ma_size ? a.ma_size : cur;
		if (!size) {
			fprintf(stderr, PROG ": %s: file is empty; give a SIZE\n", a.ma_path);
			return EXIT_ERR;
		}
		if (size < cur && !a.ma_force) {
			fprintf(stderr,
				PROG ": %s: would shrink the file from %" PRIu64 " to %" PRIu64
				     " bytes; use -f to allow it\n",
				a.ma_path, cur, size);
			return EXIT_ERR;
		}
	} else if (S_ISBLK(st.st_mode)) {
		isblk = 1;
		/* O_EXCL on a block device fails with EBUSY while it is mounted. */
		fd = open(a.ma_path, O_RDONLY | O_EXCL | O_CLOEXEC);
		if (fd < 0)
			die_errno(a.ma_path, errno);
		if (ioctl(fd, BLKGETSIZE64, &cur) < 0)
			die_errno(a.ma_path, errno);
		close(fd);
		size = a.ma_size ? a.ma_size : cur;
		if (size > cur) {
			fprintf(stderr,
				PROG ": %s: SIZE %" PRIu64 " is larger than the device (%" PRIu64
				     " bytes)\n",
				a.ma_path, size, cur);
			return EXIT_ERR;
		}
	} else {
		die_errno(a.ma_path, ENOTBLK);
	}

	if (!a.ma_jbytes)
		a.ma_jbytes = shoal_default_jbytes(size, a.ma_journals, a.ma_bsize);
	/* superblocks, journals, heartbeat blocks, one group */
	min = ((uint64_t)a.ma_journals * (a.ma_jbytes / a.ma_bsize + 1) + 3 + MKFS_MIN_RG_BLOCKS) *
	      a.ma_bsize;
	if (size < min) {
		char hmin[32];
		human(min, hmin, sizeof(hmin));
		fprintf(stderr,
			PROG ": %s: %" PRIu64 " bytes is too small for %u journals; need at least "
			     "%" PRIu64 " bytes (%s): %s\n",
			a.ma_path, size, a.ma_journals, min, hmin, strerror(ENOSPC));
		return EXIT_ERR;
	}
	if (cur && !a.ma_force)
		check_existing(&a, cur);
	if (cur)
		check_heartbeat(&a);

	/* From here on the device is changed. */
	if (!exists) {
		fd = open(a.ma_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		if (fd < 0)
			die_errno(a.ma_path, errno);
		close(fd);
		created = 1;
	}
	if (!isblk && size != cur && truncate(a.ma_path, (off_t)size) < 0) {
		err = errno;
		goto out_fail_errno;
	}
	if (cur) {
		err = -wipe_signatures(a.ma_path);
		if (err)
			goto out_fail_errno;
	}

	err = -dev_open(a.ma_path, 0, &dev);
	if (err)
		goto out_fail_errno;
	dev->d_size = size; /* a block device may be used only in part */
	fo.fo_bsize = a.ma_bsize;
	fo.fo_journals = a.ma_journals;
	fo.fo_jbytes = a.ma_jbytes;
	fo.fo_locktable = a.ma_locktable;
	fo.fo_progress = progress;
	fo.fo_progress_arg = &mp;
	mp.mp_quiet = a.ma_quiet;
	mp.mp_last = -1;
	clock_gettime(CLOCK_MONOTONIC, &mp.mp_start);
	err = -shoal_format(dev, &fo, &fi);
	dev_close(dev);
	if (mp.mp_shown)
		fprintf(stderr, err ? "\n" : "Formatting: 100%%\n");
	if (err)
		goto out_fail_errno;
	if (!a.ma_quiet)
		print_summary(&a, &fi);
	return EXIT_OK;

out_fail_errno:
	fprintf(stderr, PROG ": %s: %s\n", a.ma_path, strerror(err));
	if (created)
		unlink(a.ma_path); /* invariant 3 */
	return EXIT_ERR;
}
