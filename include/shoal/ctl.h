/*
 * ctl.h - where the control socket of a running shoal-mount lives and how
 * it is spoken to.  Shared by shoal-mount (fuse/ctl.c) and the shoal CLI
 * (tools/shoal.c); docs/CONTROL.md describes the commands.
 *
 * Every mount listens on a Unix stream socket named after the device number
 * of its mount (st_dev of any path inside it), so a client needs nothing but
 * a path:
 *
 *	/run/shoal/mnt-MAJOR:MINOR.sock   (directory mode 0700, socket 0600)
 *	/run/shoal/mnt-MAJOR:MINOR.log    (the daemon's stderr once detached)
 *
 * Protocol: the client connects and sends one line, "COMMAND [ARGS]\n", of
 * at most SHOAL_CTL_LINE_MAX bytes; the server answers with text lines and
 * closes the connection.  A reply whose first line starts with "error " means
 * the command failed; the rest of that line says why.
 */
#ifndef SHOAL_CTL_H
#define SHOAL_CTL_H

#include <stdio.h>
#include <sys/sysmacros.h>
#include <sys/types.h>

#define SHOAL_CTL_DIR "/run/shoal"
#define SHOAL_CTL_LINE_MAX 4096

/* The socket (suffix "sock") or log (suffix "log") path of the mount on dev. */
static inline int shoal_ctl_path(char *buf, size_t size, dev_t dev, const char *suffix)
{
	return snprintf(buf, size, SHOAL_CTL_DIR "/mnt-%u:%u.%s", major(dev), minor(dev),
			suffix);
}

#endif
