/*
 * lk_fence.h - shoal-lockd's fence command (--fence-cmd): one child
 * process per dead node, started before its recovery is granted and
 * polled from the event loop (lockd/fence.c; the state machine around it
 * is in server.c, docs/PROTOCOL.md "Fencing").
 */
#ifndef SHOAL_LK_FENCE_H
#define SHOAL_LK_FENCE_H

#include <stdint.h>
#include <sys/types.h>

/* Run `/bin/sh -c CMD shoal-fence NODE JID` in a process group of its own,
 * SHOAL_FENCE_NODE and SHOAL_FENCE_JID in its environment, stdin from
 * /dev/null.  *pid on success; 0 or -errno. */
int fence_spawn(const char *cmd, const char *node, uint32_t jid, pid_t *pid);
/* Has it exited?  0: still running; 1: exited, *status as from waitpid;
 * -errno if it cannot be waited for. */
int fence_poll(pid_t pid, int *status);
/* Kill its whole process group (SIGKILL) and reap it. */
void fence_kill(pid_t pid);

#endif
