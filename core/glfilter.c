/*
 * glfilter.c - the filter expressions of include/shoal/glfilter.h: a
 * recursive-descent compiler into a fixed array of nodes, and an evaluator
 * over it.
 *
 * Grammar (C's precedence and associativity, left to right):
 *
 *	or      := and { "||" and }
 *	and     := eq { "&&" eq }
 *	eq      := rel { ("==" | "!=") rel }
 *	rel     := unary { ("<" | ">" | "<=" | ">=") unary }
 *	unary   := "!" unary | primary
 *	primary := "(" or ")" | NUMBER | NAME
 *
 * Invariants:
 *  (1) a compiled filter refers only to nodes before gf_count, and every
 *      operand index of a node is smaller than the node's own index, so
 *      evaluation terminates and recurses at most GLF_MAX_NODES deep; the
 *      parser recurses at most GLF_MAX_DEPTH levels of ( and ! deep;
 *  (2) a failed compile leaves the empty filter, never a half-built one;
 *  (3) glf_eval never allocates, blocks or fails: it may run under the
 *      glock table's mutex for every event.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "lock.h"
#include "shoal/glfilter.h"
#include "shoal/shoal.h"

enum {
	GLF_OP_CONST,
	GLF_OP_FIELD,
	GLF_OP_NOT,
	GLF_OP_AND,
	GLF_OP_OR,
	GLF_OP_EQ,
	GLF_OP_NE,
	GLF_OP_LT,
	GLF_OP_GT,
	GLF_OP_LE,
	GLF_OP_GE,
};

static const struct {
	const char *name;
	int field;
} glf_fields[] = {
	{"gltype", GLF_GLTYPE}, {"glnum", GLF_GLNUM}, {"prev", GLF_PREV},
	{"from", GLF_PREV},     {"new", GLF_NEW},     {"to", GLF_NEW},
	{"target", GLF_TARGET}, {"dstate", GLF_DSTATE}, {"flags", GLF_FLAGS},
	{"kind", GLF_KIND},
};

static const struct {
	const char *name;
	int64_t value;
} glf_consts[] = {
	{"UN", GL_UN},
	{"SH", GL_SH},
	{"DF", GL_DF},
	{"EX", GL_EX},
	{"none", -1},
	{"state", SHOAL_GLEV_STATE},
	{"request", SHOAL_GLEV_REQUEST},
	{"callback", SHOAL_GLEV_CALLBACK},
	{"demote", SHOAL_GLEV_DEMOTE},
};

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

struct glf_parser {
	struct glfilter *p_f;
	const char *p_text;
	const char *p_pos;
	int p_depth;
	char *p_err;
	size_t p_errsize;
	int p_failed;
};

static int fail(struct glf_parser *p, const char *at, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Record the first error only: later ones follow from it. */
static int fail(struct glf_parser *p, const char *at, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (p->p_failed++)
		return -1;
	if (!p->p_err || !p->p_errsize)
		return -1;
	n = snprintf(p->p_err, p->p_errsize, "column %d: ", (int)(at - p->p_text) + 1);
	if (n < 0 || (size_t)n >= p->p_errsize)
		return -1;
	va_start(ap, fmt);
	vsnprintf(p->p_err + n, p->p_errsize - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static void skip_space(struct glf_parser *p)
{
	while (*p->p_pos == ' ' || *p->p_pos == '\t' || *p->p_pos == '\n' || *p->p_pos == '\r')
		p->p_pos++;
}

/* Is the next token s?  Consumes it if so. */
static int accept(struct glf_parser *p, const char *s)
{
	size_t n = strlen(s);
	skip_space(p);
	if (strncmp(p->p_pos, s, n))
		return 0;
	/* "<" must not take the first half of "<=", "!" that of "!=" */
	if (n == 1 && (s[0] == '<' || s[0] == '>' || s[0] == '!') && p->p_pos[1] == '=')
		return 0;
	p->p_pos += n;
	return 1;
}

static int node(struct glf_parser *p, int op, int a, int b, int64_t val)
{
	struct glfilter *f = p->p_f;
	if (f->gf_count == GLF_MAX_NODES)
		return fail(p, p->p_pos, "filter too long (at most %d operands and operators)",
			    GLF_MAX_NODES);
	f->gf_nodes[f->gf_count] = (struct glf_node){(uint8_t)op, (int16_t)a, (int16_t)b, val};
	return f->gf_count++;
}

static int is_name_char(char c, int first)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	       (!first && c >= '0' && c <= '9');
}

static int parse_or(struct glf_parser *p);

static int parse_number(struct glf_parser *p)
{
	const char *s = p->p_pos, *q = s;
	uint64_t v = 0;
	int base = 10, digits = 0;

	if (q[0] == '0' && (q[1] == 'x' || q[1] == 'X')) {
		base = 16;
		q += 2;
	}
	for (;; q++) {
		int d;
		if (*q >= '0' && *q <= '9')
			d = *q - '0';
		else if (base == 16 && *q >= 'a' && *q <= 'f')
			d = *q - 'a' + 10;
		else if (base == 16 && *q >= 'A' && *q <= 'F')
			d = *q - 'A' + 10;
		else
			break;
		if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base || v * (uint64_t)base + (uint64_t)d > INT64_MAX)
			return fail(p, s, "number too large");
		v = v * (uint64_t)base + (uint64_t)d;
		digits++;
	}
	if (!digits)
		return fail(p, s, "'0x' without hex digits");
	if (is_name_char(*q, 0))
		return fail(p, s, "bad number '%.*s'", (int)(q - s + 1), s);
	p->p_pos = q;
	return node(p, GLF_OP_CONST, -1, -1, (int64_t)v);
}

static int parse_name(struct glf_parser *p)
{
	const char *s = p->p_pos, *q = s;
	size_t n, i;

	while (is_name_char(*q, q == s))
		q++;
	n = (size_t)(q - s);
	p->p_pos = q;
	for (i = 0; i < NELEM(glf_fields); i++)
		if (strlen(glf_fields[i].name) == n && !strncasecmp(s, glf_fields[i].name, n))
			return node(p, GLF_OP_FIELD, -1, -1, glf_fields[i].field);
	for (i = 0; i < NELEM(glf_consts); i++)
		if (strlen(glf_consts[i].name) == n && !strncasecmp(s, glf_consts[i].name, n))
			return node(p, GLF_OP_CONST, -1, -1, glf_consts[i].value);
	return fail(p, s,
		    "unknown name '%.*s' (fields: gltype glnum prev from new to target dstate "
		    "flags kind; states: UN SH DF EX none; kinds: state request callback demote)",
		    (int)n, s);
}

static int parse_primary(struct glf_parser *p)
{
	skip_space(p);
	if (accept(p, "(")) {
		const char *open = p->p_pos - 1;
		int n;
		if (++p->p_depth > GLF_MAX_DEPTH)
			return fail(p, open, "parentheses nested too deep (at most %d)", GLF_MAX_DEPTH);
		n = parse_or(p);
		p->p_depth--;
		if (n < 0)
			return n;
		if (!accept(p, ")")) {
			if (!*p->p_pos)
				return fail(p, p->p_pos, "expected ')' at the end");
			return fail(p, p->p_pos, "expected ')' before '%s'", p->p_pos);
		}
		return n;
	}
	if (*p->p_pos >= '0' && *p->p_pos <= '9')
		return parse_number(p);
	if (is_name_char(*p->p_pos, 1))
		return parse_name(p);
	if (!*p->p_pos)
		return fail(p, p->p_pos, "expected a field, number or name at the end");
	return fail(p, p->p_pos, "expected a field, number or name, not '%c'", *p->p_pos);
}

static int parse_unary(struct glf_parser *p)
{
	if (accept(p, "!")) {
		int a;
		if (++p->p_depth > GLF_MAX_DEPTH)
			return fail(p, p->p_pos, "'!' nested too deep (at most %d)", GLF_MAX_DEPTH);
		a = parse_unary(p);
		p->p_depth--;
		return a < 0 ? a : node(p, GLF_OP_NOT, a, -1, 0);
	}
	return parse_primary(p);
}

static int parse_rel(struct glf_parser *p)
{
	int a = parse_unary(p);
	while (a >= 0) {
		int op, b;
		if (accept(p, "<="))
			op = GLF_OP_LE;
		else if (accept(p, ">="))
			op = GLF_OP_GE;
		else if (accept(p, "<"))
			op = GLF_OP_LT;
		else if (accept(p, ">"))
			op = GLF_OP_GT;
		else
			break;
		b = parse_unary(p);
		a = b < 0 ? b : node(p, op, a, b, 0);
	}
	return a;
}

static int parse_eq(struct glf_parser *p)
{
	int a = parse_rel(p);
	while (a >= 0) {
		int op, b;
		if (accept(p, "=="))
			op = GLF_OP_EQ;
		else if (accept(p, "!="))
			op = GLF_OP_NE;
		else
			break;
		b = parse_rel(p);
		a = b < 0 ? b : node(p, op, a, b, 0);
	}
	return a;
}

static int parse_and(struct glf_parser *p)
{
	int a = parse_eq(p);
	while (a >= 0 && accept(p, "&&")) {
		int b = parse_eq(p);
		a = b < 0 ? b : node(p, GLF_OP_AND, a, b, 0);
	}
	return a;
}

static int parse_or(struct glf_parser *p)
{
	int a = parse_and(p);
	while (a >= 0 && accept(p, "||")) {
		int b = parse_and(p);
		a = b < 0 ? b : node(p, GLF_OP_OR, a, b, 0);
	}
	return a;
}

int glf_compile(struct glfilter *f, const char *text, char *err, size_t errsize)
{
	struct glf_parser p = {f, text, text, 0, err, errsize, 0};
	int root;

	f->gf_count = 0;
	f->gf_root = -1;
	if (err && errsize)
		err[0] = '\0';
	skip_space(&p);
	if (!*p.p_pos)
		return 0; /* the empty filter */
	root = parse_or(&p);
	if (root >= 0) {
		skip_space(&p);
		if (*p.p_pos) {
			int n = (int)strspn(p.p_pos, "=&|");
			if (n)
				root = fail(&p, p.p_pos, "unknown operator '%.*s' (== != < > <= >= && || !)",
					    n, p.p_pos);
			else if (*p.p_pos == ')')
				root = fail(&p, p.p_pos, "')' without '('");
			else
				root = fail(&p, p.p_pos, "expected an operator before '%s'", p.p_pos);
		}
	}
	if (root < 0) {
		f->gf_count = 0;
		return -EINVAL;
	}
	f->gf_root = root;
	return 0;
}

static int64_t eval(const struct glfilter *f, int n, const int64_t *v)
{
	const struct glf_node *x = &f->gf_nodes[n];

	switch (x->fn_op) {
	case GLF_OP_CONST:
		return x->fn_val;
	case GLF_OP_FIELD:
		return v[x->fn_val];
	case GLF_OP_NOT:
		return !eval(f, x->fn_a, v);
	case GLF_OP_AND:
		return eval(f, x->fn_a, v) && eval(f, x->fn_b, v);
	case GLF_OP_OR:
		return eval(f, x->fn_a, v) || eval(f, x->fn_b, v);
	case GLF_OP_EQ:
		return eval(f, x->fn_a, v) == eval(f, x->fn_b, v);
	case GLF_OP_NE:
		return eval(f, x->fn_a, v) != eval(f, x->fn_b, v);
	case GLF_OP_LT:
		return eval(f, x->fn_a, v) < eval(f, x->fn_b, v);
	case GLF_OP_GT:
		return eval(f, x->fn_a, v) > eval(f, x->fn_b, v);
	case GLF_OP_LE:
		return eval(f, x->fn_a, v) <= eval(f, x->fn_b, v);
	case GLF_OP_GE:
		return eval(f, x->fn_a, v) >= eval(f, x->fn_b, v);
	}
	return 0;
}

int glf_eval(const struct glfilter *f, const int64_t vals[GLF_NFIELDS])
{
	return f->gf_root < 0 || eval(f, f->gf_root, vals) != 0;
}
