/*
 * metabench.c - the `meta` workload of bench/run.sh (issue #2): COUNT empty
 * files created in one fresh directory, then each stat'ed, then each
 * unlinked, every phase timed on its own.
 *
 *	metabench DIR COUNT
 *
 * DIR must exist; the files go into DIR/meta.d, made here and removed at
 * the end.  Output, one "name value" per line on stdout, times in seconds:
 *
 *	files COUNT
 *	create_s  open(O_CREAT|O_EXCL|O_WRONLY) + close of every file
 *	stat_s    fstatat of every file, in creation order
 *	unlink_s  unlinkat of every file, in creation order
 *	total_s   create_s + stat_s + unlink_s
 *	syncfs_s  syncfs of the filesystem afterwards (not in total_s)
 *
 * Invariants:
 *  (1) a phase is timed from its first call to its last return, with a
 *      monotonic clock, and does nothing else (names are made beforehand);
 *  (2) every call is checked: a failure, or a stat that does not show an
 *      empty regular file, prints "metabench: what: strerror" and exits 1,
 *      so a benchmark never reports a time for work that was not done.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "metabench"
#include "benchutil.h"
#define SUBDIR "meta.d"
#define NAME_LEN 24

int main(int argc, char **argv)
{
	double t0, t_create, t_stat, t_unlink, t_sync;
	char (*names)[NAME_LEN];
	struct stat st;
	long count, i;
	int dfd, top, fd;

	if (argc != 3 || (count = strtol(argv[2], NULL, 10)) <= 0) {
		fprintf(stderr, "usage: " PROG " DIR COUNT\n");
		return 2;
	}
	names = calloc((size_t)count, sizeof(*names));
	if (!names)
		die("calloc", NULL);
	for (i = 0; i < count; i++)
		snprintf(names[i], NAME_LEN, "m%07ld", i);

	top = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (top < 0)
		die("open", argv[1]);
	if (mkdirat(top, SUBDIR, 0755) < 0)
		die("mkdir", SUBDIR);
	dfd = openat(top, SUBDIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		die("open", SUBDIR);

	t0 = now();
	for (i = 0; i < count; i++) {
		fd = openat(dfd, names[i], O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
		if (fd < 0)
			die("create", names[i]);
		if (close(fd) < 0)
			die("close", names[i]);
	}
	t_create = now();
	for (i = 0; i < count; i++) {
		if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
			die("stat", names[i]);
		if (!S_ISREG(st.st_mode) || st.st_size != 0) {
			errno = EUCLEAN;
			die("stat: not an empty regular file:", names[i]);
		}
	}
	t_stat = now();
	for (i = 0; i < count; i++)
		if (unlinkat(dfd, names[i], 0) < 0)
			die("unlink", names[i]);
	t_unlink = now();
	if (syncfs(dfd) < 0)
		die("syncfs", argv[1]);
	t_sync = now();

	close(dfd);
	if (unlinkat(top, SUBDIR, AT_REMOVEDIR) < 0)
		die("rmdir", SUBDIR);
	close(top);
	free(names);

	printf("files %ld\n", count);
	printf("create_s %.6f\n", t_create - t0);
	printf("stat_s %.6f\n", t_stat - t_create);
	printf("unlink_s %.6f\n", t_unlink - t_stat);
	printf("total_s %.6f\n", t_unlink - t0);
	printf("syncfs_s %.6f\n", t_sync - t_unlink);
	return 0;
}
