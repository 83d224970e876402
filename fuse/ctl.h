/*
 * ctl.h - the per-mount control socket server of shoal-mount (see
 * include/shoal/ctl.h for the path and the wire protocol).
 *
 * Generic: it knows nothing of shoal but a table of commands.  A command
 * writes its reply to a stdio stream; the server adds "error ..." when it
 * fails, and "error unknown command" for a name not in the table.  A
 * streaming command gets the socket and a thread of its own instead.
 */
#ifndef SHOAL_FUSE_CTL_H
#define SHOAL_FUSE_CTL_H

#include <stdio.h>
#include <sys/types.h>

struct ctl_server;

struct ctl_cmd {
	const char *cc_name;
	const char *cc_help; /* one line, for the built-in "help" command */
	/*
	 * Write the reply lines to out.  args is the rest of the request line
	 * ("" if none).  Return 0, or -errno: the server then appends
	 * "error STRERROR" (a command that wants its own text writes
	 * "error ..." itself and returns 0).
	 */
	int (*cc_run)(void *arg, const char *args, FILE *out);
	/*
	 * A streaming command (trace) has cc_stream instead of cc_run: it
	 * runs on a thread of its own with the connection's socket, writing
	 * to it until the client goes away or *stop becomes non-zero (the
	 * server is stopping), which it must notice within a fraction of a
	 * second; the server closes fd after it returns.
	 */
	void (*cc_stream)(void *arg, const char *args, int fd, const int *stop);
};

/*
 * Called once from the control thread when it is serving (err 0, dev the
 * mount's device number), or has given up (err -errno, dev 0).
 */
typedef void (*ctl_ready_fn)(void *arg, dev_t dev, int err);

/*
 * Start the control thread: it stats mountpoint (which must be mounted and
 * served: the stat is a FUSE request), binds the socket and calls ready.
 * cmds ends with an entry whose cc_name is NULL and must outlive the server.
 * The thread inherits the caller's signal mask.
 */
int ctl_start(const char *mountpoint, const struct ctl_cmd *cmds, void *arg,
	      ctl_ready_fn ready, void *ready_arg, struct ctl_server **out);

/*
 * Stop serving (streaming commands included: they are told and joined),
 * remove the socket and free the server.  The caller must
 * make sure a pending stat of the mountpoint can finish (the FUSE session
 * is served or its connection closed), or this waits for it.
 */
void ctl_stop(struct ctl_server *cs);

#endif
