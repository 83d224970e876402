/*
 * lk_sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for the
 * lockd challenge/response.  No state outside the caller's context.
 */
#ifndef SHOAL_LK_SHA256_H
#define SHOAL_LK_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define LK_SHA256_LEN 32

struct lk_sha256 {
	uint32_t sh_h[8];
	uint64_t sh_len; /* bytes hashed so far */
	uint8_t sh_buf[64];
	uint32_t sh_fill; /* bytes in sh_buf */
};

void lk_sha256_init(struct lk_sha256 *s);
void lk_sha256_update(struct lk_sha256 *s, const void *data, size_t len);
void lk_sha256_final(struct lk_sha256 *s, uint8_t out[LK_SHA256_LEN]);
void lk_sha256(const void *data, size_t len, uint8_t out[LK_SHA256_LEN]);

/* HMAC-SHA256 over the concatenation of msg1 and msg2 (msg2 may be NULL). */
void lk_hmac_sha256(const void *key, size_t keylen, const void *msg1, size_t len1,
		    const void *msg2, size_t len2, uint8_t out[LK_SHA256_LEN]);

/* Constant-time comparison: 0 when equal. */
int lk_memcmp_ct(const void *a, const void *b, size_t n);

#endif
