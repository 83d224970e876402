/*
 * main.c - shoal-mount: mount a shoal filesystem through FUSE and serve it
 * until it is unmounted.
 *
 *	shoal-mount [-f] [-d] [-o OPTION[,OPTION...]] DEVICE MOUNTPOINT
 *
 * Start-up, in this order, so that the caller sees every error:
 *   parse options -> fork (the parent waits on a pipe for the child's verdict)
 *   -> dev_open -> shoal_mount -> fuse_session_new -> fuse_session_mount
 *   -> control thread: stats the mount (served by the loop started next),
 *      binds the socket, then calls on_ready: the child detaches (stdio to
 *      /dev/null, stderr to the log) and tells the parent to exit 0
 *   -> multithreaded FUSE loop.
 * Shutdown (umount, fusermount3 -u, SIGTERM, SIGINT, SIGHUP): the loop ends
 *   -> fuse_session_unmount -> fuse_session_destroy -> ctl_stop
 *   -> shoal_unmount -> exit 0.
 *
 * Invariants:
 *  (1) the process the caller started exits 0 only once the filesystem is
 *      mounted and served; a failure before that is printed on the caller's
 *      stderr as "shoal-mount: WHAT: REASON" and exits non-zero;
 *  (2) the fork comes before libshoal starts, because its threads must live
 *      in the process that serves the mount (fuse_daemonize() forks late,
 *      after the mount, and would leave them behind);
 *  (3) only the thread that runs the FUSE loop takes SIGINT, SIGTERM and
 *      SIGHUP: libfuse blocks them in its workers, we block them before
 *      libshoal and the control thread start, so a signal always wakes the
 *      loop; once the loop has ended they stay blocked, so a second signal
 *      cannot kill shoal_unmount half-way;
 *  (4) shoal_unmount runs only after the session can deliver no more
 *      requests and the control thread has stopped;
 *  (5) with lock=nolock the device is flock()ed, exclusively for a
 *      read-write mount and shared for a read-only one, from before
 *      shoal_mount until the process ends: one writer, or only readers;
 *      cluster mounts take it shared, so no nolock writer joins them;
 *  (6) a guardian process (guard.c), started before anything else, aborts
 *      the FUSE connection and detaches the mount if this process dies
 *      before it unmounted, from its mount(2) on (told of it just before,
 *      guard_mounting, and of its device once serving, guard_mounted):
 *      programs on a dead mount get an error, not a wait for ever, and the
 *      mount table does not keep the dead mount;
 *  (7) test hook, for the crash tests only (tests/crash/t_powercut.sh):
 *      with $SHOAL_TEST_POWER_CUT=N:SEED in the environment the device is
 *      wrapped in the fault device (core/dev_fault.c) as a disk with a
 *      volatile write cache: a write reaches the image only with the next
 *      flush, and at the device's write number N (counted from the open,
 *      0-based) the power goes: the pages of the unflushed writes that
 *      SEED picks (0: none) reach the image, the rest is lost, and the
 *      process SIGKILLs itself.  Only the environment turns it on, and
 *      it says so on stderr; without O_DIRECT and zero-copy I/O (the fault
 *      device has no descriptor of its own).
 */
#include "smount.h"
#include "guard.h"
#include "names.h"
#include "nodeids.h"

#include "dev.h"
#include "hb.h"

#include <shoal/ctl.h>

#include <pthread.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fuse.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PROG "shoal-mount"

/* Options that are not libshoal's. */
struct mount_args {
	char *ma_kernel;        /* for fuse_session_new's -o: mount and FUSE options */
	unsigned ma_max_threads; /* 0: libfuse's default */
	int ma_cpu;              /* CPU the daemon runs on; -1 any, -2 default */
	int ma_foreground;
	int ma_debug;
};

/* The verdict pipe to the waiting parent, or -1; see notify_parent(). */
static int verdict_fd = -1;
/* Set once the session is ending: start-up can no longer succeed. */
static int stopping;

/*
 * (7): wrap *devp in the fault device if $SHOAL_TEST_POWER_CUT asks; the
 * lower device is then *lowerp, for the caller to close after the wrapper.
 * 0, or -1 with a message (a malformed value: the mount does not start).
 */
static int power_cut_hook(struct shoal_dev **devp, struct shoal_dev **lowerp)
{
	const char *v = getenv("SHOAL_TEST_POWER_CUT");
	struct dev_fault_cfg cfg = { .fc_fail_write_at = -1, .fc_fail_flush_at = -1 };
	unsigned long long n, seed;
	struct shoal_dev *w;
	int used = 0, err;

	*lowerp = NULL;
	if (!v)
		return 0;
	if (sscanf(v, "%llu:%llu%n", &n, &seed, &used) != 2 || v[used] || n > INT64_MAX ||
	    seed > UINT_MAX) {
		fprintf(stderr, PROG ": SHOAL_TEST_POWER_CUT=%s: want WRITE_NUMBER:SEED\n", v);
		return -1;
	}
	err = dev_fault_wrap(*devp, &w);
	if (err < 0) {
		fprintf(stderr, PROG ": SHOAL_TEST_POWER_CUT: %s\n", strerror(-err));
		return -1;
	}
	cfg.fc_cut_at_write = (int64_t)n;
	cfg.fc_die_keep_seed = (unsigned)seed;
	cfg.fc_die_kill = 1;
	dev_fault_set(w, &cfg);
	fprintf(stderr,
		PROG ": TEST HOOK SHOAL_TEST_POWER_CUT=%s ACTIVE: the device loses its "
		"unflushed writes and this process dies at device write %llu\n", v, n);
	*lowerp = *devp;
	*devp = w;
	return 0;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: " PROG " [-f] [-d] [-o OPTION[,OPTION...]] DEVICE MOUNTPOINT\n"
		"\n"
		"Mount the shoal filesystem on DEVICE (an image file or a block device)\n"
		"at MOUNTPOINT through FUSE and serve it until it is unmounted (umount,\n"
		"fusermount3 -u, or SIGTERM/SIGINT to the daemon).\n"
		"\n"
		"  -f        stay in the foreground (default: detach once mounted)\n"
		"  -d        debug: log every FUSE request to stderr (implies -f)\n"
		"  -o OPTS   comma-separated options; -o may be repeated\n"
		"  -h        this help\n"
		"\n"
		"shoal options:\n"
		"  lock=nolock            a single node, no lock server (the default)\n"
		"  lock=shoal://HOST:PORT, lock=shoal:unix:PATH\n"
		"                         a cluster: the shoal-lockd at that address\n"
		"  secret=FILE            the cluster's shared secret (lockd --secret-file;\n"
		"                         mode 0600 or stricter, yours or root's)\n"
		"  entry_timeout=SECONDS  how long the kernel may cache names (default\n"
		"                         86400; a cluster on a kernel without FUSE's\n"
		"                         epoch notification: 0, every path walk asks)\n"
		"  hold=MS                longest adaptive minimum glock hold against\n"
		"                         ping-pong between nodes (default 100; 0: none)\n"
		"  node=NAME              this node's name (default: the host name)\n"
		"  relatime|noatime|strictatime\n"
		"                         when reads update atime (default: relatime);\n"
		"                         a read never locks more for it (docs/LOCKING.md)\n"
		"  commit=SECONDS         journal commit interval (default 5; 0: default)\n"
		"  heartbeat=MS           how often the mount rewrites its heartbeat block\n"
		"                         on the disk (default 5000, or $SHOAL_HEARTBEAT_MS);\n"
		"                         a mount, mkfs.shoal or fsck.shoal elsewhere that\n"
		"                         sees it change refuses the disk (docs/FORMAT.md 11.5)\n"
		"  cache=SIZE[K|M|G]      metadata buffer cache (default 256M)\n"
		"  journal=N              journal slot (default: the lock module's choice;\n"
		"                         with lock=shoal only the one lockd gives)\n"
		"  ro, rw                 read-only or read-write (default rw)\n"
		"  max_threads=N          FUSE worker threads (default: libfuse's, 10)\n"
		"  cpu=N|all              run the daemon on CPU N only, or on all\n"
		"                         CPUs (default); see pin_cpu()\n"
		"mount and FUSE options passed on:\n"
		"  allow_other, allow_root, auto_unmount, nosuid, suid, nodev, dev,\n"
		"  noexec, exec, sync, async, dirsync, context=, fscontext=,\n"
		"  defcontext=, rootcontext=\n"
		"always set: default_permissions (the kernel checks permissions on\n"
		"every path walk, cached or not), fsname=DEVICE, subtype=shoal.\n"
		"\n"
		"Exit status: 0 mounted (with -f: unmounted cleanly); 1 the mount, the\n"
		"session or the unmount failed; 2 bad usage or options.\n");
}

static void die_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, PROG ": ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n(" PROG " -h for help)\n");
	exit(2);
}

/* Parse an unsigned number with an optional binary K/M/G/T suffix. */
static int parse_size(const char *s, int suffix_ok, uint64_t *out)
{
	unsigned long long v;
	char *end;
	int shift = 0;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -errno;
	if (suffix_ok && *end) {
		const char *units = "KMGT", *u = strchr(units, *end & ~0x20);
		if (!u || end[1])
			return -EINVAL;
		shift = 10 * (int)(u - units + 1);
		end++;
		if (v > (UINT64_MAX >> shift))
			return -ERANGE;
	}
	if (*end)
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* Options handed to the kernel mount / libfuse unchanged. */
static int is_passthrough(const char *opt)
{
	static const char *const plain[] = {
		"allow_other", "allow_root", "auto_unmount", "nosuid", "suid", "nodev", "dev",
		"noexec", "exec", "sync", "async", "dirsync", NULL,
	};
	static const char *const prefixed[] = {
		"context=", "fscontext=", "defcontext=", "rootcontext=", NULL,
	};
	int i;

	for (i = 0; plain[i]; i++)
		if (!strcmp(opt, plain[i]))
			return 1;
	for (i = 0; prefixed[i]; i++)
		if (!strncmp(opt, prefixed[i], strlen(prefixed[i])))
			return 1;
	return 0;
}

/* One option of -o: into sm->sm_opts or mo; exits 2 on a bad one. */
static char *abs_path(const char *path, int dir);
static pthread_mutex_t inval_lock = PTHREAD_MUTEX_INITIALIZER; /* sm_se's lifetime */
static char lock_spec[1024];   /* lock= of a cluster mount */
double smount_entry_timeout = -1; /* -1: the default, SMOUNT_TIMEOUT */
int smount_cluster;               /* a cluster lock module */
static int entry_timeout_set;     /* entry_timeout= was given */
static void epoch_probe(struct smount *sm);
static char secret_path[4096]; /* secret= */

static void parse_one(struct smount *sm, struct mount_args *ma, const char *opt)
{
	struct shoal_mount_opts *o = &sm->sm_opts;
	const char *val = strchr(opt, '=');
	uint64_t n;

	val = val ? val + 1 : "";
	if (!strncmp(opt, "lock=", 5)) {
		if (!strcmp(val, "nolock"))
			o->mo_lock = "nolock";
		else if (strlen(val) >= sizeof(lock_spec))
			die_usage("lock=%s: too long", val);
		else if ((!strncmp(val, "shoal://", 8) && val[8]) ||
			 (!strncmp(val, "shoal:unix:", 11) && val[11]))
			o->mo_lock = strcpy(lock_spec, val);
		else
			die_usage("lock=%s: unknown lock protocol", val);
	} else if (!strncmp(opt, "secret=", 7)) {
		if (!*val)
			die_usage("%s: want the file holding the cluster's secret", opt);
		/* lockd's client reads it (mode 0600 or stricter, ours or
		 * root's) after the daemon has changed directory */
		char *p = realpath(val, NULL);
		if (!p) {
			fprintf(stderr, PROG ": secret=%s: the cluster's secret file: %s\n", val,
				strerror(errno));
			exit(1);
		}
		snprintf(secret_path, sizeof(secret_path), "%s", p);
		free(p);
		o->mo_secret = secret_path;
	} else if (!strncmp(opt, "entry_timeout=", 14)) {
		if (parse_size(val, 0, &n) < 0 || n > 86400)
			die_usage("%s: want seconds, 0 to 86400", opt);
		smount_entry_timeout = (double)n;
		entry_timeout_set = 1;
	} else if (!strncmp(opt, "hold=", 5)) {
		if (parse_size(val, 0, &n) < 0 || n > 10000)
			die_usage("%s: want milliseconds, 0 to 10000", opt);
		o->mo_hold_ms = (unsigned)n;
	} else if (!strncmp(opt, "node=", 5)) {
		if (!*val || strlen(val) >= SHOAL_LOCKNAME_LEN)
			die_usage("%s: a node name is 1 to 63 bytes (a longer one would be cut, "
				  "and two names could become one)", opt);
		strcpy(sm->sm_node, val);
	} else if (!strcmp(opt, "noatime")) {
		o->mo_atime = SHOAL_NOATIME;
	} else if (!strcmp(opt, "relatime")) {
		o->mo_atime = SHOAL_RELATIME;
	} else if (!strcmp(opt, "strictatime")) {
		o->mo_atime = SHOAL_STRICTATIME;
	} else if (!strncmp(opt, "heartbeat=", 10)) {
		if (parse_size(val, 0, &n) < 0 || n < HB_MIN_MS || n > HB_MAX_MS)
			die_usage("%s: want milliseconds, 100 to 60000", opt);
		o->mo_heartbeat_ms = (unsigned)n;
	} else if (!strncmp(opt, "commit=", 7)) {
		if (parse_size(val, 0, &n) < 0 || n > 24 * 3600)
			die_usage("%s: want seconds, 0 to 86400", opt);
		o->mo_commit_secs = n ? (unsigned)n : 5;
	} else if (!strncmp(opt, "cache=", 6)) {
		if (parse_size(val, 1, &n) < 0 || n == 0)
			die_usage("%s: want a size such as 256M", opt);
		o->mo_cache_bytes = n;
	} else if (!strncmp(opt, "journal=", 8)) {
		if (parse_size(val, 0, &n) < 0 || n > INT_MAX)
			die_usage("%s: want a journal number", opt);
		o->mo_journal = (int)n;
	} else if (!strcmp(opt, "ro")) {
		o->mo_readonly = 1;
	} else if (!strcmp(opt, "rw")) {
		o->mo_readonly = 0;
	} else if (!strncmp(opt, "cpu=", 4)) {
		if (!strcmp(val, "all"))
			ma->ma_cpu = -1;
		else if (parse_size(val, 0, &n) < 0 || n >= CPU_SETSIZE)
			die_usage("%s: want a CPU number or all", opt);
		else
			ma->ma_cpu = (int)n;
	} else if (!strncmp(opt, "max_threads=", 12)) {
		if (parse_size(val, 0, &n) < 0 || n == 0 || n > 1024)
			die_usage("%s: want 1 to 1024", opt);
		ma->ma_max_threads = (unsigned)n;
	} else if (!strcmp(opt, "default_permissions")) {
		/* always on */
	} else if (!strncmp(opt, "fsname=", 7) || !strncmp(opt, "subtype=", 8)) {
		die_usage("%s: set by shoal-mount itself", opt);
	} else if (is_passthrough(opt)) {
		if (fuse_opt_add_opt_escaped(&ma->ma_kernel, opt) < 0)
			die_usage("%s: out of memory", opt);
	} else {
		die_usage("unknown option %s", opt);
	}
}

/* Split an -o argument at unescaped commas ("\," is a comma in a value). */
static void parse_options(struct smount *sm, struct mount_args *ma, const char *s)
{
	char *tok = malloc(strlen(s) + 1);
	size_t len = 0;

	if (!tok)
		die_usage("%s: out of memory", s);
	for (;; s++) {
		if (*s == '\\' && s[1]) {
			tok[len++] = *++s;
			continue;
		}
		if (*s && *s != ',') {
			tok[len++] = *s;
			continue;
		}
		tok[len] = '\0';
		if (len)
			parse_one(sm, ma, tok);
		len = 0;
		if (!*s)
			break;
	}
	free(tok);
}

/* The options in effect, as `shoal status` shows them. */
static char *shown_options(const struct smount *sm, const struct mount_args *ma)
{
	static const char *const atime[] = { "relatime", "noatime", "strictatime" };
	const struct shoal_mount_opts *o = &sm->sm_opts;
	char *s = NULL;
	size_t size = 0;
	FILE *f;

	f = open_memstream(&s, &size);
	if (!f)
		return NULL;
	fprintf(f, "%s,%s,commit=%u,lock=%s,node=%s", o->mo_readonly ? "ro" : "rw",
		atime[o->mo_atime], o->mo_commit_secs, o->mo_lock, sm->sm_node);
	fprintf(f, ",cache=%lluK", (unsigned long long)(o->mo_cache_bytes >> 10));
	if (o->mo_journal >= 0)
		fprintf(f, ",journal=%d", o->mo_journal);
	if (ma->ma_max_threads)
		fprintf(f, ",max_threads=%u", ma->ma_max_threads);
	if (ma->ma_cpu >= 0)
		fprintf(f, ",cpu=%d", ma->ma_cpu);
	else if (ma->ma_cpu == -1)
		fprintf(f, ",cpu=all");
	if (ma->ma_kernel)
		fprintf(f, ",%s", ma->ma_kernel);
	fclose(f);
	return s;
}

/*
 * The arguments of fuse_session_new: -d for debugging, and the mount and
 * FUSE options, ours first, then those passed on.  0 or -ENOMEM.
 */
static int fuse_args_build(const struct smount *sm, const struct mount_args *ma,
			   struct fuse_args *args)
{
	char *opts = NULL, *fsname = NULL;
	int ret = -ENOMEM;

	if (asprintf(&fsname, "fsname=%s", sm->sm_device) < 0) {
		fsname = NULL;
		goto out_free;
	}
	if (fuse_opt_add_arg(args, PROG) < 0 ||
	    (ma->ma_debug && fuse_opt_add_arg(args, "-d") < 0) ||
	    fuse_opt_add_opt(&opts, "default_permissions,subtype=shoal") < 0 ||
	    fuse_opt_add_opt_escaped(&opts, fsname) < 0 ||
	    (sm->sm_opts.mo_readonly && fuse_opt_add_opt(&opts, "ro") < 0) ||
	    (sm->sm_opts.mo_atime == SHOAL_NOATIME && fuse_opt_add_opt(&opts, "noatime") < 0) ||
	    (ma->ma_kernel && fuse_opt_add_opt(&opts, ma->ma_kernel) < 0) ||
	    fuse_opt_add_arg(args, "-o") < 0 || fuse_opt_add_arg(args, opts) < 0)
		goto out_free;
	ret = 0;
out_free:
	free(opts);
	free(fsname);
	return ret;
}

/*
 * Tell the parent how start-up went (0 mounted, else the exit status it
 * should return), once; later calls do nothing.
 */
static void notify_parent(int status)
{
	int fd = __atomic_exchange_n(&verdict_fd, -1, __ATOMIC_SEQ_CST);
	unsigned char c = (unsigned char)status;
	ssize_t n;

	if (fd < 0)
		return;
	do
		n = write(fd, &c, 1);
	while (n < 0 && errno == EINTR);
	close(fd);
}

/*
 * Fork; the parent waits for the child's verdict and exits with it.  The
 * child (the daemon to be) returns, in a session of its own.
 */
static void fork_daemon(void)
{
	int pfd[2];
	unsigned char c;
	ssize_t n;
	pid_t pid;

	if (pipe2(pfd, O_CLOEXEC) < 0) {
		fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
		exit(1);
	}
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
		exit(1);
	}
	if (pid > 0) {
		close(pfd[1]);
		do
			n = read(pfd[0], &c, 1);
		while (n < 0 && errno == EINTR);
		_exit(n == 1 ? c : 1); /* no verdict: the child died */
	}
	close(pfd[0]);
	verdict_fd = pfd[1];
	setsid();
}

/* One line in the log, stamped with the time and our pid. */
static void log_line(const struct smount *sm, const char *fmt, ...)
{
	char stamp[32];
	struct tm tm;
	time_t now = time(NULL);
	va_list ap;

	if (!sm->sm_log[0])
		return;
	strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
	fprintf(stderr, "%s " PROG "[%ld]: ", stamp, (long)sm->sm_pid);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Leave the caller's terminal: stdin and stdout to /dev/null, stderr to log. */
static void detach(struct smount *sm, dev_t dev)
{
	int fd, log = -1;

	if (dev) {
		shoal_ctl_path(sm->sm_log, sizeof(sm->sm_log), dev, "log");
		log = open(sm->sm_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
		if (log < 0)
			sm->sm_log[0] = '\0';
	}
	fd = open("/dev/null", O_RDWR);
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(log >= 0 ? log : fd, STDERR_FILENO);
		if (fd > STDERR_FILENO)
			close(fd);
	}
	if (log >= 0) {
		close(log);
		log_line(sm, "mounted %s on %s (%s)", sm->sm_device, sm->sm_mountpoint,
		     sm->sm_options);
	}
	if (chdir("/") < 0) {
		/* harmless: we only use absolute paths */
	}
}

/* The control thread is serving (err 0) or could not start (err < 0). */
static void on_ready(void *arg, dev_t dev, int err)
{
	struct smount *sm = arg;

	if (err < 0)
		fprintf(stderr, PROG ": %s: no control socket: %s\n", sm->sm_mountpoint,
			strerror(-err));
	if (err == 0) {
		epoch_probe(sm); /* the mount answered a stat: the kernel is ready */
		guard_mounted(dev); /* (6) */
	}
	if (__atomic_load_n(&verdict_fd, __ATOMIC_SEQ_CST) >= 0 &&
	    !__atomic_load_n(&stopping, __ATOMIC_SEQ_CST)) {
		detach(sm, dev);
		notify_parent(0);
	}
}

static void set_signals_blocked(int how)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGQUIT);
	pthread_sigmask(how, &set, NULL);
}

/* The absolute path of arg, or exit 1 with "shoal-mount: arg: reason". */
static char *abs_path(const char *arg, int want_dir)
{
	struct stat st;
	char *p;

	p = realpath(arg, NULL);
	if (!p || stat(p, &st) < 0) {
		fprintf(stderr, PROG ": %s: %s\n", arg, strerror(errno));
		exit(1);
	}
	if (want_dir && !S_ISDIR(st.st_mode)) {
		fprintf(stderr, PROG ": %s: %s\n", arg, strerror(ENOTDIR));
		exit(1);
	}
	return p;
}

/*
 * Optionally keep the daemon on one CPU (cpu=N).  Measured on the 2-vCPU
 * machines, 20,000 create+stat+unlink: 2.9 s pinned against 5.7-6.4 s free
 * in one series of three rounds each, but 6.7-10.7 s pinned against
 * 4.8-5.9 s free in another, with other work on the machine: pinning wins
 * only when that CPU is otherwise idle, so it is not the default.
 */
static void pin_cpu(const struct mount_args *ma)
{
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int cpu = ma->ma_cpu;
	cpu_set_t set;

	if (cpu < 0 || ncpu <= 1)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		fprintf(stderr, PROG ": cpu=%d: %s (running on all CPUs)\n", cpu, strerror(errno));
}

/*
 * FUSE_HANDLE_KILLPRIV_V2, which libfuse 3.14 cannot ask for: the INIT
 * reply is patched on its way to the kernel (a custom io that is plain
 * read and writev otherwise).  With it the kernel marks the superblock
 * SB_NOSEC, so an inode found once without set-ID bits or
 * security.capability is not asked again (without it, every write(2)
 * cost a GETXATTR of security.capability before the WRITE: two round
 * trips where one does), and it leaves killing set-ID bits on write,
 * truncate and chown, and a file's capability on write and truncate, to
 * libshoal (core/ops.c ops_kill_priv), which does it on every node's behalf.
 * Only if the kernel offered the flag; any libfuse without custom io
 * support simply mounts without it.
 *
 * The same patch asks for FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6, flags2
 * bit 4, which libfuse 3.14 does not know either): a cluster opens
 * O_APPEND files for direct I/O (ops.c (7)), and without it the kernel
 * refuses a shared mapping of such a file (ENODEV).
 *
 * The same io lets O_TMPFILE through (FUSE_TMPFILE, protocol 7.37, which
 * libfuse 3.14 does not know: it would answer ENOSYS, and the kernel then
 * EOPNOTSUPP to every O_TMPFILE open of the mount).  The request is a
 * FUSE_CREATE's in every byte but the opcode (fuse_create_in and the
 * dentry's name, always "/" for a tmpfile, a name no create can have) and
 * wants the same reply (entry and open), so kp_read turns it into a
 * FUSE_CREATE of "/" and op_create (fuse/ops.c) makes the unnamed file.
 */
#define KP_DIRECT_IO_ALLOW_MMAP (1u << (36 - 32)) /* in flags2 */
static int kp_state; /* 0 waiting for INIT, 1 INIT read (kp_unique), 2 done */
static uint64_t kp_unique;
static int kp_offered, kp_dio_mmap;

static ssize_t kp_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);
	(void)userdata;
	if (n >= (ssize_t)(sizeof(struct fuse_in_header) + sizeof(struct fuse_create_in) + 2)) {
		struct fuse_in_header *h = buf;
		const char *name = (const char *)(h + 1) + sizeof(struct fuse_create_in);
		if (h->opcode == FUSE_TMPFILE && name[0] == '/' && name[1] == 0)
			h->opcode = FUSE_CREATE; /* op_create: a tmpfile */
	}
	if (n >= (ssize_t)(sizeof(struct fuse_in_header) + offsetof(struct fuse_init_in, flags) +
			   sizeof(uint32_t)) &&
	    !__atomic_load_n(&kp_state, __ATOMIC_ACQUIRE)) {
		const struct fuse_in_header *h = buf;
		if (h->opcode == FUSE_INIT) {
			const struct fuse_init_in *in = (const void *)(h + 1);
			kp_offered = (in->flags & FUSE_HANDLE_KILLPRIV_V2) != 0;
			kp_dio_mmap = (in->flags & FUSE_INIT_EXT) &&
				      (size_t)n >= sizeof(*h) + offsetof(struct fuse_init_in, flags2) +
							   sizeof(uint32_t) &&
				      (in->flags2 & KP_DIRECT_IO_ALLOW_MMAP);
			kp_unique = h->unique;
			__atomic_store_n(&kp_state, 1, __ATOMIC_RELEASE);
		}
	}
	return n;
}

static ssize_t kp_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	if (__atomic_load_n(&kp_state, __ATOMIC_ACQUIRE) == 1 && count >= 2 &&
	    iov[0].iov_len >= sizeof(struct fuse_out_header)) {
		const struct fuse_out_header *oh = iov[0].iov_base;
		if (oh->unique == kp_unique) {
			struct fuse_init_out *out = iov[1].iov_base;
			if (oh->error == 0 && kp_offered &&
			    iov[1].iov_len >= offsetof(struct fuse_init_out, flags) + sizeof(uint32_t))
				out->flags |= FUSE_HANDLE_KILLPRIV_V2;
			if (oh->error == 0 && kp_dio_mmap &&
			    iov[1].iov_len >= offsetof(struct fuse_init_out, flags2) + sizeof(uint32_t)) {
				out->flags |= FUSE_INIT_EXT;
				out->flags2 |= KP_DIRECT_IO_ALLOW_MMAP;
			}
			__atomic_store_n(&kp_state, 2, __ATOMIC_RELEASE);
		}
	}
	return writev(fd, iov, count);
}

static void killpriv_v2_io(struct fuse_session *se)
{
	static const struct fuse_custom_io io = {.read = kp_read, .writev = kp_writev};
	int ret = fuse_session_custom_io(se, &io, fuse_session_fd(se));
	if (ret != 0)
		fprintf(stderr, PROG ": FUSE custom io: %s (the kernel checks security.capability "
			"on every write, O_TMPFILE gives EOPNOTSUPP)\n", strerror(ret < 0 ? -ret : EINVAL));
}

/*
 * Take the nolock device lock (5).  A plain umount returns before the old
 * daemon has finished its final checkpoint, so a mount right after one
 * waits up to ten seconds for that daemon to let go.
 */
static int lock_device(struct smount *sm, struct shoal_dev *dev)
{
	int cluster = strcmp(sm->sm_opts.mo_lock, "nolock") != 0;
	int op = (sm->sm_opts.mo_readonly || cluster ? LOCK_SH : LOCK_EX) | LOCK_NB;

	for (int tries = 0; flock(dev->d_fd, op) < 0; tries++) {
		if (errno != EWOULDBLOCK) {
			fprintf(stderr, PROG ": %s: %s\n", sm->sm_device, strerror(errno));
			return -1;
		}
		if (tries == 200) {
			fprintf(stderr, PROG ": %s: in use by a lock=nolock mount%s\n",
				sm->sm_device, cluster ? "" : " or a cluster");
			return -1;
		}
		usleep(50000);
	}
	return 0;
}

/*
 * Kernel cache invalidation (glock.c (5)).  libshoal's demote worker asks
 * before another node gets an inode's glock; the notifications run on
 * threads of their own and the worker waits for them at most
 * INVAL_WAIT_MS: a notification can block on a directory lock the kernel
 * holds for a request of this very mount (two nodes changing one
 * directory at once), and the worker must keep serving other glocks.
 */
#define INVAL_THREADS 4
#define INVAL_WAIT_MS 200

/* node ids of one inode told at once: its own and its newest incarnations */
#define INVAL_IDS 8

/*
 * One job: the node ids of one inode, told on a thread of a queue's own,
 * the caller waiting at most ij_wait_ms; a job the caller gave up on is
 * freed by the thread.  IJ_CACHES: names and pages (may block on a kernel
 * lock); IJ_NOW: attributes only and, for a directory, the epoch (never
 * block).  inval_lock guards the queues and the jobs on them.
 */
enum { IJ_CACHES, IJ_NOW };

struct inval_job {
	int ij_kind;
	int ij_epoch; /* IJ_NOW: the inode is a directory and the epoch works */
	int ij_held;  /* IJ_NOW: libshoal handed the kernel references to it */
	int ij_isdir; /* IJ_NOW: 1 a directory, 0 not, -1 not known */
	fuse_ino_t ij_ids[INVAL_IDS];
	size_t ij_nids;
	int ij_done, ij_abandoned;
	struct inval_job *ij_next;
};

struct inval_queue {
	pthread_cond_t iq_work, iq_done;
	struct inval_job *iq_head, **iq_tail;
	int iq_started, iq_stop;
	pthread_t iq_threads[INVAL_THREADS];
};

static struct inval_queue iq = {PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL,
				&iq.iq_head, 0, 0, {0}}; /* IJ_CACHES, INVAL_THREADS threads */
static struct inval_queue nq = {PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL,
				&nq.iq_head, 0, 0, {0}}; /* IJ_NOW, one thread */
static struct smount *inval_sm; /* inval_lock */

static int epoch_write(struct fuse_session *se);

/*
 * Node ids whose FORGET is being served (ops.c: a FORGET's one, a batch's
 * all of them until each is done), with how many times each: a list that
 * grows as needed (a batch can carry thousands).  forget_lock.
 */
struct forgetting {
	uint64_t fg_ino;
	uint32_t fg_count;
};
static pthread_mutex_t forget_lock = PTHREAD_MUTEX_INITIALIZER;
static struct forgetting *forgets;
static size_t nforgets, forgets_cap;

static struct forgetting *forget_find(uint64_t ino)
{
	for (size_t i = 0; i < nforgets; i++)
		if (forgets[i].fg_ino == ino)
			return &forgets[i];
	return NULL;
}

void smount_forget_begin(uint64_t ino)
{
	struct forgetting *f;

	pthread_mutex_lock(&forget_lock);
	f = forget_find(ino);
	if (!f && nforgets == forgets_cap) {
		size_t cap = forgets_cap ? 2 * forgets_cap : 64;
		struct forgetting *n = realloc(forgets, cap * sizeof(*n));
		if (n) {
			forgets = n;
			forgets_cap = cap;
		}
	}
	if (!f && nforgets < forgets_cap) {
		f = &forgets[nforgets++];
		*f = (struct forgetting){ ino, 0 };
	}
	if (f) /* else out of memory: now_retry just waits longer */
		f->fg_count++;
	pthread_mutex_unlock(&forget_lock);
}

void smount_forget_end(uint64_t ino)
{
	struct forgetting *f;

	pthread_mutex_lock(&forget_lock);
	f = forget_find(ino);
	if (f && --f->fg_count == 0)
		*f = forgets[--nforgets];
	pthread_mutex_unlock(&forget_lock);
}

static int forget_pending(uint64_t ino)
{
	int found;

	pthread_mutex_lock(&forget_lock);
	found = forget_find(ino) != NULL;
	pthread_mutex_unlock(&forget_lock);
	return found;
}

/*
 * The kernel does not know fino, yet libshoal handed it references it has
 * not given back: an entry reply is on its way (fuse/ops.c replies after
 * the glock holds ended), and the kernel would take its attributes with
 * their lifetime after this notification found nothing.  Tell it again
 * until it has the inode, or a FORGET of it is being served or was (the
 * kernel dropped it: ENOENT is the truth; libshoal's count of the
 * kernel's references, read without fs_lock, went to 0), or NOW_RETRY_MS
 * passed (a FORGET not read from /dev/fuse yet, or a reply the kernel
 * never took; said on stderr).  Longer than the caller waits
 * (NOW_WAIT_MS): the caller goes on, this thread keeps trying.  Files
 * only: a directory's entries keep no attribute lifetime
 * (smount_entry_attr_ttl), and it may have several node ids.
 */
#define NOW_RETRY_MS 2000

static void now_retry(struct smount *sm, struct fuse_session *se, fuse_ino_t fino)
{
	uint64_t ino = fino == FUSE_ROOT_ID ? shoal_root(sm->sm_fs) : (uint64_t)fino;
	struct timespec t0, t;
	long us = 20;
	int r = -ENOENT;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (r == -ENOENT && !forget_pending((uint64_t)fino) &&
	       shoal_kernel_refs(sm->sm_fs, ino)) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 >=
		    NOW_RETRY_MS) {
			fprintf(stderr,
				PROG ": inode %llu: the kernel took no reply for it in %d ms; "
				     "its attributes here may be stale until another node "
				     "takes its lock again\n",
				(unsigned long long)fino, NOW_RETRY_MS);
			return;
		}
		usleep((useconds_t)us);
		if (us < 1000)
			us *= 2;
		r = fuse_lowlevel_notify_inval_inode(se, fino, -1, 0);
	}
}

/* inval_lock held; releases it meanwhile */
static void inval_run(struct smount *sm, const struct inval_job *j)
{
	struct fuse_session *se = sm->sm_se; /* stays until inval_stop joined us */
	char **names;
	size_t n;

	if (!se)
		return; /* not mounted (yet, or any more): the kernel caches nothing */
	pthread_mutex_unlock(&inval_lock);
	for (size_t k = 0; k < j->ij_nids; k++) {
		fuse_ino_t fino = j->ij_ids[k];
		if (j->ij_kind == IJ_NOW) {
			int r = fuse_lowlevel_notify_inval_inode(se, fino, -1, 0);
			if (r == -ENOENT && j->ij_held && j->ij_isdir == 0)
				now_retry(sm, se, fino);
			continue;
		}
		n = names_take(fino, &names);
		for (size_t i = 0; i < n; i++) {
			fuse_lowlevel_notify_inval_entry(se, fino, names[i], strlen(names[i]));
			free(names[i]);
		}
		free(names);
		fuse_lowlevel_notify_inval_inode(se, fino, 0, 0);
	}
	if (j->ij_epoch)
		epoch_write(se);
	pthread_mutex_lock(&inval_lock);
}

static void *inval_thread(void *arg)
{
	struct inval_queue *q = arg;

	pthread_mutex_lock(&inval_lock);
	for (;;) {
		struct inval_job *j;
		while (!q->iq_head && !q->iq_stop)
			pthread_cond_wait(&q->iq_work, &inval_lock);
		if (!q->iq_head)
			break;
		j = q->iq_head;
		q->iq_head = j->ij_next;
		if (!q->iq_head)
			q->iq_tail = &q->iq_head;
		inval_run(inval_sm, j);
		if (j->ij_abandoned) {
			free(j);
		} else {
			j->ij_done = 1;
			pthread_cond_broadcast(&q->iq_done);
		}
	}
	pthread_mutex_unlock(&inval_lock);
	return NULL;
}

/* Tell the kernel about ino (its node ids) on q's threads, waiting at most
 * wait_ms for them. */
static void inval_submit(struct smount *sm, struct inval_queue *q, int kind, uint64_t ino,
			 int isdir, int epoch, int held, long wait_ms)
{
	struct inval_job *j = calloc(1, sizeof(*j));
	struct timespec ts;

	if (!j)
		return;
	j->ij_kind = kind;
	j->ij_epoch = epoch;
	j->ij_held = held;
	j->ij_isdir = isdir;
	if (ino == shoal_root(sm->sm_fs)) {
		j->ij_ids[j->ij_nids++] = FUSE_ROOT_ID;
	} else {
		uint64_t ids[INVAL_IDS - 1];
		size_t n = nid_list(ino, ids, INVAL_IDS - 1);
		j->ij_ids[j->ij_nids++] = (fuse_ino_t)ino;
		for (size_t i = 0; i < n; i++)
			j->ij_ids[j->ij_nids++] = (fuse_ino_t)ids[i];
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += wait_ms * 1000000L;
	ts.tv_sec += ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_mutex_lock(&inval_lock);
	if (!q->iq_started || q->iq_stop || !sm->sm_se) {
		pthread_mutex_unlock(&inval_lock);
		free(j);
		return;
	}
	*q->iq_tail = j;
	q->iq_tail = &j->ij_next;
	pthread_cond_signal(&q->iq_work);
	while (!j->ij_done)
		if (pthread_cond_timedwait(&q->iq_done, &inval_lock, &ts))
			break;
	if (j->ij_done)
		free(j);
	else
		j->ij_abandoned = 1; /* the thread frees it */
	pthread_mutex_unlock(&inval_lock);
}

static void smount_inval(void *arg, uint64_t ino)
{
	inval_submit(arg, &iq, IJ_CACHES, ino, -1, 0, 0, INVAL_WAIT_MS);
}

/*
 * FUSE_NOTIFY_INC_EPOCH (FUSE 7.44, Linux 6.16): every name the kernel has
 * of this mount, positive or negative, is looked up again on its next use
 * (the kernel stamps each name with the epoch current when it sent the
 * request that made it).  The kernel takes no lock for it, so it never
 * waits for a request of this mount, and it is sent when no operation can
 * use the directory's glock any more (glops.c inval_inode): after it, no
 * name this node handed out under that glock is trusted.  With it the
 * kernel may keep names as long as it likes (entry_timeout); without it a
 * cluster mount gives names no lifetime (every path walk asks).  libfuse
 * 3.14 has no call for it: the header goes to /dev/fuse as libfuse sends
 * its own notifications.
 */
#define SMOUNT_NOTIFY_INC_EPOCH 8
static int epoch_works; /* atomic: the kernel took one */

static int epoch_write(struct fuse_session *se)
{
	struct fuse_out_header oh = { .len = sizeof(oh), .error = SMOUNT_NOTIFY_INC_EPOCH };
	ssize_t n = write(fuse_session_fd(se), &oh, sizeof(oh));

	return n == (ssize_t)sizeof(oh) ? 0 : n < 0 ? -errno : -EIO;
}

/* Once the session serves requests: may the kernel keep names? */
static void epoch_probe(struct smount *sm)
{
	int ret = -ENOTCONN;

	if (!sm->sm_opts.mo_inval_now)
		return;
	pthread_mutex_lock(&inval_lock);
	if (sm->sm_se)
		ret = epoch_write(sm->sm_se);
	pthread_mutex_unlock(&inval_lock);
	if (ret < 0)
		return; /* an older kernel: names keep no lifetime */
	__atomic_store_n(&epoch_works, 1, __ATOMIC_RELEASE);
	names_sets_off(); /* one epoch covers them all: no name by name */
}

/*
 * What the kernel is told once no operation can use a glock (glops.c
 * inval_inode, and a lost conversion: mo_inval_now): the inode's
 * attributes (FUSE_NOTIFY_INVAL_INODE with a negative offset: attributes
 * only, no page, so the kernel takes no lock for it either; its next use
 * asks shoal, and new attributes drop the pages if the size changed: no
 * auto_inval_data, docs/LOCKING.md) and for
 * a directory the epoch.  The page cache notification of mo_inval, which
 * can block, may have given up before; these cannot block.  The caller
 * may be serving a request, so one thread of its own sends them, and the
 * caller waits for it (at most NOW_WAIT_MS, in case it ever blocked).
 */
#define NOW_WAIT_MS 1000

static void smount_inval_now(void *arg, uint64_t ino, int isdir, int held)
{
	inval_submit(arg, &nq, IJ_NOW, ino, isdir,
		     isdir && __atomic_load_n(&epoch_works, __ATOMIC_ACQUIRE), held, NOW_WAIT_MS);
}

/*
 * An operation changed attributes the kernel caches for SMOUNT_TIMEOUT,
 * and its reply carries none (FS_IOC_SETFLAGS: ctime; an ACL: mode and
 * ctime): the kernel drops them as at a demotion, before the reply.
 */
void smount_attr_changed(struct smount *sm, uint64_t ino)
{
	inval_submit(sm, &nq, IJ_NOW, ino, 0, 0, 0, NOW_WAIT_MS);
}

double smount_entry_ttl(void)
{
	if (!__atomic_load_n(&epoch_works, __ATOMIC_ACQUIRE) && !entry_timeout_set &&
	    smount_cluster)
		return 0;
	return smount_entry_timeout;
}

double smount_entry_attr_ttl(int trusted, int isdir)
{
	return smount_cluster && (!trusted || isdir) ? 0 : SMOUNT_TIMEOUT;
}

static void inval_start(struct smount *sm)
{
	pthread_mutex_lock(&inval_lock);
	inval_sm = sm;
	if (pthread_create(&nq.iq_threads[0], NULL, inval_thread, &nq) == 0)
		nq.iq_started = 1;
	for (int i = 0; i < INVAL_THREADS; i++)
		if (pthread_create(&iq.iq_threads[iq.iq_started], NULL, inval_thread, &iq) == 0)
			iq.iq_started++;
	pthread_mutex_unlock(&inval_lock);
}

static void inval_stop(void)
{
	struct inval_queue *qs[] = {&iq, &nq};

	pthread_mutex_lock(&inval_lock);
	for (int k = 0; k < 2; k++) {
		qs[k]->iq_stop = 1;
		pthread_cond_broadcast(&qs[k]->iq_work);
	}
	pthread_mutex_unlock(&inval_lock);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < qs[k]->iq_started; i++)
			pthread_join(qs[k]->iq_threads[i], NULL);
}

int main(int argc, char **argv)
{
	struct smount sm = { 0 };
	struct mount_args ma = { .ma_cpu = -1 };
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg;
	struct ctl_server *ctl = NULL;
	struct fuse_session *se;
	struct shoal_dev *dev, *cut_lower = NULL;
	int c, ret, status = 0;

	sm.sm_opts.mo_lock = "nolock";
	sm.sm_opts.mo_atime = SHOAL_RELATIME;
	sm.sm_opts.mo_commit_secs = 5;
	sm.sm_opts.mo_cache_bytes = 256ull << 20;
	sm.sm_opts.mo_journal = -1;
	sm.sm_opts.mo_hold_ms = 100;
	if (gethostname(sm.sm_node, sizeof(sm.sm_node) - 1) < 0 || !sm.sm_node[0])
		strcpy(sm.sm_node, "localhost");

	while ((c = getopt(argc, argv, "fdo:h")) != -1) {
		switch (c) {
		case 'f':
			ma.ma_foreground = 1;
			break;
		case 'd':
			ma.ma_debug = ma.ma_foreground = 1;
			break;
		case 'o':
			parse_options(&sm, &ma, optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	sm.sm_opts.mo_node = sm.sm_node;
	sm.sm_device = abs_path(argv[optind], 0);
	sm.sm_mountpoint = abs_path(argv[optind + 1], 1);
	sm.sm_options = shown_options(&sm, &ma);
	if (!sm.sm_options) {
		fprintf(stderr, PROG ": %s\n", strerror(ENOMEM));
		return 1;
	}

	if (fuse_args_build(&sm, &ma, &args) < 0) {
		fprintf(stderr, PROG ": %s\n", strerror(ENOMEM));
		return 1;
	}

	signal(SIGPIPE, SIG_IGN); /* a vanished control client is no reason to die */
	if (!ma.ma_foreground)
		fork_daemon();
	sm.sm_pid = getpid();
	ret = guard_start(sm.sm_mountpoint); /* (6): before any thread or descriptor */
	if (ret < 0)
		fprintf(stderr, PROG ": %s: no guardian (%s): if this daemon dies, unmount by hand\n",
			sm.sm_mountpoint, strerror(-ret));
	set_signals_blocked(SIG_BLOCK); /* (3): inherited by every thread from here */
	pin_cpu(&ma);                   /* inherited by every thread too */

	ret = dev_open(sm.sm_device, sm.sm_opts.mo_readonly, &dev);
	if (ret < 0) {
		fprintf(stderr, PROG ": %s: %s\n", sm.sm_device, strerror(-ret));
		goto out_args;
	}
	if (power_cut_hook(&dev, &cut_lower) < 0)
		goto out_dev;
	/*
	 * Without a lock server nothing else may write the device: a second
	 * read-write mount of it would corrupt it.  Read-only mounts share.
	 */
	if (lock_device(&sm, dev) < 0)
		goto out_dev;
	/* Large data writes return once queued (dev.c (5)); a failure only
	 * costs speed: they are then written before the reply. */
	if (!sm.sm_opts.mo_readonly && dev_wb_start(dev, SMOUNT_WB_BYTES) < 0)
		fprintf(stderr, PROG ": %s: no write-behind threads\n", sm.sm_device);
	if (smount_entry_timeout < 0)
		smount_entry_timeout = SMOUNT_TIMEOUT; /* a cluster: see smount_entry_ttl */
	inval_start(&sm); /* smount_attr_changed, and a cluster's demotions */
	if (strcmp(sm.sm_opts.mo_lock, "nolock")) {
		smount_cluster = 1;
		/* a cluster: the kernel's caches go when another node takes a
		 * glock (names all at once, the epoch, or one by one) */
		names_enable();
		nid_enable(); /* a directory moved elsewhere: new node id (nodeids.c) */
		sm.sm_opts.mo_inval = smount_inval;
		sm.sm_opts.mo_inval_now = smount_inval_now;
		sm.sm_opts.mo_inval_arg = &sm;
	}
	ret = shoal_mount(dev, &sm.sm_opts, &sm.sm_fs);
	if (ret < 0) {
		/* one line, with libshoal's reason; the device is still ours */
		const char *why = shoal_mount_error();
		fprintf(stderr, PROG ": %s: %s\n", sm.sm_device, why[0] ? why : strerror(-ret));
		goto out_dev;
	}
	if (shoal_is_readonly(sm.sm_fs) && !sm.sm_opts.mo_readonly) {
		const char *why = shoal_error(sm.sm_fs);
		fprintf(stderr, PROG ": %s: mounted read-only%s%s\n", sm.sm_device,
			why ? ": " : "", why ? why : "");
	}

	pthread_mutex_lock(&inval_lock);
	sm.sm_se = fuse_session_new(&args, &smount_ops, sizeof(smount_ops), &sm);
	pthread_mutex_unlock(&inval_lock);
	if (!sm.sm_se) {
		fprintf(stderr, PROG ": %s: cannot start the FUSE session\n", sm.sm_device);
		status = 1;
		goto out_unmount;
	}
	guard_mounting(sm.sm_mountpoint); /* (6): from its mount(2) on, a death frees it */
	if (fuse_session_mount(sm.sm_se, sm.sm_mountpoint) != 0) {
		fprintf(stderr, PROG ": %s: cannot mount on %s\n", sm.sm_device,
			sm.sm_mountpoint);
		status = 1;
		goto out_destroy;
	}
	killpriv_v2_io(sm.sm_se);
	if (fuse_set_signal_handlers(sm.sm_se) != 0) {
		fprintf(stderr, PROG ": cannot set signal handlers\n");
		status = 1;
		goto out_fuse_unmount;
	}
	ret = ctl_start(sm.sm_mountpoint, smount_ctl_cmds, &sm, on_ready, &sm, &ctl);
	if (ret < 0)
		on_ready(&sm, 0, ret);

	cfg = fuse_loop_cfg_create();
	if (!cfg) {
		fprintf(stderr, PROG ": %s\n", strerror(ENOMEM));
		status = 1;
		goto out_signals;
	}
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	sm.sm_max_threads = ma.ma_max_threads;
	if (ma.ma_max_threads)
		fuse_loop_cfg_set_max_threads(cfg, ma.ma_max_threads);
	set_signals_blocked(SIG_UNBLOCK);
	ret = fuse_session_loop_mt(sm.sm_se, cfg);
	set_signals_blocked(SIG_BLOCK);
	fuse_loop_cfg_destroy(cfg);
	if (ret < 0) {
		fprintf(stderr, PROG ": %s: FUSE session failed: %s\n", sm.sm_mountpoint,
			strerror(-ret));
		status = 1;
	}

out_signals:
	__atomic_store_n(&stopping, 1, __ATOMIC_SEQ_CST);
	fuse_remove_signal_handlers(sm.sm_se);
out_fuse_unmount:
	fuse_session_unmount(sm.sm_se);
	guard_done(); /* (6): unmounted the normal way */
out_destroy:
	pthread_mutex_lock(&inval_lock);
	se = sm.sm_se;
	sm.sm_se = NULL;
	pthread_mutex_unlock(&inval_lock);
	inval_stop(); /* no notification uses the session after this */
	names_forget_all();
	nid_forget_all();
	plock_session_end(); /* a lock wait answered later must not use se */
	fuse_session_destroy(se); /* closes /dev/fuse: a pending stat fails */
	ctl_stop(ctl);
out_unmount:
	ret = shoal_unmount(sm.sm_fs);
	if (ret < 0) {
		fprintf(stderr, PROG ": %s: unmount: %s\n", sm.sm_device, strerror(-ret));
		status = 1;
	}
	if (cut_lower)
		dev_close(cut_lower); /* (7): after the wrapper, which shoal_unmount closed */
	notify_parent(1); /* if the parent still waits, start-up failed */
	log_line(&sm, "unmounted %s%s", sm.sm_device, status ? " with errors" : "");
	fuse_opt_free_args(&args);
	free(ma.ma_kernel);
	free(sm.sm_options);
	free(sm.sm_device);
	free(sm.sm_mountpoint);
	return status;

out_dev:
	dev_close(dev);
	if (cut_lower)
		dev_close(cut_lower);
out_args:
	notify_parent(1); /* the parent, if any, reports a failed start-up */
	fuse_opt_free_args(&args);
	free(ma.ma_kernel);
	free(sm.sm_options);
	free(sm.sm_device);
	free(sm.sm_mountpoint);
	return 1;
}
