/*
 * lk_crypto.c - HMAC-SHA256 and constant-time comparison for the lockd
 * handshake, on OpenSSL's libcrypto (EVP_MAC "HMAC" with digest SHA256)
 * instead of code of our own.  The bytes are those of RFC 2104 over
 * FIPS 180-4 SHA-256, so the wire protocol is unchanged (test_lockd's
 * test_hmac_vectors: RFC 4231 and a JOIN MAC).
 *
 * Invariants:
 *  (1) nothing is kept between calls: every call fetches, uses and frees
 *      its own MAC context (the handshake is once per connection);
 *  (2) a libcrypto failure is an error (-EIO), never a MAC of zeros that
 *      a caller could send or compare as valid.
 */
#include "lk_crypto.h"

#include <errno.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

int lk_hmac_sha256(const void *key, size_t keylen, const void *msg1, size_t len1,
		   const void *msg2, size_t len2, uint8_t out[LK_HMAC_LEN])
{
	char digest[] = "SHA256";
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
		OSSL_PARAM_construct_end(),
	};
	EVP_MAC *mac;
	EVP_MAC_CTX *ctx = NULL;
	size_t outlen = 0;
	int err = -EIO;

	memset(out, 0, LK_HMAC_LEN);
	mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	if (!mac)
		return -EIO;
	ctx = EVP_MAC_CTX_new(mac);
	if (!ctx)
		goto out_mac;
	/* a zero-length key is a valid HMAC key, but libcrypto wants a pointer */
	if (!EVP_MAC_init(ctx, keylen ? key : (const void *)"", keylen, params) ||
	    !EVP_MAC_update(ctx, msg1, len1) ||
	    (msg2 && len2 && !EVP_MAC_update(ctx, msg2, len2)) ||
	    !EVP_MAC_final(ctx, out, &outlen, LK_HMAC_LEN) || outlen != LK_HMAC_LEN) {
		memset(out, 0, LK_HMAC_LEN);
		goto out_ctx;
	}
	err = 0;
out_ctx:
	EVP_MAC_CTX_free(ctx);
out_mac:
	EVP_MAC_free(mac);
	return err;
}

int lk_memcmp_ct(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) != 0;
}
