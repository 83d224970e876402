/*
 * lk_crypto.c - lockd's cryptography on OpenSSL's libcrypto, no code of
 * our own: HMAC-SHA256 and constant-time comparison for the handshake
 * (EVP_MAC "HMAC" with digest SHA256), HKDF-SHA256 session keys (EVP_KDF
 * "HKDF") and ChaCha20-Poly1305 sealed frames (EVP_chacha20_poly1305).
 * Checked against RFC 4231 (test_lockd's test_hmac_vectors) and against
 * frames sealed by another implementation (test_lockd_seal's
 * test_seal_vectors).
 *
 * Invariants:
 *  (1) the HMAC keeps nothing between calls: every call fetches, uses and
 *      frees its own MAC context (the handshake is once per connection);
 *  (2) a libcrypto failure is an error (-EIO), never a MAC of zeros that
 *      a caller could send or compare as valid.
 */
#include "lk_crypto.h"
#include "lk_proto.h"

#include <errno.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
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

/*
 * Sessions (docs/PROTOCOL.md "Sealed frames").  Invariants:
 *  (3) the two directions have keys of their own (HKDF-SHA256 output
 *      bytes 0-31 client to server, 32-63 server to client), so a counter
 *      value is used once per key: nonce = 4 zero bytes, then the 64-bit
 *      counter, little-endian;
 *  (4) a counter only moves when a frame was sealed or opened: a frame
 *      that fails to open leaves it as it was (the caller closes the
 *      connection anyway), and a spent counter (2^64 - 1) seals nothing.
 */
#define LK_SESSION_LABEL "shoal-lockd 1 session keys"

static void *aead_ctx(const uint8_t key[LK_KEY_LEN], int enc)
{
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

	if (!ctx)
		return NULL;
	if (!EVP_CipherInit_ex(ctx, EVP_chacha20_poly1305(), NULL, key, NULL, enc)) {
		EVP_CIPHER_CTX_free(ctx);
		return NULL;
	}
	return ctx;
}

int lk_session_init(struct lk_session *s, const void *secret, size_t secretlen,
		    const uint8_t *snonce, const uint8_t *cnonce, const char *name, size_t namelen,
		    int server)
{
	uint8_t salt[2 * LKP_NONCE], info[sizeof(LK_SESSION_LABEL) + 64], keys[2 * LK_KEY_LEN];
	char digest[] = "SHA256";
	size_t infolen = sizeof(LK_SESSION_LABEL); /* the label and its NUL */
	EVP_KDF *kdf;
	EVP_KDF_CTX *kctx = NULL;
	int err = -EIO;

	memset(s, 0, sizeof(*s));
	if (namelen > 64 || !secretlen)
		return -EINVAL;
	memcpy(salt, snonce, LKP_NONCE);
	memcpy(salt + LKP_NONCE, cnonce, LKP_NONCE);
	memcpy(info, LK_SESSION_LABEL, sizeof(LK_SESSION_LABEL));
	memcpy(info + infolen, name, namelen);
	infolen += namelen;
	{
		OSSL_PARAM params[] = {
			OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
			OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)secret,
							  secretlen),
			OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, salt, sizeof(salt)),
			OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info, infolen),
			OSSL_PARAM_construct_end(),
		};

		kdf = EVP_KDF_fetch(NULL, "HKDF", NULL);
		if (!kdf)
			return -EIO;
		kctx = EVP_KDF_CTX_new(kdf);
		if (!kctx || EVP_KDF_derive(kctx, keys, sizeof(keys), params) <= 0)
			goto out;
	}
	/* keys: client->server, then server->client */
	s->ls_tx = aead_ctx(server ? keys + LK_KEY_LEN : keys, 1);
	s->ls_rx = aead_ctx(server ? keys : keys + LK_KEY_LEN, 0);
	if (!s->ls_tx || !s->ls_rx) {
		lk_session_free(s);
		goto out;
	}
	err = 0;
out:
	OPENSSL_cleanse(keys, sizeof(keys));
	EVP_KDF_CTX_free(kctx);
	EVP_KDF_free(kdf);
	return err;
}

void lk_session_free(struct lk_session *s)
{
	EVP_CIPHER_CTX_free(s->ls_tx);
	EVP_CIPHER_CTX_free(s->ls_rx);
	s->ls_tx = s->ls_rx = NULL;
}

static void nonce_of(uint64_t n, uint8_t iv[12])
{
	memset(iv, 0, 4);
	for (int i = 0; i < 8; i++)
		iv[4 + i] = (uint8_t)(n >> (8 * i));
}

size_t lk_seal_frame(struct lk_session *s, uint8_t *f, size_t plen)
{
	EVP_CIPHER_CTX *ctx = s->ls_tx;
	uint8_t iv[12], *p = f + LKP_HDR;
	int n = 0, fin = 0;

	if (!ctx || s->ls_txn == UINT64_MAX)
		return 0;
	lkp_put32(f, (uint32_t)(LKP_HDR - 4 + plen + LK_TAG_LEN));
	f[6] = LKP_HF_SEALED;
	f[7] = 0;
	nonce_of(s->ls_txn, iv);
	if (!EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, iv) ||
	    !EVP_EncryptUpdate(ctx, NULL, &n, f, LKP_HDR) ||
	    (plen && !EVP_EncryptUpdate(ctx, p, &n, p, (int)plen)) ||
	    !EVP_EncryptFinal_ex(ctx, p + plen, &fin) ||
	    !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, LK_TAG_LEN, p + plen))
		return 0;
	s->ls_txn++;
	return LKP_HDR + plen + LK_TAG_LEN;
}

int lk_open_frame(struct lk_session *s, uint8_t *f, size_t flen)
{
	EVP_CIPHER_CTX *ctx = s->ls_rx;
	uint8_t iv[12], *p = f + LKP_HDR;
	size_t plen;
	int n = 0, fin = 0;

	if (!ctx || flen < LKP_HDR + LK_TAG_LEN || f[6] != LKP_HF_SEALED || f[7] || s->ls_rxn == UINT64_MAX)
		return -EBADMSG;
	plen = flen - LKP_HDR - LK_TAG_LEN;
	nonce_of(s->ls_rxn, iv);
	if (!EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, iv) ||
	    !EVP_DecryptUpdate(ctx, NULL, &n, f, LKP_HDR) ||
	    (plen && !EVP_DecryptUpdate(ctx, p, &n, p, (int)plen)) ||
	    !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, LK_TAG_LEN, p + plen) ||
	    EVP_DecryptFinal_ex(ctx, p + plen, &fin) <= 0)
		return -EBADMSG;
	s->ls_rxn++;
	f[6] = 0;
	return (int)plen;
}
