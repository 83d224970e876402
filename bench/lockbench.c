/*
 * lockbench.c - round trips against shoal-lockd, and the bare Unix-socket
 * echo they are judged against (bench/run.sh, section "lockd").
 *
 *   lockbench lock ADDR ITERS   one node (lkc_connect to ADDR) takes EX on
 *                               one resource and releases it, ITERS times
 *   lockbench echo ITERS        a forked echo server on a Unix socket: write
 *                               a 64-byte request (the size of a LOCK frame),
 *                               read a 52-byte reply (a GRANT frame), ITERS
 *                               times
 *   lockbench echo-poll ITERS   the same echo, but the client polls for the
 *                               reply (recv MSG_DONTWAIT) instead of sleeping
 *                               in read, as lkc_lock polls for up to 50 us
 *                               (SHOAL_LKC_SPIN_US) before it sleeps
 *   lockbench contend ADDR ITERS  two nodes (two connections, two threads)
 *                               alternate EX on one resource: each grant
 *                               costs a BAST and a release by the other node
 *
 * lock and contend join with the secret file $SHOAL_LOCKBENCH_SECRET when it
 * is set (lockd must have it too: every frame after JOIN is then sealed).
 *
 * Output: "name value" lines: iterations, seconds, ops_s, lat_avg_us,
 * lat_p50_us, lat_p99_us (one iteration = lock + unlock, or one echo), and
 * for lock the client's own counters (requests, grants, basts).
 * The first 1/10 of the iterations (at most 2000) warm up and are not counted.
 */
#define PROG "lockbench"
#include "benchutil.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shoal/lockd.h"

#define REQ_LEN 64
#define REP_LEN 52

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void report(double *lat, long n, double secs)
{
	double sum = 0;

	for (long i = 0; i < n; i++)
		sum += lat[i];
	qsort(lat, (size_t)n, sizeof(*lat), cmp_double);
	printf("iterations %ld\n", n);
	printf("seconds %.6f\n", secs);
	printf("ops_s %.1f\n", (double)n / secs);
	printf("lat_avg_us %.2f\n", sum / (double)n * 1e6);
	printf("lat_p50_us %.2f\n", lat[n / 2] * 1e6);
	printf("lat_p99_us %.2f\n", lat[(long)((double)n * 0.99)] * 1e6);
}

static long warmup_of(long iters)
{
	long w = iters / 10;

	return w > 2000 ? 2000 : w;
}

static int run_lock(const char *addr, long iters)
{
	struct lkc_config cfg = { .addr = addr, .node = "lockbench", .table = "bench:lockbench",
				  .njournals = 16, .secret_file = getenv("SHOAL_LOCKBENCH_SECRET") };
	struct lkc_stats st;
	struct lkc *c;
	uint32_t jid, lease;
	char err[512];
	long warm = warmup_of(iters);
	double *lat = malloc(sizeof(*lat) * (size_t)iters), t0 = 0;
	int rc;

	if (!lat)
		die("malloc", NULL);
	rc = lkc_connect(&cfg, &c, &jid, &lease, err, sizeof(err));
	if (rc) {
		fprintf(stderr, PROG ": %s\n", err);
		free(lat);
		return 1;
	}
	for (long i = -warm; i < iters; i++) {
		double a = now();
		uint8_t lvb[LK_LVB_LEN] = { 0 };

		if (i == 0)
			t0 = a;
		rc = lkc_lock(c, 2, 1, LK_EX, 0, lvb, NULL);
		if (rc != LK_EX) {
			fprintf(stderr, PROG ": lkc_lock: %s\n", strerror(-rc));
			return 1;
		}
		rc = lkc_unlock(c, 2, 1, lvb);
		if (rc) {
			fprintf(stderr, PROG ": lkc_unlock: %s\n", strerror(-rc));
			return 1;
		}
		if (i >= 0)
			lat[i] = now() - a;
	}
	report(lat, iters, now() - t0);
	lkc_get_stats(c, &st);
	printf("requests %llu\n", (unsigned long long)st.requests);
	printf("grants %llu\n", (unsigned long long)st.grants);
	printf("basts %llu\n", (unsigned long long)st.basts);
	printf("client_rtt_avg_us %.2f\n", st.requests ? (double)st.rtt_ns_total / st.requests / 1e3 : 0);
	lkc_close(c);
	free(lat);
	return 0;
}

/* --- contended: two nodes ping-pong EX through BASTs ------------------------ */

struct pp_node {
	struct lkc *pn_c;
	pthread_mutex_t pn_mu;
	pthread_cond_t pn_cv;
	int pn_bast; /* a BAST arrived: release */
};

static void pp_bast(void *arg, uint32_t type, uint64_t number, int wanted)
{
	struct pp_node *pn = arg;

	(void)type, (void)number, (void)wanted;
	pthread_mutex_lock(&pn->pn_mu);
	pn->pn_bast = 1;
	pthread_cond_signal(&pn->pn_cv);
	pthread_mutex_unlock(&pn->pn_mu);
}

static long pp_iters;

static void *pp_thread(void *arg)
{
	struct pp_node *pn = arg;

	for (long i = 0; i < pp_iters; i++) {
		if (lkc_lock(pn->pn_c, 2, 7, LK_EX, 0, NULL, NULL) != LK_EX)
			die("lkc_lock", NULL);
		pthread_mutex_lock(&pn->pn_mu);
		while (!pn->pn_bast && i + 1 < pp_iters)
			pthread_cond_wait(&pn->pn_cv, &pn->pn_mu);
		pn->pn_bast = 0;
		pthread_mutex_unlock(&pn->pn_mu);
		lkc_unlock(pn->pn_c, 2, 7, NULL);
	}
	return NULL;
}

static int run_contend(const char *addr, long iters)
{
	static const struct lkc_ops ops = { .bast = pp_bast };
	struct pp_node pn[2];
	pthread_t th[2];
	char err[512], name[16];
	double t0;

	pp_iters = iters;
	for (int i = 0; i < 2; i++) {
		struct lkc_config cfg = { .addr = addr, .node = name, .table = "bench:lockbench",
					  .njournals = 16, .ops = &ops, .arg = &pn[i],
					  .secret_file = getenv("SHOAL_LOCKBENCH_SECRET") };
		uint32_t jid, lease;

		snprintf(name, sizeof(name), "pp%d", i);
		memset(&pn[i], 0, sizeof(pn[i]));
		pthread_mutex_init(&pn[i].pn_mu, NULL);
		pthread_cond_init(&pn[i].pn_cv, NULL);
		if (lkc_connect(&cfg, &pn[i].pn_c, &jid, &lease, err, sizeof(err))) {
			fprintf(stderr, PROG ": %s\n", err);
			return 1;
		}
	}
	t0 = now();
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, pp_thread, &pn[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	t0 = now() - t0;
	printf("iterations %ld\n", 2 * iters);
	printf("seconds %.6f\n", t0);
	printf("handoffs_s %.1f\n", 2.0 * (double)iters / t0);
	for (int i = 0; i < 2; i++)
		lkc_close(pn[i].pn_c);
	return 0;
}

/* --- the bare echo -------------------------------------------------------------- */

static int read_full(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = read(fd, p, n);
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* Read n bytes polling with MSG_DONTWAIT: a client that never sleeps. */
static int read_full_poll(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
		if (r < 0 && errno == EAGAIN)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static int run_echo(long iters, int poll)
{
	char dir[] = "/tmp/lockbench.XXXXXX", req[REQ_LEN] = { 0 }, rep[REP_LEN] = { 0 };
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	long warm = warmup_of(iters);
	double *lat = malloc(sizeof(*lat) * (size_t)iters), t0 = 0;
	int lfd, fd, status;
	pid_t pid;

	if (!lat || !mkdtemp(dir))
		die("setup", dir);
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s/echo.sock", dir);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sun, sizeof(sun)) || listen(lfd, 1))
		die("listen", sun.sun_path);
	pid = fork();
	if (pid < 0)
		die("fork", NULL);
	if (pid == 0) {
		int cfd = accept(lfd, NULL, NULL);
		if (cfd < 0)
			_exit(1);
		while (!read_full(cfd, req, REQ_LEN))
			if (write(cfd, rep, REP_LEN) != REP_LEN)
				_exit(1);
		_exit(0);
	}
	close(lfd);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)))
		die("connect", sun.sun_path);
	for (long i = -warm; i < iters; i++) {
		double a = now();
		if (i == 0)
			t0 = a;
		if (write(fd, req, REQ_LEN) != REQ_LEN ||
		    (poll ? read_full_poll(fd, rep, REP_LEN) : read_full(fd, rep, REP_LEN)))
			die("echo", NULL);
		if (i >= 0)
			lat[i] = now() - a;
	}
	report(lat, iters, now() - t0);
	close(fd);
	waitpid(pid, &status, 0);
	unlink(sun.sun_path);
	rmdir(dir);
	free(lat);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc == 4 && !strcmp(argv[1], "lock"))
		return run_lock(argv[2], atol(argv[3]) > 0 ? atol(argv[3]) : 1);
	if (argc == 4 && !strcmp(argv[1], "contend"))
		return run_contend(argv[2], atol(argv[3]) > 0 ? atol(argv[3]) : 1);
	if (argc == 3 && !strcmp(argv[1], "echo"))
		return run_echo(atol(argv[2]) > 0 ? atol(argv[2]) : 1, 0);
	if (argc == 3 && !strcmp(argv[1], "echo-poll"))
		return run_echo(atol(argv[2]) > 0 ? atol(argv[2]) : 1, 1);
	fprintf(stderr, "usage: lockbench lock ADDR ITERS | contend ADDR ITERS | echo ITERS | "
			"echo-poll ITERS\n");
	return 2;
}
