/*
 * lk_crypto.h - lockd's cryptography, from OpenSSL's libcrypto:
 * HMAC-SHA256 (RFC 2104, FIPS 180-4) for JOIN, a constant-time
 * comparison, HKDF-SHA256 (RFC 5869) for the session keys and
 * ChaCha20-Poly1305 (RFC 8439) for sealed frames.  docs/PROTOCOL.md,
 * "Handshake" and "Sealed frames", says what is MACed, derived and sealed.
 */
#ifndef SHOAL_LK_CRYPTO_H
#define SHOAL_LK_CRYPTO_H

#include <stddef.h>
#include <stdint.h>

#define LK_HMAC_LEN 32 /* HMAC-SHA256 */
#define LK_KEY_LEN 32  /* ChaCha20-Poly1305 key, one per direction */
#define LK_TAG_LEN 16  /* Poly1305 tag at the end of every sealed frame */

/*
 * HMAC-SHA256 with key over the concatenation of msg1 and msg2 (msg2 may be
 * NULL).  0, or -EIO when libcrypto fails (out is then zeros).
 */
int lk_hmac_sha256(const void *key, size_t keylen, const void *msg1, size_t len1,
		   const void *msg2, size_t len2, uint8_t out[LK_HMAC_LEN]);

/* Constant-time comparison: 0 when equal. */
int lk_memcmp_ct(const void *a, const void *b, size_t n);

/*
 * One connection's sealing state after JOIN (docs/PROTOCOL.md "Sealed
 * frames"): a key and a frame counter per direction.  The counter is the
 * nonce, so each side must seal and open the frames of a direction in
 * the order they travel; the caller serializes each direction.
 */
struct lk_session {
	void *ls_tx, *ls_rx;	 /* EVP_CIPHER_CTX with the key set */
	uint64_t ls_txn, ls_rxn; /* the counter of the next frame sealed / opened */
};

/*
 * Derive both directions' keys from the secret, the server's and the
 * client's nonces (LKP_NONCE bytes each) and the node name; server says
 * which side this is.  0, or -EIO when libcrypto fails, -EINVAL for an
 * empty secret or a name over 64 bytes (s is then empty).
 */
int lk_session_init(struct lk_session *s, const void *secret, size_t secretlen,
		    const uint8_t *snonce, const uint8_t *cnonce, const char *name, size_t namelen,
		    int server);
/* Forget the keys; s may be empty (zeroed) or freed already. */
void lk_session_free(struct lk_session *s);
/*
 * Seal the frame at f in place: its 12-byte header is rewritten (len
 * counting the tag, hflags SEALED) and authenticated, its plen bytes of
 * payload encrypted, the tag appended (f needs plen + LK_TAG_LEN bytes
 * after the header).  Returns the sealed frame's size, or 0 when
 * libcrypto fails or the counter is spent.
 */
size_t lk_seal_frame(struct lk_session *s, uint8_t *f, size_t plen);
/*
 * Open the sealed frame of flen bytes at f in place (header flags SEALED,
 * tag valid for this direction's next counter): the payload is decrypted
 * and hflags cleared.  Returns the payload size, or -EBADMSG when the
 * frame was changed, replayed, reordered, forged or is not sealed.
 */
int lk_open_frame(struct lk_session *s, uint8_t *f, size_t flen);

#endif
