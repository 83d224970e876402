/*
 * lk_crypto.h - the lockd handshake's cryptography, from OpenSSL's
 * libcrypto: HMAC-SHA256 (RFC 2104, FIPS 180-4) and a constant-time
 * comparison.  docs/PROTOCOL.md, "Handshake", says what is MACed.
 */
#ifndef SHOAL_LK_CRYPTO_H
#define SHOAL_LK_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#define LK_HMAC_LEN 32 /* HMAC-SHA256 */

/*
 * HMAC-SHA256 with key over the concatenation of msg1 and msg2 (msg2 may be
 * NULL).  0, or -EIO when libcrypto fails (out is then zeros).
 */
int lk_hmac_sha256(const void *key, size_t keylen, const void *msg1, size_t len1,
		   const void *msg2, size_t len2, uint8_t out[LK_HMAC_LEN]);

/* Constant-time comparison: 0 when equal. */
int lk_memcmp_ct(const void *a, const void *b, size_t n);

#endif
