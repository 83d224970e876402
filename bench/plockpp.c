/*
 * plockpp.c - the lock ping-pong of cluster filesystems (ctdb's ping_pong),
 * for bench/run.sh's plock workload.
 *
 *   plockpp pp PATH_A PATH_B SECONDS RW
 *	two processes, one on PATH_A and one on PATH_B (the same file through
 *	two nodes, or twice the same path), take turns holding fcntl write
 *	locks on consecutive 8-byte slots of the file (3 slots: process k
 *	holds slot i, waits (F_SETLKW) for slot i+1, then lets go of slot
 *	i).  With RW 1 each takes its slot's counter under the lock, checks
 *	that it is exactly one more than what it wrote there last (the other
 *	process's increment is seen), and writes it + 1.  Prints handoffs
 *	(locks taken by both), handoffs_s, and lost (increments not seen).
 *   plockpp lat PATH ITERS
 *	uncontended F_SETLK write lock + unlock of byte 0, ITERS times:
 *	prints uncontended_us (average of a lock+unlock pair).
 *   plockpp rt PATH ITERS
 *	fsync of an unchanged file, ITERS times: prints uncontended_us (the
 *	average; on bench/nullfs.c one FUSE round trip answered at once).
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "plockpp"
#define SLOTS 3

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int lk(int fd, int cmd, short type, off_t start, off_t len)
{
	struct flock fl = { .l_type = type, .l_whence = SEEK_SET, .l_start = start, .l_len = len };

	while (fcntl(fd, cmd, &fl) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return 0;
}

static void die(const char *what, int err)
{
	fprintf(stderr, PROG ": %s: %s\n", what, strerror(err));
	exit(1);
}

/* Set (shared by both players) by the first whose time is over, before
 * it lets go: the other then stops at its next lock, not counting the
 * turns it would take alone. */
static int *stop;

/* One player: writes "handoffs lost" to out when the time is over. */
static void play(const char *path, int k, double secs, int rw, int out)
{
	int fd = open(path, O_RDWR);
	uint64_t last[SLOTS] = { 0 }, n = 0, lost = 0, v;
	int i = k, err;
	double end;
	char buf[64];

	if (fd < 0)
		die(path, errno);
	if ((err = lk(fd, F_SETLKW, F_WRLCK, i * 8, 8)))
		die("lock", -err);
	/* both hold their first slot before either starts */
	if (write(out, "r", 1) != 1 || read(out, buf, 1) != 1)
		die("start", errno);
	end = now() + secs;
	while (now() < end) {
		int j = (i + 1) % SLOTS;

		if ((err = lk(fd, F_SETLKW, F_WRLCK, j * 8, 8)))
			die("lock", -err);
		if (__atomic_load_n(stop, __ATOMIC_ACQUIRE))
			break;
		n++;
		if (rw) {
			if (pread(fd, &v, 8, j * 8) != 8)
				die("pread", errno);
			if (last[j] && v != last[j] + 1)
				lost++;
			v++;
			if (pwrite(fd, &v, 8, j * 8) != 8)
				die("pwrite", errno);
			last[j] = v;
		}
		if ((err = lk(fd, F_SETLK, F_UNLCK, i * 8, 8)))
			die("unlock", -err);
		i = j;
	}
	__atomic_store_n(stop, 1, __ATOMIC_RELEASE);
	lk(fd, F_SETLK, F_UNLCK, 0, 0);
	close(fd);
	snprintf(buf, sizeof(buf), "%llu %llu\n", (unsigned long long)n, (unsigned long long)lost);
	if (write(out, buf, strlen(buf)) < 0)
		die("report", errno);
}

static int pingpong(const char *a, const char *b, double secs, int rw)
{
	int sp[2][2], fd;
	pid_t pid[2];
	uint64_t n = 0, lost = 0, zero[SLOTS] = { 0 };
	double t0, t1;
	char c;

	stop = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (stop == MAP_FAILED)
		die("mmap", errno);
	fd = open(a, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || pwrite(fd, zero, sizeof(zero), 0) != sizeof(zero) || fsync(fd))
		die(a, errno);
	close(fd);
	for (int k = 0; k < 2; k++) {
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp[k]))
			die("socketpair", errno);
		pid[k] = fork();
		if (pid[k] < 0)
			die("fork", errno);
		if (!pid[k]) {
			close(sp[k][0]);
			play(k ? b : a, k, secs, rw, sp[k][1]);
			_exit(0);
		}
		close(sp[k][1]);
	}
	for (int k = 0; k < 2; k++)
		if (read(sp[k][0], &c, 1) != 1)
			die("a player died before starting", EIO);
	t0 = now();
	for (int k = 0; k < 2; k++)
		if (write(sp[k][0], "g", 1) != 1)
			die("go", errno);
	for (int k = 0; k < 2; k++) {
		char buf[64] = "";
		unsigned long long x = 0, y = 0;
		ssize_t r = read(sp[k][0], buf, sizeof(buf) - 1);

		if (r <= 0 || sscanf(buf, "%llu %llu", &x, &y) != 2)
			die("a player died", EIO);
		n += x;
		lost += y;
	}
	t1 = now();
	for (int k = 0; k < 2; k++) {
		int st;
		waitpid(pid[k], &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			die("a player failed", EIO);
	}
	printf("handoffs %llu\n", (unsigned long long)n);
	printf("seconds %.3f\n", t1 - t0);
	printf("handoffs_s %.1f\n", (double)n / (t1 - t0));
	printf("lost %llu\n", (unsigned long long)lost);
	return lost ? 3 : 0;
}

/*
 * ITERS lock+unlock pairs (or fsyncs), after as many to warm up: the
 * average over all, and the best average of a batch of 100 (what a pair
 * costs when nothing else on the machine gets in the way).
 */
static int latency(const char *path, long iters, int rt)
{
	int fd = open(path, O_RDWR | O_CREAT, 0644), err;
	double t0, best = 1e9;

	if (fd < 0)
		die(path, errno);
	for (int warm = 0; warm < 2; warm++) {
		t0 = now();
		for (long i = 0; i < iters; i += 100) {
			double b0 = now();
			long n = iters - i < 100 ? iters - i : 100;
			for (long k = 0; k < n; k++) {
				if (rt) {
					if (fsync(fd))
						die("fsync", errno);
					continue;
				}
				if ((err = lk(fd, F_SETLK, F_WRLCK, 0, 1)) ||
				    (err = lk(fd, F_SETLK, F_UNLCK, 0, 1)))
					die("lock", -err);
			}
			if (warm && n == 100 && (now() - b0) / 100 < best)
				best = (now() - b0) / 100;
		}
	}
	printf("uncontended_us %.2f\n", (now() - t0) * 1e6 / (double)iters);
	printf("uncontended_best_us %.2f\n", best * 1e6);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 6 && !strcmp(argv[1], "pp"))
		return pingpong(argv[2], argv[3], atof(argv[4]), atoi(argv[5]));
	if (argc == 4 && (!strcmp(argv[1], "lat") || !strcmp(argv[1], "rt")))
		return latency(argv[2], atol(argv[3]), argv[1][0] == 'r');
	fprintf(stderr, "usage: " PROG " pp PATH_A PATH_B SECONDS RW | lat PATH ITERS | rt PATH ITERS\n");
	return 2;
}
