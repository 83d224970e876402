/*
 * fuzz_image.c - structure-aware fuzzing of shoal's on-disk metadata
 * (issue 21): every case damages random bytes or fields of random metadata
 * blocks of a populated image and checks that nothing reading it crashes,
 * hangs or trips a sanitizer, and that fsck.shoal repairs it.
 *
 *   fuzz_image [-n CASES] [-s SEED] [-c CASE] [-t SECONDS] [-j JOBS] [-k] FSCK
 *
 * Environment (overridden by the options): FUZZ_CASES (default 500),
 * FUZZ_SEED (default: from the time, printed), FUZZ_CASE (run that case
 * only), FUZZ_TIMEOUT (seconds per case, default 60), FUZZ_JOBS (cases
 * run at once, default 2), FUZZ_KEEP=1 (keep the scratch directory, in
 * /dev/shm or FUZZ_TMPDIR), FUZZ_FSCK (the fsck.shoal to run).
 *
 * The base image (built once, in a child process that then exits, so its
 * heartbeat names a dead writer) has 1 KiB blocks, so a few MiB hold files
 * of every size class (empty, inline, height 1..6 through sparse writes),
 * an inline directory, hashed directories with many leaves, xattr blocks,
 * short and long symlinks, special files, an open unlinked file, and a
 * dirty journal: the last transactions and a fast-commit block are in the
 * log, not yet written home, when the power is cut.  Its directory hash
 * seed and journal sequence are fixed, so a seed builds the same image.
 *
 * Case c of seed s (its own generator, seeded from s and c) applies 1-3
 * mutations.  A mutation picks a kind of metadata (superblock, group
 * header, bitmap, dinode, dinode payload, indirect block, leaf header,
 * leaf entries, hash table, xattr block, journal head, log descriptor,
 * log image, fast-commit block), one block of it, and either sets one
 * field (or a field of one entry) to an interesting value or changes
 * random bytes; in 3 of 4 mutations it then recomputes the block's CRC
 * (a log image: its tag's CRC and the descriptor's), so the damage gets
 * past the checksum into the parsers.  Then, in a child process whose
 * process group a watchdog kills after the timeout:
 *
 *   1. a copy is mounted in-process (libshoal, lock=nolock) and walked:
 *      every directory listed, every name looked up, every file's data
 *      segments read, every symlink and xattr read.  Mounting may fail;
 *      any use may fail with EIO, nothing else;
 *   2. fsck.shoal -n: exit 0 or 4;
 *   3. fsck.shoal -y: exit 0 or 1;
 *   4. fsck.shoal -n: exit 0 (the repair left nothing);
 *   5. the repaired image is mounted and walked: the mount succeeds and
 *      every use succeeds (fsck said it is clean: an EIO would mean fsck
 *      and the mount disagree about it).
 *
 * A read that returns fewer bytes than the size promises is a failure
 * (issue 21 defect 3), as is any sanitizer report, crash, timeout or other
 * errno.  A failing case prints its seed, its number, its mutations and
 * the end of its log, keeps the damaged image and the base image, and the
 * run exits 1; FUZZ_SEED=s FUZZ_CASE=c reproduces it.
 *
 * Leaks: a sanitizer build checks for leaks at the exit of every process of
 * every 4th case (the check costs a third of a case).
 *
 * The base image, the mutations and the walk are in fz_lib.c, shared with
 * fz_image.c, the libFuzzer target that drives the same mutations from its
 * input.
 *
 * Not fuzzed: the heartbeat blocks (an invalid one makes fsck -y and the
 * mount watch it for 11 s, FORMAT.md 11.5: correct, but no parser to test).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "crc32c.h"
#include "dev.h"
#include "meta.h"
#include "shoal/ondisk.h"
#include "shoal/shoal.h"

#include "fz_lib.h"

/* --- a case ---------------------------------------------------------------------- */

static const char *fsck_path;

/* Run fsck.shoal flag img, its output to our stdout; its exit code, or
 * 128 + the signal that killed it. */
static int run_fsck(const char *flag, const char *img, char *out, size_t outlen)
{
	char *const argv[] = { (char *)fsck_path, (char *)flag, (char *)img, NULL };
	char opath[4200];
	posix_spawn_file_actions_t fa;
	extern char **environ;
	pid_t pid;
	int st, err, fd;
	ssize_t n;

	snprintf(opath, sizeof(opath), "%s.fsck", img);
	printf("== fsck.shoal %s (%.3f s)\n", flag, fz_now());
	fflush(stdout);
	/* spawned (vfork), not forked: a sanitizer's address space is large */
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, opath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	posix_spawn_file_actions_adddup2(&fa, 1, 2);
	err = posix_spawn(&pid, fsck_path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (err)
		fz_die("spawn %s: %s", fsck_path, strerror(err));
	if (waitpid(pid, &st, 0) < 0)
		fz_die("waitpid: %s", strerror(errno));
	fd = open(opath, O_RDONLY);
	n = fd < 0 ? -1 : read(fd, out, outlen - 1);
	out[n > 0 ? n : 0] = '\0';
	if (fd >= 0)
		close(fd);
	fputs(out, stdout);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int write_image(const char *path, const uint8_t *img)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		fz_die("%s: %s", path, strerror(errno));
	for (uint64_t off = 0; off < FZ_IMG_BYTES;) {
		ssize_t n = pwrite(fd, img + off, FZ_IMG_BYTES - off, (off_t)off);
		if (n <= 0)
			fz_die("write %s: %s", path, strerror(errno));
		off += (uint64_t)n;
	}
	close(fd);
	return 0;
}

static uint64_t case_seed(uint64_t seed, uint64_t c)
{
	return seed * 0x2545f4914f6cdd1dull ^ (c + 1) * 0x9e3779b97f4a7c15ull;
}

/* The mutations of case c, applied to img; their description in what. */
static void case_mutate(uint64_t seed, uint64_t c, uint8_t *img, char *what, size_t wlen)
{
	int sb_done = 0, n, len = 0;
	uint64_t r;

	fz_rng_state = case_seed(seed, c);
	r = fz_rnd_below(10);
	n = r < 7 ? 1 : r < 9 ? 2 : 3;
	memcpy(img, fz_base, FZ_IMG_BYTES);
	for (int i = 0; i < n; i++) {
		char one[300];
		fz_mutate(img, &sb_done, one, sizeof(one));
		len += snprintf(what + len, wlen - (size_t)len, "%s%s", i ? "; " : "", one);
		if ((size_t)len >= wlen)
			break;
	}
}

/* The body of case c, in its own process (stdout: the case's log).
 * Exits 0 if every check held, 3 if one failed. */
static void case_child(const char *dir, uint8_t *img, const char *what, int leaks)
{
	static char out[1 << 20];
	char path[4200], pre[4200];
	int failed = 0, rc, ro;

	snprintf(path, sizeof(path), "%s/case.img", dir);
	snprintf(pre, sizeof(pre), "%s/pre.img", dir);
	printf("mutations: %s\n", what);
	write_image(path, img);
	write_image(pre, img);
	failed |= fz_mount_walk(pre, "mount of the damaged image", 0, NULL);
	rc = run_fsck("-n", path, out, sizeof(out));
	if (rc == 8 && strstr(out, "unknown incompatible features")) {
		/* a superblock that is valid and sane but names features this
		 * version lacks: every program refuses it (FORMAT.md 4) */
		printf("refused by fsck and mount: unknown incompatible features\n");
		exit(failed ? 3 : 0);
	}
	ro = strstr(out, "unknown ro_compat features") != NULL; /* check only, never repair */
	if (rc != 0 && rc != 4) {
		printf("FAIL: fsck -n of the damaged image exited %d (want 0 or 4)\n", rc);
		failed = 1;
	}
	rc = run_fsck("-y", path, out, sizeof(out));
	if (rc == 8 && strstr(out, "unknown ro_compat features")) {
		/* a superblock that names read-only-compatible features this
		 * version lacks: fsck checks but never repairs (FORMAT.md 4) */
		printf("fsck -y refused: unknown ro_compat features\n");
		exit(failed ? 3 : 0);
	}
	if (rc != 0 && rc != 1 && !(ro && rc == 4)) {
		printf("FAIL: fsck -y exited %d (want 0 or 1)\n", rc);
		failed = 1;
	}
	rc = run_fsck("-n", path, out, sizeof(out));
	if (rc != 0 && !(ro && rc == 4)) {
		printf("FAIL: fsck -n after fsck -y exited %d (want 0: clean)\n", rc);
		failed = 1;
	}
	if (rc < 8) {
		uint64_t eio = 0;
		failed |= fz_mount_walk(path, "mount of the repaired image", 1, &eio);
		if (rc == 0 && eio) {
			/* fsck and the mount disagree about the same image */
			printf("FAIL: fsck -n says the repaired image is clean, but the mount "
			       "met damage (%" PRIu64 " uses failed with EIO)\n", eio);
			failed = 1;
		}
	}
	fflush(stdout);
	if (!leaks)
		_exit(failed ? 3 : 0); /* no leak check at exit: it costs a third of a case */
	exit(failed ? 3 : 0);
}


static void print_tail(const char *log, int lines)
{
	char cmd[9000];
	snprintf(cmd, sizeof(cmd),
		 "grep -E 'FAIL|ERROR: |runtime error' '%s' | head -5 | sed 's/^/  >> /'; "
		 "echo '  the end of the case log:'; tail -n %d '%s' | sed 's/^/    /'",
		 log, lines, log);
	fflush(stdout);
	if (system(cmd) != 0)
		printf("    (cannot show %s)\n", log);
}

/* A case running in a child process: one per worker slot. */
struct slot {
	pid_t s_pid; /* 0: free */
	uint64_t s_case;
	double s_start;
	char s_dir[2100];
	char s_what[2048];
	uint8_t *s_img;
};

/* Start case c in slot sl. */
static void start_case(struct slot *sl, uint64_t seed, uint64_t c)
{
	char log[2200];
	pid_t pid;

	case_mutate(seed, c, sl->s_img, sl->s_what, sizeof(sl->s_what));
	snprintf(log, sizeof(log), "%s/case.log", sl->s_dir);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		fz_die("fork: %s", strerror(errno));
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		setpgid(0, 0);
		if (fd < 0)
			_exit(2);
		dup2(fd, 1);
		dup2(fd, 2);
		close(fd);
		setvbuf(stdout, NULL, _IOLBF, 0);
		/* a sanitizer's leak check (every 4th case: it is slow) */
		int leaks = c % 4 == 0;
		if (!leaks) {
			char opt[4096];
			const char *o = getenv("ASAN_OPTIONS");
			snprintf(opt, sizeof(opt), "%s%sdetect_leaks=0", o ? o : "", o && *o ? ":" : "");
			setenv("ASAN_OPTIONS", opt, 1); /* for fsck.shoal */
		}
		case_child(sl->s_dir, sl->s_img, sl->s_what, leaks);
	}
	setpgid(pid, pid);
	sl->s_pid = pid;
	sl->s_case = c;
	sl->s_start = fz_now();
}

/* Case of slot sl ended with wait status st (timed_out: killed by the
 * watchdog): 0 if it passed, else it is reported. */
static int end_case(struct slot *sl, uint64_t seed, int st, int timed_out, double timeout,
		    int *kept)
{
	char log[2200];
	uint64_t c = sl->s_case;

	sl->s_pid = 0;
	if (!timed_out && WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return 0;
	snprintf(log, sizeof(log), "%s/case.log", sl->s_dir);
	printf("fuzz_image: case %" PRIu64 " FAILED (FUZZ_SEED=%" PRIu64 " FUZZ_CASE=%" PRIu64 "): ",
	       c, seed, c);
	if (timed_out)
		printf("no result after %.1f s: a hang\n", timeout);
	else if (WIFSIGNALED(st))
		printf("killed by signal %d\n", WTERMSIG(st));
	else if (WEXITSTATUS(st) == 3)
		printf("a check failed\n");
	else
		printf("exit %d (a sanitizer report or a crash)\n", WEXITSTATUS(st));
	printf("  mutations: %s\n", sl->s_what);
	print_tail(log, 30);
	if (*kept < 10) {
		char keep[2200];
		snprintf(keep, sizeof(keep), "%s/fail-%" PRIu64 ".img", sl->s_dir, c);
		write_image(keep, sl->s_img);
		printf("  damaged image kept: %s\n", keep);
		(*kept)++;
	}
	return 1;
}

/* Run cases first..end-1 (or only `only`) on jobs slots; failures. */
static int run_cases(const char *dir, uint64_t seed, uint64_t first, uint64_t end, int jobs,
		     double timeout)
{
	struct slot *slots = calloc((size_t)jobs, sizeof(*slots));
	uint64_t next = first, done = 0;
	int failures = 0, kept = 0, running = 0;
	double t0 = fz_now();

	if (!slots)
		fz_die("out of memory");
	for (int i = 0; i < jobs; i++) {
		snprintf(slots[i].s_dir, sizeof(slots[i].s_dir), "%s/w%d", dir, i);
		if (mkdir(slots[i].s_dir, 0755) && errno != EEXIST)
			fz_die("mkdir %s: %s", slots[i].s_dir, strerror(errno));
		slots[i].s_img = malloc(FZ_IMG_BYTES);
		if (!slots[i].s_img)
			fz_die("out of memory");
	}
	while (next < end || running) {
		for (int i = 0; i < jobs && next < end; i++) {
			if (!slots[i].s_pid) {
				start_case(&slots[i], seed, next++);
				running++;
			}
		}
		int st;
		pid_t r = waitpid(-1, &st, WNOHANG);
		if (r < 0)
			fz_die("waitpid: %s", strerror(errno));
		for (int i = 0; i < jobs; i++) {
			struct slot *sl = &slots[i];
			int timed_out = 0;
			if (!sl->s_pid)
				continue;
			if (r != sl->s_pid) {
				if (fz_now() - sl->s_start <= timeout)
					continue;
				kill(-sl->s_pid, SIGKILL);
				waitpid(sl->s_pid, &st, 0);
				timed_out = 1;
			}
			failures += end_case(sl, seed, st, timed_out, timeout, &kept);
			running--;
			if (++done % 100 == 0)
				printf("fuzz_image: %" PRIu64 " cases, %d failed, %.1f s\n", done,
				       failures, fz_now() - t0);
		}
		if (r == 0)
			usleep(2000);
	}
	for (int i = 0; i < jobs; i++)
		free(slots[i].s_img);
	free(slots);
	return failures;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *v = getenv(name);
	return v && *v ? strtoull(v, NULL, 0) : dflt;
}

int main(int argc, char **argv)
{
	uint64_t seed, cases, only = UINT64_MAX;
	double timeout;
	int keep, opt, failures = 0, one, jobs;
	char dir[2048], basepath[4096];
	pid_t pid;
	int st;

	seed = env_u64("FUZZ_SEED", (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20));
	cases = env_u64("FUZZ_CASES", 500);
	if (getenv("FUZZ_CASE") && *getenv("FUZZ_CASE"))
		only = env_u64("FUZZ_CASE", 0);
	timeout = (double)env_u64("FUZZ_TIMEOUT", 60);
	keep = (int)env_u64("FUZZ_KEEP", 0);
	jobs = (int)env_u64("FUZZ_JOBS", 2);
	fsck_path = getenv("FUZZ_FSCK");
	while ((opt = getopt(argc, argv, "n:s:c:t:j:k")) != -1) {
		switch (opt) {
		case 'n': cases = strtoull(optarg, NULL, 0); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'c': only = strtoull(optarg, NULL, 0); break;
		case 't': timeout = strtod(optarg, NULL); break;
		case 'j': jobs = atoi(optarg); break;
		case 'k': keep = 1; break;
		default:
			fprintf(stderr, "usage: %s [-n CASES] [-s SEED] [-c CASE] [-t SECONDS] [-j JOBS] [-k] FSCK\n",
				argv[0]);
			return 2;
		}
	}
	if (optind < argc)
		fsck_path = argv[optind];
	if (jobs < 1)
		jobs = 1;
	if (!fsck_path)
		fz_die("name the fsck.shoal to run (argument or FUZZ_FSCK)");
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* scratch in memory when there is /dev/shm: every case flushes */
	snprintf(dir, sizeof(dir), "%s/shoal-fuzz-XXXXXX",
		 getenv("FUZZ_TMPDIR") ? getenv("FUZZ_TMPDIR")
		 : access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
	if (!mkdtemp(dir))
		fz_die("mkdtemp: %s", strerror(errno));
	snprintf(basepath, sizeof(basepath), "%s/base.img", dir);

	pid = fork(); /* the builder exits: its heartbeat names a dead writer */
	if (pid == 0) {
		fz_build(basepath);
		exit(0);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		fz_die("building the base image failed");
	fz_base = malloc(FZ_IMG_BYTES);
	int fd = open(basepath, O_RDONLY);
	if (!fz_base || fd < 0 || pread(fd, fz_base, FZ_IMG_BYTES, 0) != FZ_IMG_BYTES)
		fz_die("reading %s", basepath);
	close(fd);
	fz_scan();
	printf("fuzz_image: seed %" PRIu64 " (FUZZ_SEED=%" PRIu64 "), %s, base image %s: %zu metadata "
	       "blocks and log images\n", seed, seed,
	       only != UINT64_MAX ? "one case" : "cases", basepath, fz_nblks);
	for (int k = 0; k < K_NKINDS; k++) {
		size_t *v;
		printf("  %-15s %zu blocks\n", fz_kind_name[k], fz_blocks_of((enum fz_kind)k, &v));
	}
	one = only != UINT64_MAX;
	double t0 = fz_now();
	failures = run_cases(dir, seed, one ? only : 0, one ? only + 1 : cases, one ? 1 : jobs,
			     timeout);
	printf("fuzz_image: seed %" PRIu64 ": %" PRIu64 " cases, %d failed, %.1f s\n", seed,
	       one ? 1 : cases, failures, fz_now() - t0);
	if (failures || keep) {
		printf("fuzz_image: kept %s (base.img: the undamaged image)\n", dir);
	} else {
		char cmd[4200];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			printf("fuzz_image: cannot remove %s\n", dir);
	}
	free(fz_base);
	return failures ? 1 : 0;
}
