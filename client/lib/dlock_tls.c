/* SPDX-License-Identifier: MIT */
/*
 * dlock_tls.c -- libdlock's transport: plaintext, or TLS (OpenSSL).
 *
 * Owns the client's TLS context (made once by dlock_connect from the
 * options, immutable afterwards) and the TLS state of its one connection
 * at a time (an SSL object, two memory BIOs, the ciphertext the kernel has
 * not taken yet). Everything here runs under c->mu, like the rest of the
 * connection: calling threads write (dlock__flush), the background thread
 * reads, handshakes and closes; OpenSSL's error queue is per thread and is
 * cleared before each call.
 *
 * Why memory BIOs rather than SSL_set_fd(): OpenSSL's socket BIO writes
 * with write(2), and a peer that closed would raise SIGPIPE in the
 * application, which a library must neither cause nor change the handling
 * of. Here the library does its own send(MSG_NOSIGNAL) and recv(), on the
 * same non-blocking socket and poll() as without TLS; OpenSSL only turns
 * plaintext into records and back. A memory BIO never fills, so SSL_write
 * takes a whole buffer at once; what the kernel does not take waits in
 * t->out and the thread polls for POLLOUT (dlock__io_pending).
 *
 * Verification is on unless options.tls_no_verify: the server's chain
 * against options.tls_ca (else the system's store), and its name -- the
 * host connected to, or options.tls_server_name -- by SSL_set1_host(),
 * which checks an IP address against the certificate's IP SANs and a
 * DNS name against its DNS SANs. A unix socket never uses TLS (dlockd's
 * unix socket is plaintext, protected by its file mode).
 */
#include "client/lib/dlock_private.h"

#include <arpa/inet.h>
#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Ciphertext read from the socket in one recv(): a TLS record and a bit. */
#define DLOCK__TLS_RECV 17408

struct dlock__tls {
	SSL_CTX *ctx;	   /* from the options; immutable */
	char *server_name; /* options.tls_server_name, or NULL */
	SSL *ssl;	   /* this connection's; NULL between connections */
	BIO *rbio, *wbio;  /* ciphertext in, out; owned by ssl */
	char *out;	   /* ciphertext the kernel has not taken */
	size_t out_off, out_len, out_cap;
	int open;		  /* the handshake is done */
	int failed;		  /* TLS broke the connection: err says why */
	char err[DLOCK__ERR_MAX]; /* "" or why */
};

/* "TLS: <what>: <OpenSSL's reason>[: <verification result>]" */
static void set_err(struct dlock__tls *t, const char *what)
{
	unsigned long e = ERR_peek_last_error();
	const char *r = e ? ERR_reason_error_string(e) : NULL;
	long v = t->ssl ? SSL_get_verify_result(t->ssl) : X509_V_OK;

	if (v != X509_V_OK)
		snprintf(t->err, sizeof(t->err), "TLS: %s: %s: %s", what,
			 r ? r : "certificate refused",
			 X509_verify_cert_error_string(v));
	else
		snprintf(t->err, sizeof(t->err), "TLS: %s: %s", what,
			 r ? r : "connection closed by the server");
	ERR_clear_error();
}

/* ---- the context -------------------------------------------------------- */

static int ctx_load(struct dlock__tls *t, const struct dlock_options *o)
{
	SSL_CTX *ctx = t->ctx;

	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx,
			    SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
	if (o->tls_no_verify) {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	} else {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
		if (o->tls_ca && o->tls_ca[0]
			    ? SSL_CTX_load_verify_locations(ctx, o->tls_ca,
							    NULL) != 1
			    : SSL_CTX_set_default_verify_paths(ctx) != 1) {
			set_err(t, o->tls_ca ? o->tls_ca : "the system's CAs");
			return DLOCK_ETLS;
		}
	}
	if (o->tls_cert && o->tls_cert[0]) {
		if (SSL_CTX_use_certificate_chain_file(ctx, o->tls_cert) != 1) {
			set_err(t, o->tls_cert);
			return DLOCK_ETLS;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, o->tls_key,
						SSL_FILETYPE_PEM) != 1) {
			set_err(t, o->tls_key);
			return DLOCK_ETLS;
		}
		if (SSL_CTX_check_private_key(ctx) != 1) {
			set_err(t, "the key does not match the certificate");
			return DLOCK_ETLS;
		}
	}
	return 0;
}

int dlock__tls_new(struct dlock_client *c, const struct dlock_options *o)
{
	struct dlock__tls *t;
	int err;

	c->conn.tls = NULL;
	if (!(o->tls || (o->tls_ca && o->tls_ca[0]) ||
	      (o->tls_cert && o->tls_cert[0])) ||
	    (o->unix_path && !o->servers))
		return 0;
	if (!(t = calloc(1, sizeof(*t))))
		return DLOCK_ENOMEM;
	ERR_clear_error();
	t->ctx = SSL_CTX_new(TLS_client_method());
	if (o->tls_server_name && o->tls_server_name[0] &&
	    !(t->server_name = strdup(o->tls_server_name))) {
		dlock__tls_free(t);
		return DLOCK_ENOMEM;
	}
	if (!t->ctx) {
		dlock__tls_free(t);
		return DLOCK_ENOMEM;
	}
	if ((err = ctx_load(t, o)) < 0) {
		dlock__last_error_set(t->err);
		dlock__tls_free(t);
		return err;
	}
	c->conn.tls = t;
	return 0;
}

void dlock__tls_free(struct dlock__tls *t)
{
	if (!t)
		return;
	SSL_free(t->ssl);
	SSL_CTX_free(t->ctx);
	free(t->server_name);
	free(t->out);
	free(t);
}

/* ---- a connection ------------------------------------------------------- */

/* The name address i must carry: the server name given, the host of its
 * options.servers entry, or options.host. */
static void peer_host(const struct dlock_client *c, int i, char *buf,
		      size_t len)
{
	const char *e, *colon;
	size_t n;

	if (c->conn.tls->server_name) {
		snprintf(buf, len, "%s", c->conn.tls->server_name);
		return;
	}
	if (!c->addr.servers) {
		snprintf(buf, len, "%s", c->host);
		return;
	}
	e = c->addr.names[i];
	colon = strrchr(e, ':');
	n = colon ? (size_t)(colon - e) : strlen(e);
	if (n >= 2 && e[0] == '[' && e[n - 1] == ']') {
		e++;
		n -= 2;
	}
	snprintf(buf, len, "%.*s", (int)n, e);
}

static int is_ip(const char *s)
{
	unsigned char a[16];

	return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

int dlock__tls_begin(struct dlock_client *c, int i)
{
	struct dlock__tls *t = c->conn.tls;
	char host[DLOCK__SERVER_NAME_MAX];

	SSL_free(t->ssl);
	t->ssl = NULL;
	t->out_off = t->out_len = 0;
	t->open = t->failed = 0;
	t->err[0] = '\0';
	ERR_clear_error();
	t->rbio = BIO_new(BIO_s_mem());
	t->wbio = BIO_new(BIO_s_mem());
	t->ssl = SSL_new(t->ctx);
	if (!t->rbio || !t->wbio || !t->ssl) {
		BIO_free(t->rbio);
		BIO_free(t->wbio);
		SSL_free(t->ssl);
		t->ssl = NULL;
		ERR_clear_error();
		return DLOCK_ENOMEM;
	}
	BIO_set_mem_eof_return(t->rbio, -1); /* empty: "not yet" */
	BIO_set_mem_eof_return(t->wbio, -1);
	SSL_set_bio(t->ssl, t->rbio, t->wbio);
	SSL_set_connect_state(t->ssl);
	peer_host(c, i, host, sizeof(host));
	/* SNI is for names only; the check takes either */
	if ((!is_ip(host) && SSL_set_tlsext_host_name(t->ssl, host) != 1) ||
	    (SSL_get_verify_mode(t->ssl) != SSL_VERIFY_NONE &&
	     SSL_set1_host(t->ssl, host) != 1)) {
		set_err(t, host);
		t->failed = 1;
		return DLOCK_ETLS;
	}
	return 0;
}

/* Move what OpenSSL wrote into t->out. */
static int take(struct dlock__tls *t)
{
	size_t n = BIO_ctrl_pending(t->wbio), cap;
	char *p;

	if (n == 0)
		return 0;
	if (t->out_off > 0 && t->out_off == t->out_len)
		t->out_off = t->out_len = 0;
	if (t->out_len + n > t->out_cap) {
		cap = t->out_cap ? t->out_cap : 4096;
		while (cap < t->out_len + n)
			cap *= 2;
		if (!(p = realloc(t->out, cap)))
			return DLOCK_ENOMEM;
		t->out = p;
		t->out_cap = cap;
	}
	t->out_len += (size_t)BIO_read(t->wbio, t->out + t->out_len, (int)n);
	return 0;
}

/* Send what the kernel takes of t->out; -1 (errno set) if the socket
 * failed. */
static int send_out(struct dlock_client *c)
{
	struct dlock__tls *t = c->conn.tls;
	ssize_t n;

	while (t->out_off < t->out_len) {
		n = send(c->conn.fd, t->out + t->out_off,
			 t->out_len - t->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			t->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		return -1;
	}
	t->out_off = t->out_len = 0;
	return 0;
}

/* Ciphertext from the socket into rbio: 1 if some came, 0 if none yet
 * (EAGAIN), -1 on end of file or an error (errno). */
static int pull(struct dlock_client *c)
{
	char buf[DLOCK__TLS_RECV];
	ssize_t n;

	for (;;) {
		n = recv(c->conn.fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0) {
			if (n == 0)
				errno = ECONNRESET;
			return -1;
		}
		if (BIO_write(c->conn.tls->rbio, buf, (int)n) != (int)n) {
			errno = ENOMEM;
			return -1;
		}
		return 1;
	}
}

int dlock__tls_handshake(struct dlock_client *c)
{
	struct dlock__tls *t = c->conn.tls;
	int r, e;

	for (;;) {
		ERR_clear_error();
		r = SSL_do_handshake(t->ssl);
		if (take(t) < 0 || send_out(c) < 0) {
			set_err(t, "handshake");
			t->failed = 1;
			return DLOCK_ETLS;
		}
		if (r == 1) {
			t->open = 1;
			return 0;
		}
		e = SSL_get_error(t->ssl, r);
		if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
			set_err(t, "handshake");
			t->failed = 1;
			return DLOCK_ETLS;
		}
		r = pull(c);
		if (r == 0)
			return 1; /* poll, then again */
		if (r < 0) {
			set_err(t, "handshake");
			t->failed = 1;
			return DLOCK_ETLS;
		}
	}
}

int dlock__tls_failed(const struct dlock_client *c)
{
	return c->conn.tls && c->conn.tls->failed;
}

const char *dlock__tls_error(const struct dlock_client *c)
{
	return c->conn.tls ? c->conn.tls->err : "";
}

/* ---- the transport ------------------------------------------------------ */

ssize_t dlock__io_read(struct dlock_client *c, char *buf, size_t n)
{
	struct dlock__tls *t = c->conn.tls;
	size_t got = 0;
	int r, e;

	if (!t)
		return read(c->conn.fd, buf, n);
	for (;;) {
		ERR_clear_error();
		r = SSL_read_ex(t->ssl, buf, n, &got);
		/* an alert or a key update may want an answer */
		if (take(t) < 0 || send_out(c) < 0)
			c->conn.wfail = 1;
		if (r == 1)
			return (ssize_t)got;
		e = SSL_get_error(t->ssl, r);
		if (e == SSL_ERROR_ZERO_RETURN)
			return 0; /* close_notify: the end of the stream */
		if (e != SSL_ERROR_WANT_READ) {
			set_err(t, "connection");
			t->failed = 1;
			errno = EPROTO;
			return -1;
		}
		if ((r = pull(c)) <= 0) {
			if (r == 0)
				errno = EAGAIN;
			return -1;
		}
	}
}

void dlock__tls_flush(struct dlock_client *c)
{
	struct dlock__tls *t = c->conn.tls;
	size_t done = 0;

	if (c->conn.fd < 0 || !t->ssl)
		return;
	if (t->open && c->conn.out_off < c->conn.out_len) {
		ERR_clear_error();
		if (SSL_write_ex(t->ssl, c->conn.out + c->conn.out_off,
				 c->conn.out_len - c->conn.out_off,
				 &done) != 1) {
			set_err(t, "write");
			t->failed = 1;
			c->conn.wfail = 1;
			return;
		}
		c->conn.out_off = c->conn.out_len = 0;
	}
	if (take(t) < 0 || send_out(c) < 0)
		c->conn.wfail = 1; /* the thread sees it and disconnects */
}

int dlock__io_pending(const struct dlock_client *c)
{
	return c->conn.out_len > c->conn.out_off ||
	       (c->conn.tls && c->conn.tls->out_len > c->conn.tls->out_off);
}

void dlock__io_close(struct dlock_client *c)
{
	struct dlock__tls *t = c->conn.tls;

	if (t && t->ssl) {
		/* a goodbye if the kernel takes it now; no wait for theirs */
		if (t->open && !t->failed && c->conn.fd >= 0) {
			ERR_clear_error();
			SSL_shutdown(t->ssl);
			if (take(t) == 0)
				(void)send_out(c);
		}
		ERR_clear_error();
		SSL_free(t->ssl);
		t->ssl = NULL;
		t->open = 0;
		t->out_off = t->out_len = 0;
	}
	if (c->conn.fd >= 0)
		close(c->conn.fd);
	c->conn.fd = -1;
}
