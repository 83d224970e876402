/*
 * benchutil.h - what every bench/ workload program shares: a monotonic
 * clock in seconds and the fatal-error exit.  Define PROG before including.
 */
#ifndef SHOAL_BENCHUTIL_H
#define SHOAL_BENCHUTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* "PROG: what name: strerror(errno)" (name may be NULL), exit 1. */
static inline void die(const char *what, const char *name)
{
	fprintf(stderr, PROG ": %s %s: %s\n", what, name ? name : "", strerror(errno));
	exit(1);
}

#endif
