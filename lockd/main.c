/*
 * main.c - shoal-lockd: parse the command line, bind (so address errors are
 * printed before anything else happens), daemonize unless -f, run the loop
 * of server.c until SIGTERM or SIGINT, then clean up (unix sockets and pid
 * file removed).
 *
 * Exit status: 0 after a clean stop, 1 on a runtime error, 2 on bad usage
 * or when a listener, the secret file or the pid file cannot be set up.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include "lk_server.h"
#include "shoal/lockd.h"

static struct lockd *the_lockd;

static void on_signal(int sig)
{
	(void)sig;
	if (the_lockd)
		lockd_wake_stop(the_lockd);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shoal-lockd --listen unix:PATH|HOST:PORT [--listen ...] [-f|--foreground]\n"
		"                   [--pid-file FILE] [--syslog] [--secret-file FILE]\n"
		"                   [--lease SECONDS] [--table CLUSTER:FSNAME] [--insecure] [-v]\n"
		"                   [--fence-cmd CMD [--fence-timeout SECONDS]]\n"
		"The shoal lock manager (docs/PROTOCOL.md). Without -f it runs in the background\n"
		"once its sockets are bound. --lease may be fractional (default 8).\n"
		"A TCP address other than loopback needs --secret-file, or --insecure to let\n"
		"anyone who can reach it join.\n"
		"--fence-cmd: run `sh -c CMD shoal-fence NODE JID` before a dead node's journal\n"
		"may be recovered; recovery waits until it exits 0 (tried 5 times; each try\n"
		"killed after --fence-timeout, default 60).\n");
}

static int write_pid_file(const char *path, pid_t pid)
{
	char buf[32];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int n, rc = 0;

	if (fd < 0)
		return -errno;
	n = snprintf(buf, sizeof(buf), "%d\n", (int)pid);
	if (write(fd, buf, (size_t)n) != n)
		rc = -EIO;
	if (close(fd) && !rc)
		rc = -errno;
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "pid-file", required_argument, NULL, 'p' },
		{ "syslog", no_argument, NULL, 's' },
		{ "secret-file", required_argument, NULL, 'k' },
		{ "lease", required_argument, NULL, 'L' },
		{ "table", required_argument, NULL, 't' },
		{ "fence-cmd", required_argument, NULL, 'F' },
		{ "fence-timeout", required_argument, NULL, 'T' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "insecure", no_argument, NULL, 'I' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct lockd_config cfg = { .lease_ms = 8000 };
	const char *pid_file = NULL;
	int foreground = 0, opt, rc;
	char err[512];
	struct sigaction sa;

	while ((opt = getopt_long(argc, argv, "l:fp:sk:L:t:vh", opts, NULL)) != -1) {
		switch (opt) {
		case 'l':
			if (cfg.nlisten == 8) {
				fprintf(stderr, "shoal-lockd: at most 8 --listen\n");
				return 2;
			}
			cfg.listen[cfg.nlisten++] = optarg;
			break;
		case 'f':
			foreground = 1;
			break;
		case 'p':
			pid_file = optarg;
			break;
		case 's':
			cfg.use_syslog = 1;
			break;
		case 'k':
			cfg.secret_file = optarg;
			break;
		case 'L': {
			char *end;
			double s = strtod(optarg, &end);
			if (*end || !(s >= 0.01 && s <= 3600)) {
				fprintf(stderr, "shoal-lockd: --lease %s: want seconds in [0.01, 3600]\n",
					optarg);
				return 2;
			}
			cfg.lease_ms = (uint32_t)(s * 1000 + 0.5);
			break;
		}
		case 't':
			cfg.table = optarg;
			break;
		case 'F':
			if (!*optarg) {
				fprintf(stderr, "shoal-lockd: --fence-cmd: empty command\n");
				return 2;
			}
			cfg.fence_cmd = optarg;
			break;
		case 'T': {
			char *end;
			double s = strtod(optarg, &end);
			if (*end || !(s >= 0.01 && s <= 3600)) {
				fprintf(stderr, "shoal-lockd: --fence-timeout %s: want seconds in "
						"[0.01, 3600]\n", optarg);
				return 2;
			}
			cfg.fence_timeout_ms = (uint32_t)(s * 1000 + 0.5);
			break;
		}
		case 'v':
			cfg.verbose = 1;
			break;
		case 'I':
			cfg.insecure = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (cfg.fence_timeout_ms && !cfg.fence_cmd) {
		fprintf(stderr, "shoal-lockd: --fence-timeout without --fence-cmd\n");
		return 2;
	}
	if (optind != argc || cfg.nlisten == 0) {
		usage(stderr);
		return 2;
	}
	if (cfg.use_syslog)
		openlog("shoal-lockd", LOG_PID, LOG_DAEMON);
	signal(SIGPIPE, SIG_IGN);
	rc = lockd_create(&cfg, &the_lockd, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "shoal-lockd: %s\n", err);
		return 2;
	}
	if (!foreground) {
		pid_t pid;
		int fd;

		fflush(NULL);
		pid = fork();
		if (pid < 0) {
			fprintf(stderr, "shoal-lockd: fork: %s\n", strerror(errno));
			lockd_destroy(the_lockd);
			return 1;
		}
		if (pid > 0) {
			/* the child owns the sockets now; the parent only reports */
			if (pid_file && (rc = write_pid_file(pid_file, pid))) {
				fprintf(stderr, "shoal-lockd: pid file %s: %s\n", pid_file, strerror(-rc));
				kill(pid, SIGTERM);
				return 2;
			}
			_exit(0);
		}
		setsid();
		if (chdir("/")) {
			/* nothing depends on the cwd */
		}
		fd = open("/dev/null", O_RDWR);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			if (cfg.use_syslog) /* else keep stderr: the caller's log file */
				dup2(fd, 2);
			if (fd > 2)
				close(fd);
		}
	} else if (pid_file && (rc = write_pid_file(pid_file, getpid()))) {
		fprintf(stderr, "shoal-lockd: pid file %s: %s\n", pid_file, strerror(-rc));
		lockd_destroy(the_lockd);
		return 2;
	}
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	for (int i = 0; lockd_listen_addr(the_lockd, i); i++) {
		if (cfg.use_syslog)
			syslog(LOG_NOTICE, "listening on %s", lockd_listen_addr(the_lockd, i));
		else
			fprintf(stderr, "shoal-lockd: listening on %s\n", lockd_listen_addr(the_lockd, i));
	}
	rc = lockd_run(the_lockd);
	if (cfg.use_syslog)
		syslog(LOG_NOTICE, "stopping");
	else
		fprintf(stderr, "shoal-lockd: stopping\n");
	lockd_destroy(the_lockd);
	if (pid_file)
		unlink(pid_file);
	return rc ? 1 : 0;
}
