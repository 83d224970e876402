/*
 * gltrace.c - the glock trace: subscribers (shoal trace) and the events the
 * glock layer hands them (include/shoal/shoal.h, docs/LOCKING.md "Trace").
 *
 * Owns one struct gl_tracer per mount (fs_tr) and each subscriber's ring.
 *
 *   open --> SUBSCRIBED --close--> gone
 *   glock.c --gltr_emit--> every subscriber whose filter matches: a copy
 *   in its ring, or, with the ring full, one more dropped event
 *
 * Invariants:
 *  (1) gltr_emit never blocks on a reader: tr_lock is held by a reader only
 *      to copy events out of its ring, never across I/O, and a full ring
 *      drops the event and counts it (t_dropped) instead of waiting;
 *  (2) lock order: gt_mutex (glock.c) before tr_lock; nothing here calls
 *      back into the glock layer;
 *  (3) the events of one subscriber are in the order the glock layer made
 *      them (all under gt_mutex), and none is lost without being counted;
 *  (4) with no subscriber an event costs one relaxed atomic load.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "lock.h"
#include "shoal/glfilter.h"

#define TR_RING 8192 /* events per subscriber */
#define TR_MAX_SUBS 16

struct shoal_trace {
	struct gl_tracer *t_tr;
	struct glfilter t_filter;
	struct shoal_glevent *t_ring; /* protected by tr_lock: t_ring..t_dropped */
	uint32_t t_head;              /* oldest event */
	uint32_t t_count;
	uint64_t t_dropped;
	pthread_cond_t t_cond;        /* an event arrived */
	struct shoal_trace *t_next;   /* protected by tr_lock */
};

struct gl_tracer {
	pthread_mutex_t tr_lock;
	struct shoal_trace *tr_subs;  /* protected by tr_lock */
	int tr_nsubs;                 /* written under tr_lock, read without it */
};

int gltr_init(struct shoal_fs *fs)
{
	struct gl_tracer *tr = calloc(1, sizeof(*tr));
	if (!tr)
		return -ENOMEM;
	pthread_mutex_init(&tr->tr_lock, NULL);
	fs->fs_tr = tr;
	return 0;
}

void gltr_destroy(struct shoal_fs *fs)
{
	struct gl_tracer *tr = fs->fs_tr;
	if (!tr)
		return;
	if (tr->tr_subs)
		fprintf(stderr, "shoal: BUG: glock trace subscribers left at unmount\n");
	pthread_mutex_destroy(&tr->tr_lock);
	free(tr);
	fs->fs_tr = NULL;
}

int gltr_active(struct shoal_fs *fs)
{
	return fs->fs_tr && __atomic_load_n(&fs->fs_tr->tr_nsubs, __ATOMIC_RELAXED) > 0;
}

void shoal_glevent_vals(const struct shoal_glevent *ev, int64_t *v)
{
	v[GLF_GLTYPE] = ev->ev_gltype;
	v[GLF_GLNUM] = (int64_t)ev->ev_glnum;
	v[GLF_PREV] = ev->ev_prev;
	v[GLF_NEW] = ev->ev_new;
	v[GLF_TARGET] = ev->ev_target;
	v[GLF_DSTATE] = ev->ev_dstate;
	v[GLF_FLAGS] = ev->ev_flags;
	v[GLF_KIND] = ev->ev_kind;
}

void gltr_emit(struct shoal_fs *fs, struct shoal_glevent *ev)
{
	struct gl_tracer *tr = fs->fs_tr;
	struct timespec ts;
	int64_t vals[GLF_NFIELDS];

	if (!gltr_active(fs))
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	ev->ev_time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	shoal_glevent_vals(ev, vals);
	pthread_mutex_lock(&tr->tr_lock);
	for (struct shoal_trace *t = tr->tr_subs; t; t = t->t_next) {
		if (!glf_eval(&t->t_filter, vals))
			continue;
		if (t->t_count == TR_RING) {
			t->t_dropped++;
			continue;
		}
		t->t_ring[(t->t_head + t->t_count) % TR_RING] = *ev;
		if (t->t_count++ == 0)
			pthread_cond_signal(&t->t_cond);
	}
	pthread_mutex_unlock(&tr->tr_lock);
}

int shoal_trace_open(struct shoal_fs *fs, const struct glfilter *filter, struct shoal_trace **out)
{
	struct gl_tracer *tr = fs->fs_tr;
	struct shoal_trace *t;
	pthread_condattr_t ca;
	int err = 0;

	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->t_ring = malloc(sizeof(*t->t_ring) * TR_RING);
	if (!t->t_ring) {
		free(t);
		return -ENOMEM;
	}
	if (filter)
		t->t_filter = *filter;
	else
		t->t_filter.gf_root = -1;
	t->t_tr = tr;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&t->t_cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&tr->tr_lock);
	if (tr->tr_nsubs >= TR_MAX_SUBS) {
		err = -EBUSY;
	} else {
		t->t_next = tr->tr_subs;
		tr->tr_subs = t;
		__atomic_store_n(&tr->tr_nsubs, tr->tr_nsubs + 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&tr->tr_lock);
	if (err) {
		pthread_cond_destroy(&t->t_cond);
		free(t->t_ring);
		free(t);
		return err;
	}
	*out = t;
	return 0;
}

size_t shoal_trace_read(struct shoal_trace *t, struct shoal_glevent *ev, size_t max,
			int timeout_ms, uint64_t *dropped)
{
	struct gl_tracer *tr = t->t_tr;
	struct timespec until;
	size_t n = 0;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&tr->tr_lock);
	while (!t->t_count && !t->t_dropped)
		if (pthread_cond_timedwait(&t->t_cond, &tr->tr_lock, &until))
			break;
	while (n < max && t->t_count) {
		ev[n++] = t->t_ring[t->t_head];
		t->t_head = (t->t_head + 1) % TR_RING;
		t->t_count--;
	}
	*dropped = t->t_dropped;
	t->t_dropped = 0;
	pthread_mutex_unlock(&tr->tr_lock);
	return n;
}

void shoal_trace_close(struct shoal_trace *t)
{
	struct gl_tracer *tr;
	struct shoal_trace **pp;

	if (!t)
		return;
	tr = t->t_tr;
	pthread_mutex_lock(&tr->tr_lock);
	for (pp = &tr->tr_subs; *pp; pp = &(*pp)->t_next)
		if (*pp == t) {
			*pp = t->t_next;
			__atomic_store_n(&tr->tr_nsubs, tr->tr_nsubs - 1, __ATOMIC_RELAXED);
			break;
		}
	pthread_mutex_unlock(&tr->tr_lock);
	pthread_cond_destroy(&t->t_cond);
	free(t->t_ring);
	free(t);
}

static const char *st_name(int st)
{
	static const char *const n[] = {"UN", "SH", "DF", "EX"};
	return st >= 0 && st < 4 ? n[st] : "--";
}

int shoal_glevent_format(const struct shoal_glevent *ev, char *buf, size_t size)
{
	static const char *const kinds[] = {"?", "state", "request", "callback", "demote"};
	static const struct {
		uint32_t bit;
		char c;
	} fl[] = {
		{SHOAL_GLEV_F_INFLIGHT, 'I'}, {SHOAL_GLEV_F_DEMOTING, 'D'}, {SHOAL_GLEV_F_QUEUED, 'Q'},
		{SHOAL_GLEV_F_STICKY, 'S'},   {SHOAL_GLEV_F_TRY, 'T'},      {SHOAL_GLEV_F_FAILED, 'E'},
	};
	char flags[16], *f = flags;
	time_t sec = (time_t)(ev->ev_time_ns / 1000000000ull);
	struct tm tm;

	for (size_t i = 0; i < sizeof(fl) / sizeof(fl[0]); i++)
		if (ev->ev_flags & fl[i].bit)
			*f++ = fl[i].c;
	if (f == flags)
		*f++ = '-';
	*f = '\0';
	localtime_r(&sec, &tm);
	return snprintf(buf, size, "%02d:%02d:%02d.%06u %-8s %u/%llu prev:%s new:%s target:%s dstate:%s flags:%s",
			tm.tm_hour, tm.tm_min, tm.tm_sec,
			(unsigned)(ev->ev_time_ns % 1000000000ull / 1000),
			ev->ev_kind > 0 && ev->ev_kind < 5 ? kinds[ev->ev_kind] : "?",
			ev->ev_gltype, (unsigned long long)ev->ev_glnum, st_name(ev->ev_prev),
			st_name(ev->ev_new), st_name(ev->ev_target), st_name(ev->ev_dstate), flags);
}
