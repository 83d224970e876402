/*
 * testutil.c - helpers for the unit tests: scratch images and formatting.
 * Images are sparse, so a test may ask for gigabytes and pay only for the
 * blocks it writes.  A failing cmocka assertion jumps out of the test before
 * its tu_rmimage(), so every image still alive at exit is removed then.
 */
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dev.h"
#include "shoal/shoal.h"

#define TU_MAX_LIVE 256

static char tu_live[TU_MAX_LIVE][PATH_MAX]; /* images not yet removed */
static int tu_atexit_set;

static void tu_cleanup(void)
{
	for (int i = 0; i < TU_MAX_LIVE; i++)
		if (tu_live[i][0])
			unlink(tu_live[i]);
}

static void tu_track(const char *path, int add)
{
	for (int i = 0; i < TU_MAX_LIVE; i++) {
		if (add ? !tu_live[i][0] : !strcmp(tu_live[i], path)) {
			if (add)
				snprintf(tu_live[i], PATH_MAX, "%s", path);
			else
				tu_live[i][0] = '\0';
			return;
		}
	}
}

char *tu_tmpimage(uint64_t size)
{
	const char *dir = getenv("TMPDIR");
	char *path;
	int fd;

	if (!dir || !*dir)
		dir = "/tmp";
	if (asprintf(&path, "%s/shoal-unit-XXXXXX", dir) < 0)
		fail_msg("asprintf: %s", strerror(errno));
	fd = mkstemp(path);
	if (fd < 0)
		fail_msg("mkstemp %s: %s", path, strerror(errno));
	if (ftruncate(fd, (off_t)size) < 0)
		fail_msg("ftruncate %s: %s", path, strerror(errno));
	close(fd);
	if (!tu_atexit_set) {
		atexit(tu_cleanup);
		tu_atexit_set = 1;
	}
	tu_track(path, 1);
	return path;
}

struct shoal_dev *tu_format(const char *path, uint32_t journals)
{
	struct shoal_format_opts fo = { .fo_journals = journals };
	struct shoal_dev *dev;
	int err;

	err = dev_open(path, 0, &dev);
	if (err)
		fail_msg("dev_open %s: %s", path, strerror(-err));
	err = shoal_format(dev, &fo, NULL);
	if (err)
		fail_msg("shoal_format %s: %s", path, strerror(-err));
	return dev;
}

void tu_rmimage(char *path)
{
	if (!path)
		return;
	unlink(path);
	tu_track(path, 0);
	free(path);
}
