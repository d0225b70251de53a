/* SPDX-License-Identifier: MIT */
/*
 * tls.c -- TLS contexts and connections on memory BIOs (see tls.h).
 *
 * A connection's SSL object reads from `rbio` (ciphertext the socket gave)
 * and writes to `wbio` (ciphertext for the socket); both are memory BIOs
 * that say "retry" when empty, so OpenSSL reports SSL_ERROR_WANT_READ when
 * it needs more from the peer and never blocks. Writing to a memory BIO
 * always succeeds (it grows), so SSL_write takes a whole buffer at once
 * and never asks to be repeated; the caller's accounting of unread output
 * counts wbio's bytes until they are taken (dl_tls_pending), then the
 * ciphertext in its own buffers.
 *
 * OpenSSL's error queue (per thread) must be empty before an SSL call for
 * SSL_get_error() to be right. Every path here that can leave an error in
 * it clears it (fail(), the context loaders), so the calls on the hot path
 * do not clear it first: ERR_clear_error() was 3% of the daemon's time
 * in a run of lock+unlock pairs over TLS.
 */
#include "server/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "server/config.h"

/* The shared read buffer (dl_tls_rbuf): what libuv suggests for one read. */
#define RBUF_SIZE (64 * 1024)

struct dl_tls {
	SSL_CTX *ctx; /* for new connections; a reload replaces it */
};

struct dl_tls_conn {
	SSL *ssl;
	BIO *rbio, *wbio; /* ciphertext in and out; owned by ssl */
	enum dl_tls_state state;
	unsigned peer_closed : 1; /* close_notify received */
	unsigned bye : 1;	  /* close_notify queued */
	uint64_t since;
	char name[DL_TLS_NAME_MAX + 1]; /* "" when none */
	char err[DL_TLS_ERR_MAX];
};

static void seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* OpenSSL's reason for the last error on this thread's queue. */
static const char *ossl_reason(void)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;

	return r ? r : "unknown error";
}

int dl_tls_enabled(const struct dl_config *cfg)
{
	return cfg->tls_cert && cfg->tls_cert[0];
}

/* ---- contexts ----------------------------------------------------------- */

static int load_ca(SSL_CTX *ctx, const struct dl_config *cfg, char *err,
		   size_t errlen)
{
	STACK_OF(X509_NAME) * names;
	int mode = SSL_VERIFY_PEER;

	if (SSL_CTX_load_verify_locations(ctx, cfg->tls_ca, NULL) != 1) {
		seterr(err, errlen, "[tls] ca %s: %s", cfg->tls_ca,
		       ossl_reason());
		return DL_EBADARG;
	}
	/* The CAs named to the client, so that it picks the right cert. */
	names = SSL_load_client_CA_file(cfg->tls_ca);
	if (!names) {
		seterr(err, errlen, "[tls] ca %s: no certificate in it",
		       cfg->tls_ca);
		return DL_EBADARG;
	}
	SSL_CTX_set_client_CA_list(ctx, names);
	if (cfg->tls_verify_clients)
		mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
	SSL_CTX_set_verify(ctx, mode, NULL);
	return 0;
}

static int ctx_new(const struct dl_config *cfg, SSL_CTX **out, char *err,
		   size_t errlen)
{
	SSL_CTX *ctx;
	int r = DL_EBADARG;

	ERR_clear_error();
	*out = NULL;
	if (!(ctx = SSL_CTX_new(TLS_server_method()))) {
		seterr(err, errlen, "TLS: %s", ossl_reason());
		return DL_ENOMEM;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION |
					 SSL_OP_NO_RENEGOTIATION |
					 SSL_OP_NO_TICKET);
	SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	/* An idle connection gives its record buffers back: 1000 idle
	 * TLS connections cost 23 KB each instead of 32 KB (VmRSS; 5 KB in
	 * plaintext), for a few us per request at most, within the noise
	 * of this machine's runs. */
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	if (SSL_CTX_use_certificate_chain_file(ctx, cfg->tls_cert) != 1) {
		seterr(err, errlen, "[tls] cert %s: %s", cfg->tls_cert,
		       ossl_reason());
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, cfg->tls_key, SSL_FILETYPE_PEM) !=
		    1 &&
	    ERR_GET_REASON(ERR_peek_last_error()) !=
		    X509_R_KEY_VALUES_MISMATCH) {
		seterr(err, errlen, "[tls] key %s: %s", cfg->tls_key,
		       ossl_reason());
		goto fail;
	}
	if (SSL_CTX_check_private_key(ctx) != 1) {
		seterr(err, errlen, "[tls] key %s does not match cert %s",
		       cfg->tls_key, cfg->tls_cert);
		goto fail;
	}
	if (cfg->tls_ca[0] && (r = load_ca(ctx, cfg, err, errlen)) != 0)
		goto fail;
	*out = ctx;
	return 0;
fail:
	SSL_CTX_free(ctx);
	ERR_clear_error();
	return r;
}

int dl_tls_new(const struct dl_config *cfg, struct dl_tls **out, char *err,
	       size_t errlen)
{
	struct dl_tls *t;
	int r;

	*out = NULL;
	if (!(t = calloc(1, sizeof(*t)))) {
		seterr(err, errlen, "out of memory");
		return DL_ENOMEM;
	}
	if ((r = ctx_new(cfg, &t->ctx, err, errlen)) != 0) {
		free(t);
		return r;
	}
	*out = t;
	return 0;
}

int dl_tls_check(const struct dl_config *cfg, char *err, size_t errlen)
{
	struct dl_tls *t;
	int r = dl_tls_new(cfg, &t, err, errlen);

	dl_tls_free(t);
	return r;
}

int dl_tls_reload(struct dl_tls *t, const struct dl_config *cfg, char *err,
		  size_t errlen)
{
	SSL_CTX *ctx;
	int r;

	if ((r = ctx_new(cfg, &ctx, err, errlen)) != 0)
		return r;
	SSL_CTX_free(t->ctx); /* open connections keep their reference */
	t->ctx = ctx;
	return 0;
}

void dl_tls_describe_cert(const struct dl_tls *t, char *buf, size_t len)
{
	X509 *x = SSL_CTX_get0_certificate(t->ctx);
	BIO *b = BIO_new(BIO_s_mem());
	BIGNUM *bn = NULL;
	char *serial = NULL, *p;
	long n;

	if (!x || !b) {
		snprintf(buf, len, "(no certificate)");
		BIO_free(b);
		return;
	}
	bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	serial = bn ? BN_bn2hex(bn) : NULL;
	BIO_puts(b, "subject ");
	X509_NAME_print_ex(b, X509_get_subject_name(x), 0, XN_FLAG_RFC2253);
	BIO_printf(b, ", serial %s, expires ", serial ? serial : "?");
	ASN1_TIME_print(b, X509_get0_notAfter(x));
	if (X509_cmp_current_time(X509_get0_notAfter(x)) < 0)
		BIO_puts(b, " (EXPIRED)");
	n = BIO_get_mem_data(b, &p);
	snprintf(buf, len, "%.*s", (int)n, p);
	OPENSSL_free(serial);
	BN_free(bn);
	BIO_free(b);
}

void dl_tls_free(struct dl_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t);
}

/* ---- connections -------------------------------------------------------- */

char *dl_tls_rbuf(size_t *len)
{
	static char buf[RBUF_SIZE];

	*len = sizeof(buf);
	return buf;
}

int dl_tls_conn_new(struct dl_tls *t, uint64_t now, struct dl_tls_conn **out)
{
	struct dl_tls_conn *tc = calloc(1, sizeof(*tc));

	*out = NULL;
	if (!tc)
		return DL_ENOMEM;
	tc->since = now;
	tc->ssl = SSL_new(t->ctx);
	tc->rbio = BIO_new(BIO_s_mem());
	tc->wbio = BIO_new(BIO_s_mem());
	if (!tc->ssl || !tc->rbio || !tc->wbio) {
		BIO_free(tc->rbio);
		BIO_free(tc->wbio);
		SSL_free(tc->ssl);
		free(tc);
		ERR_clear_error();
		return DL_ENOMEM;
	}
	/* empty means "not yet", never end of file */
	BIO_set_mem_eof_return(tc->rbio, -1);
	BIO_set_mem_eof_return(tc->wbio, -1);
	SSL_set_bio(tc->ssl, tc->rbio, tc->wbio);
	SSL_set_accept_state(tc->ssl);
	*out = tc;
	return 0;
}

void dl_tls_conn_free(struct dl_tls_conn *tc)
{
	if (!tc)
		return;
	SSL_free(tc->ssl); /* and its BIOs */
	free(tc);
}

int dl_tls_feed(struct dl_tls_conn *tc, const char *p, size_t n)
{
	if (n == 0 || tc->state == DL_TLS_FAILED)
		return 0;
	if (n > INT32_MAX || BIO_write(tc->rbio, p, (int)n) != (int)n) {
		ERR_clear_error();
		return DL_ENOMEM;
	}
	return 0;
}

/* The connection broke TLS: say why, from the verification result if a
 * certificate was refused, else from OpenSSL's error queue. */
static int fail(struct dl_tls_conn *tc, int ssl_err)
{
	long v = SSL_get_verify_result(tc->ssl);

	tc->state = DL_TLS_FAILED;
	if (v != X509_V_OK)
		seterr(tc->err, sizeof(tc->err), "%s: %s", ossl_reason(),
		       X509_verify_cert_error_string(v));
	else if (ssl_err == SSL_ERROR_SSL)
		seterr(tc->err, sizeof(tc->err), "%s", ossl_reason());
	else
		seterr(tc->err, sizeof(tc->err), "TLS error %d", ssl_err);
	ERR_clear_error();
	return DL_EPROTO;
}

/* What an SSL call that did not succeed means: 0 (wait for more, or the
 * peer closed), or DL_EPROTO. */
static int after(struct dl_tls_conn *tc, int r)
{
	int e = SSL_get_error(tc->ssl, r);

	switch (e) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE: /* a memory BIO never fills: harmless */
		return 0;
	case SSL_ERROR_ZERO_RETURN:
		tc->peer_closed = 1;
		ERR_clear_error();
		return 0;
	default:
		return fail(tc, e);
	}
}

/* A usable name: printable ASCII, no space or '=' (the owner alphabet). */
static int name_ok(const unsigned char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > DL_TLS_NAME_MAX)
		return 0;
	for (i = 0; i < n; i++)
		if (s[i] < 0x21 || s[i] > 0x7e || s[i] == '=')
			return 0;
	return 1;
}

static void copy_name(struct dl_tls_conn *tc, const unsigned char *s, size_t n)
{
	if (!name_ok(s, n))
		return;
	memcpy(tc->name, s, n);
	tc->name[n] = '\0';
}

/* The verified client certificate's CN, else its first DNS SAN. */
static void peer_name(struct dl_tls_conn *tc)
{
	X509 *x = SSL_get0_peer_certificate(tc->ssl);
	GENERAL_NAMES *sans;
	const GENERAL_NAME *g;
	X509_NAME_ENTRY *e;
	const ASN1_STRING *s;
	int i;

	if (!x || SSL_get_verify_result(tc->ssl) != X509_V_OK)
		return;
	i = X509_NAME_get_index_by_NID(X509_get_subject_name(x), NID_commonName,
				       -1);
	if (i >= 0) {
		e = X509_NAME_get_entry(X509_get_subject_name(x), i);
		s = X509_NAME_ENTRY_get_data(e);
		copy_name(tc, ASN1_STRING_get0_data(s),
			  (size_t)ASN1_STRING_length(s));
		return;
	}
	sans = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
	for (i = 0; sans && i < sk_GENERAL_NAME_num(sans); i++) {
		g = sk_GENERAL_NAME_value(sans, i);
		if (g->type != GEN_DNS)
			continue;
		copy_name(tc, ASN1_STRING_get0_data(g->d.dNSName),
			  (size_t)ASN1_STRING_length(g->d.dNSName));
		break;
	}
	GENERAL_NAMES_free(sans);
}

int dl_tls_read(struct dl_tls_conn *tc, char *buf, size_t cap, size_t *got)
{
	size_t n = 0;
	int r;

	*got = 0;
	if (tc->state == DL_TLS_FAILED || tc->peer_closed)
		return 0;
	if (tc->state == DL_TLS_HANDSHAKE) {
		r = SSL_do_handshake(tc->ssl);
		if (r != 1)
			return after(tc, r);
		tc->state = DL_TLS_OPEN;
		peer_name(tc);
	}
	if (cap == 0)
		return 0;
	r = SSL_read_ex(tc->ssl, buf, cap, &n);
	if (r != 1)
		return after(tc, r);
	*got = n;
	return 0;
}

int dl_tls_write(struct dl_tls_conn *tc, const char *p, size_t n)
{
	size_t done = 0;
	int r;

	if (n == 0 || tc->state != DL_TLS_OPEN || tc->bye)
		return 0;
	r = SSL_write_ex(tc->ssl, p, n, &done);
	if (r != 1)
		return fail(tc, SSL_get_error(tc->ssl, r));
	return 0;
}

size_t dl_tls_pending(const struct dl_tls_conn *tc)
{
	return BIO_ctrl_pending(tc->wbio);
}

int dl_tls_take(struct dl_tls_conn *tc, struct dl_buf *dst)
{
	size_t n = dl_tls_pending(tc);
	int got;

	if (n == 0)
		return 0;
	if (n > INT32_MAX || dl_buf_reserve(dst, n) != 0)
		return DL_ENOMEM;
	got = BIO_read(tc->wbio, dst->p + dst->len, (int)n);
	if (got > 0)
		dst->len += (size_t)got;
	return 0;
}

int dl_tls_seal(struct dl_tls_conn *tc, struct dl_buf *out)
{
	int r = dl_tls_write(tc, out->p, out->len);

	out->len = 0; /* encrypted, or not to be sent */
	if (dl_tls_take(tc, out) != 0)
		return DL_ENOMEM;
	return r;
}

int dl_tls_shutdown(struct dl_tls_conn *tc)
{
	if (tc->state != DL_TLS_OPEN || tc->bye)
		return 0;
	tc->bye = 1;
	ERR_clear_error();
	SSL_shutdown(tc->ssl); /* queues close_notify; no wait for theirs */
	ERR_clear_error();
	return 1;
}

enum dl_tls_state dl_tls_state(const struct dl_tls_conn *tc)
{
	return tc->state;
}

int dl_tls_peer_closed(const struct dl_tls_conn *tc)
{
	return tc->peer_closed;
}

uint64_t dl_tls_since(const struct dl_tls_conn *tc)
{
	return tc->since;
}

const char *dl_tls_peer_name(const struct dl_tls_conn *tc)
{
	return tc->name[0] ? tc->name : NULL;
}

const char *dl_tls_error(const struct dl_tls_conn *tc)
{
	return tc->err;
}

void dl_tls_describe(const struct dl_tls_conn *tc, char *buf, size_t len)
{
	snprintf(buf, len, "%s %s", SSL_get_version(tc->ssl),
		 SSL_get_cipher_name(tc->ssl));
}
