/*
 * test_glfilter.c - the filter expressions of shoal trace / glocks / glstats
 * (include/shoal/glfilter.h): what each operator, name and number means,
 * C's precedence, and a clear error with its column for every bad filter.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "shoal/glfilter.h"
#include "shoal/shoal.h"

#define UN 0
#define SH 1
#define DF 2
#define EX 3
#define NONE (-1)

/* One event's values: type, number, prev, new, target, dstate, flags, kind
 * (in one of 16 rotating arrays: a test keeps a few alive at once). */
static int64_t *ev(int64_t type, int64_t num, int64_t prev, int64_t new, int64_t target,
		   int64_t dstate, int64_t flags, int64_t kind)
{
	static int64_t vs[16][GLF_NFIELDS];
	static unsigned next;
	int64_t *v = vs[next++ % 16];
	v[GLF_GLTYPE] = type;
	v[GLF_GLNUM] = num;
	v[GLF_PREV] = prev;
	v[GLF_NEW] = new;
	v[GLF_TARGET] = target;
	v[GLF_DSTATE] = dstate;
	v[GLF_FLAGS] = flags;
	v[GLF_KIND] = kind;
	return v;
}

/* An inode-glock state change UN -> SH of glock 2/num, no flags. */
static int64_t *grant(int64_t type, int64_t num)
{
	return ev(type, num, UN, SH, SH, NONE, 0, SHOAL_GLEV_STATE);
}

static struct glfilter f;

static int match(const char *text, const int64_t *vals)
{
	char err[256];
	int rc = glf_compile(&f, text, err, sizeof(err));
	if (rc)
		fail_msg("'%s' did not compile: %s", text, err);
	return glf_eval(&f, vals);
}

/* The filter must be refused; its message must name the column and say why. */
static void refused(const char *text, int column, const char *why)
{
	char err[256], col[32];
	int rc = glf_compile(&f, text, err, sizeof(err));
	if (rc != -EINVAL)
		fail_msg("'%s' compiled (rc %d), want it refused", text, rc);
	snprintf(col, sizeof(col), "column %d: ", column);
	if (strncmp(err, col, strlen(col)) || !strstr(err, why))
		fail_msg("'%s': got \"%s\", want \"%s...%s\"", text, err, col, why);
	/* a refused filter is the empty one, never half of what was asked */
	assert_true(glf_is_empty(&f));
}

static void test_empty_matches_everything(void **state)
{
	(void)state;
	assert_true(match("", grant(2, 1)));
	assert_true(match("   \t ", grant(9, 0)));
	assert_true(glf_is_empty(&f));
	assert_int_equal(glf_compile(&f, "", NULL, 0), 0);
}

static void test_seed_filter(void **state)
{
	(void)state;
	/* the seed's procedure: glnum == <inode number> && gltype == 2 */
	assert_true(match("glnum == 1234 && gltype == 2", grant(2, 1234)));
	assert_false(match("glnum == 1234 && gltype == 2", grant(2, 1235)));
	assert_false(match("glnum == 1234 && gltype == 2", grant(5, 1234)));
	assert_true(match("gltype==2&&glnum==1234", grant(2, 1234)));
	/* and the transition it looks for */
	assert_false(match("glnum == 1234 && gltype == 2 && new == EX", grant(2, 1234)));
	assert_true(match("glnum == 1234 && gltype == 2 && new == EX",
			  ev(2, 1234, SH, EX, EX, NONE, 0, SHOAL_GLEV_STATE)));
}

static void test_numbers(void **state)
{
	(void)state;
	assert_true(match("glnum == 0x4d2", grant(2, 1234)));
	assert_true(match("glnum == 0X4D2", grant(2, 1234)));
	assert_true(match("glnum == 01234", grant(2, 1234))); /* decimal, not octal */
	assert_true(match("glnum == 0", grant(2, 0)));
	assert_true(match("glnum == 9223372036854775807", grant(2, INT64_MAX)));
	assert_true(match("glnum == 0x7fffffffffffffff", grant(2, INT64_MAX)));
	assert_false(match("glnum == 0x7ffffffffffffffe", grant(2, INT64_MAX)));
}

static void test_names(void **state)
{
	int64_t *cb = ev(2, 7, SH, SH, EX, UN, SHOAL_GLEV_F_QUEUED, SHOAL_GLEV_CALLBACK);
	(void)state;
	assert_true(match("kind == callback", cb));
	assert_false(match("kind == state", cb));
	assert_true(match("KIND == Callback && target == ex && dstate == UN", cb));
	assert_true(match("prev == SH && new == sh", cb));
	assert_true(match("from == SH && to == SH", cb)); /* aliases */
	assert_true(match("kind == request", ev(2, 7, UN, NONE, SH, NONE, 0, SHOAL_GLEV_REQUEST)));
	assert_true(match("new == none", ev(2, 7, UN, NONE, SH, NONE, 0, SHOAL_GLEV_REQUEST)));
	assert_true(match("kind == demote", ev(2, 7, SH, SH, NONE, UN, 0, SHOAL_GLEV_DEMOTE)));
	assert_true(match("target == DF", ev(2, 7, UN, DF, DF, NONE, 0, SHOAL_GLEV_STATE)));
	/* the states are ordered: UN < SH < DF < EX, none below all */
	assert_true(match("UN < SH && SH < DF && DF < EX && none < UN", grant(2, 1)));
	assert_true(match("flags == 4", cb));
	assert_true(match("flags", cb)); /* a lone field: not zero */
	assert_false(match("flags", grant(2, 1)));
}

static void test_operators(void **state)
{
	int64_t *v = grant(5, 100);
	(void)state;
	assert_true(match("glnum == 100", v));
	assert_false(match("glnum != 100", v));
	assert_true(match("glnum != 99", v));
	assert_true(match("glnum < 101", v));
	assert_false(match("glnum < 100", v));
	assert_true(match("glnum <= 100", v));
	assert_false(match("glnum <= 99", v));
	assert_true(match("glnum > 99", v));
	assert_false(match("glnum > 100", v));
	assert_true(match("glnum >= 100", v));
	assert_false(match("glnum >= 101", v));
	assert_true(match("gltype == 5 && glnum == 100", v));
	assert_false(match("gltype == 2 && glnum == 100", v));
	assert_true(match("gltype == 2 || glnum == 100", v));
	assert_false(match("gltype == 2 || glnum == 1", v));
	assert_true(match("!(gltype == 2)", v));
	assert_false(match("!(gltype == 5)", v));
	assert_true(match("!!(gltype == 5)", v));
	assert_true(match("! gltype == 0", v)); /* (!gltype) == 0, as in C */
	assert_true(match("100 == glnum", v));
}

static void test_precedence(void **state)
{
	(void)state;
	/* && binds tighter than ||: 2 || (5 && 1) */
	assert_true(match("gltype == 2 || gltype == 5 && glnum == 1", grant(2, 9)));
	assert_false(match("gltype == 2 || gltype == 5 && glnum == 1", grant(5, 9)));
	assert_true(match("gltype == 2 || gltype == 5 && glnum == 1", grant(5, 1)));
	/* parentheses change it */
	assert_false(match("(gltype == 2 || gltype == 5) && glnum == 1", grant(2, 9)));
	assert_true(match("(gltype == 2 || gltype == 5) && glnum == 1", grant(2, 1)));
	/* relational binds tighter than equality: (1 < 2) == 1 */
	assert_true(match("1 < 2 == 1", grant(2, 1)));
	assert_true(match("2 < 1 == 0", grant(2, 1)));
	/* ! binds tighter than anything binary */
	assert_true(match("!gltype == 0 && glnum == 1", grant(2, 1)));
	assert_true(match("((((glnum == 1))))", grant(2, 1)));
}

static void test_errors(void **state)
{
	char deep[256] = "";
	(void)state;
	refused("gltype ==", 10, "expected a field, number or name at the end");
	refused("gltype = 2", 8, "unknown operator '='");
	refused("gltype == 2 & glnum == 1", 13, "unknown operator '&'");
	refused("gltype == 2 | glnum == 1", 13, "unknown operator '|'");
	refused("glnm == 1", 1, "unknown name 'glnm'");
	refused("gltype == XX", 11, "unknown name 'XX'");
	refused("(gltype == 2", 13, "expected ')' at the end");
	refused("(gltype == 2 glnum", 14, "expected ')' before 'glnum'");
	refused("gltype == 2)", 12, "')' without '('");
	refused("gltype == 2 glnum == 3", 13, "expected an operator before 'glnum == 3'");
	refused("glnum == 0x", 10, "'0x' without hex digits");
	refused("glnum == 12ab", 10, "bad number '12a'");
	refused("glnum == 99999999999999999999", 10, "number too large");
	refused("glnum == 0x8000000000000000", 10, "number too large");
	refused("glnum == $1", 10, "expected a field, number or name, not '$'");
	refused("&& gltype", 1, "expected a field, number or name, not '&'");
	refused("!= 2", 1, "expected a field, number or name, not '!'");
	refused("()", 2, "expected a field, number or name, not ')'");
	for (int i = 0; i < 40; i++)
		strcat(deep, "(");
	strcat(deep, "gltype");
	refused(deep, 33, "nested too deep");
	/* with no room for a message, still refused */
	assert_int_equal(glf_compile(&f, "glnm", NULL, 0), -EINVAL);
}

/* refused() wants the column; "filter too long" names where it ran out. */
static void refused_any_column(const char *text, const char *why)
{
	char err[256];
	assert_int_equal(glf_compile(&f, text, err, sizeof(err)), -EINVAL);
	if (strncmp(err, "column ", 7) || !strstr(err, why))
		fail_msg("'%s': got \"%s\", want \"column N: ...%s\"", text, err, why);
}

static void test_limits(void **state)
{
	char ok[2048] = "";
	char many[4096] = "";
	(void)state;
	/* 30 comparisons joined by || (119 nodes) still fit */
	for (int i = 0; i < 30; i++) {
		char one[32];
		snprintf(one, sizeof(one), "%sglnum == %d", i ? " || " : "", i);
		strcat(ok, one);
	}
	assert_true(match(ok, grant(2, 29)));
	assert_false(match(ok, grant(2, 30)));
	for (int i = 0; i < 100; i++)
		strcat(many, i ? " || glnum == 1" : "glnum == 1");
	refused_any_column(many, "filter too long");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_matches_everything),
		cmocka_unit_test(test_seed_filter),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_operators),
		cmocka_unit_test(test_precedence),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
