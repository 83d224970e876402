/*
 * fence.c - the fence command's process: start it, see whether it exited,
 * kill it.  The loop in server.c never blocks on it: it polls (waitpid
 * WNOHANG) at its timer ticks.
 *
 * Invariants:
 *  (1) the command runs in a process group of its own, so a timeout kills
 *      everything it started (fence_kill), not only the shell;
 *  (2) every child started is reaped exactly once: by fence_poll when it
 *      reports the exit, or by fence_kill.
 */
#include "lk_fence.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

int fence_spawn(const char *cmd, const char *node, uint32_t jid, pid_t *pid)
{
	char jids[16], envnode[96], envjid[32];
	char *argv[] = { "sh", "-c", (char *)cmd, "shoal-fence", (char *)node, jids, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	size_t n = 0, i;
	char **envp;
	int err;

	snprintf(jids, sizeof(jids), "%u", jid);
	snprintf(envnode, sizeof(envnode), "SHOAL_FENCE_NODE=%s", node);
	snprintf(envjid, sizeof(envjid), "SHOAL_FENCE_JID=%u", jid);
	while (environ && environ[n])
		n++;
	envp = calloc(n + 3, sizeof(*envp));
	if (!envp)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		envp[i] = environ[i];
	envp[n] = envnode;
	envp[n + 1] = envjid;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawnattr_init(&at);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);
	posix_spawnattr_setpgroup(&at, 0);
	err = posix_spawn(pid, "/bin/sh", &fa, &at, argv, envp);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	free(envp);
	return -err;
}

int fence_poll(pid_t pid, int *status)
{
	pid_t r = waitpid(pid, status, WNOHANG);

	if (r == pid)
		return 1;
	if (r == 0)
		return 0;
	return -errno;
}

void fence_kill(pid_t pid)
{
	int status;

	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
}
