/*
 * fz_image.c - a libFuzzer target for every parser a mount reaches: the
 * input drives fuzz_image's mutations of the base image (fz_lib.c; its
 * bytes are the generator's output, 8 at a time, zeros once they run
 * out), and the damaged image is mounted in-process and walked: journal
 * head, descriptors and fast-commit blocks (replay), superblock, group
 * headers and bitmaps, dinodes, block maps, directory leaves, hash tables
 * and entries, xattr blocks.  A crash, a sanitizer report, or a use that
 * fails with anything but EIO aborts.  fsck.shoal is fuzz_image's part.
 *
 * The base image is built once per process into $TMPDIR (or /dev/shm),
 * by a child that then exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fz_lib.h"

static char fz_img[256];
static const uint8_t *fz_in;
static size_t fz_left;

static void cleanup(void)
{
	unlink(fz_img);
}

static uint64_t input_rng(void)
{
	uint64_t v = 0;
	size_t n = fz_left < 8 ? fz_left : 8;

	memcpy(&v, fz_in, n);
	fz_in += n;
	fz_left -= n;
	return v;
}

static void setup(void)
{
	char base[300];
	const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
	pid_t pid;
	int st, fd;

	if (getenv("TMPDIR"))
		dir = getenv("TMPDIR");
	snprintf(base, sizeof(base), "%s/fz_image-%d-base.img", dir, (int)getpid());
	snprintf(fz_img, sizeof(fz_img), "%s/fz_image-%d.img", dir, (int)getpid());
	pid = fork();
	if (pid == 0) {
		fz_build(base);
		_exit(0); /* not exit: libFuzzer's exit handler would call it a crash */
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		fz_die("building the base image failed");
	fz_base = malloc(FZ_IMG_BYTES);
	fd = open(base, O_RDONLY);
	if (!fz_base || fd < 0 || pread(fd, fz_base, FZ_IMG_BYTES, 0) != FZ_IMG_BYTES)
		fz_die("reading %s", base);
	close(fd);
	unlink(base);
	atexit(cleanup); /* the image each input writes */
	fz_scan();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t *img;
	char what[2048];
	int sb_done = 0, n, fd;

	if (!fz_base) {
		setup();
		img = malloc(FZ_IMG_BYTES);
		if (!img)
			fz_die("out of memory");
	}
	if (size == 0)
		return 0;
	fz_in = data + 1;
	fz_left = size - 1;
	fz_rng_hook = input_rng;
	memcpy(img, fz_base, FZ_IMG_BYTES);
	n = 1 + data[0] % 3;
	for (int i = 0; i < n; i++)
		fz_mutate(img, &sb_done, what, sizeof(what));
	fd = open(fz_img, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || pwrite(fd, img, FZ_IMG_BYTES, 0) != FZ_IMG_BYTES)
		fz_die("writing %s", fz_img);
	close(fd);
	if (fz_mount_walk(fz_img, "mount of the damaged image", 0, NULL)) {
		fprintf(stderr, "fz_image: the walk failed; last mutation: %s\n", what);
		abort();
	}
	return 0;
}
