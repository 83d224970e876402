/*
 * glfilter.h - filter expressions over glock events and glocks: what
 * `shoal trace MOUNTPOINT FILTER` streams, and what `shoal glocks` and
 * `shoal glstats` print (docs/LOCKING.md "Filters").
 *
 *	gltype == 2 && glnum == 1234
 *	kind == callback || (new == EX && prev != UN)
 *	!(gltype == 5) && target >= SH
 *
 * Fields: gltype, glnum, prev (or from), new (or to), target, dstate,
 * flags, kind.  Constants: decimal or 0x hex numbers; the states UN, SH,
 * DF, EX and none (no state: the "--" of the output); the event kinds
 * state, request, callback, demote.  Names are case-insensitive.
 * Operators, loosest first, as in C: ||, &&, == !=, < > <= >=, ! and
 * parentheses.  A comparison is 1 or 0; && || ! treat non-zero as true,
 * so a lone field (`flags`) means "not zero".  The empty filter matches
 * everything.
 *
 * Compiled once into a fixed array (no allocation); evaluating never
 * allocates, blocks or fails, so the glock layer can run it under its
 * mutex.
 */
#ifndef SHOAL_GLFILTER_H
#define SHOAL_GLFILTER_H

#include <stddef.h>
#include <stdint.h>

/* The fields a filter can name, indexes into the values glf_eval reads. */
enum glf_field {
	GLF_GLTYPE,
	GLF_GLNUM,
	GLF_PREV,
	GLF_NEW,
	GLF_TARGET,
	GLF_DSTATE,
	GLF_FLAGS,
	GLF_KIND,
	GLF_NFIELDS,
};

#define GLF_MAX_NODES 128 /* operands and operators of one filter */
#define GLF_MAX_DEPTH 32  /* nesting of parentheses and ! */

struct glf_node {
	uint8_t fn_op;   /* GLF_OP_* (glfilter.c) */
	int16_t fn_a;    /* operand nodes, -1 none */
	int16_t fn_b;
	int64_t fn_val;  /* constant, or field index */
};

struct glfilter {
	int gf_count;        /* nodes used */
	int gf_root;         /* -1: the empty filter, matches everything */
	struct glf_node gf_nodes[GLF_MAX_NODES];
};

/*
 * Compile text into f.  0, or -EINVAL with a one-line reason in err
 * ("column 9: unknown name 'glnm' (fields: ...)"); f is then the empty
 * filter.  err may be NULL.
 */
int glf_compile(struct glfilter *f, const char *text, char *err, size_t errsize);

/* 1 if the values (indexed by enum glf_field) match, else 0. */
int glf_eval(const struct glfilter *f, const int64_t vals[GLF_NFIELDS]);

/* Does f match everything (the empty filter)? */
static inline int glf_is_empty(const struct glfilter *f)
{
	return f->gf_root < 0;
}

#endif
