/* SPDX-License-Identifier: MIT */
/*
 * tls.h -- TLS for the daemon's TCP clients and its metrics page (OpenSSL).
 *
 * Owns the server's TLS context (struct dl_tls: certificate, key, the CA
 * of client certificates; replaced whole by a SIGHUP reload) and each
 * connection's TLS state (struct dl_tls_conn: an SSL object between two
 * memory BIOs).
 *
 * OpenSSL never touches a socket. A connection (conn.c, metrics.c) reads
 * ciphertext from its libuv stream into dl_tls_feed(), takes plaintext out
 * of dl_tls_read() into the buffer its codec reads, and turns its plaintext
 * output into ciphertext with dl_tls_seal() just before it writes; the
 * bytes then take the path plaintext would have taken (uv_try_write, then
 * uv_write for what the kernel does not take). So the loop keeps its one
 * way of doing I/O, TLS costs no thread and no blocking call, and the codec
 * and the lock table never know TLS exists -- the way libuv servers (Node,
 * H2O, BIND 9) run TLS.
 *
 * Invariants:
 *   - nothing but handshake records goes out before the handshake is done:
 *     plaintext sealed earlier is dropped (no request has been read yet, so
 *     the only such lines are goodbyes to a peer that cannot read them);
 *   - after a TLS error (a peer speaking something else, a certificate
 *     refused) a connection reads nothing more and sends only what OpenSSL
 *     queued (its alert); the caller logs dl_tls_error() and closes;
 *   - a connection keeps the context it was accepted with (SSL_new takes a
 *     reference), so a reload changes what new connections get, never an
 *     open one; the old context is freed with its last connection.
 *
 * Settings: TLS 1.2 at least, OpenSSL's default ciphers and groups, no
 * compression, no renegotiation (a client cannot make the daemon redo a
 * handshake), no session tickets or cache (libdlock does not resume, and
 * nothing has to keep ticket keys across reloads).
 *
 * Client certificates: with [tls] ca set, the daemon asks for one and
 * verifies any it gets against ca; verify_clients makes it required. The
 * name of a verified certificate (dl_tls_peer_name) is its subject's
 * common name (CN), or, without one, its first DNS subject alternative
 * name: the name the certificate was issued to, where the access control
 * of users will look for a user.
 */
#ifndef DL_SERVER_TLS_H
#define DL_SERVER_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "server/buf.h"

struct dl_config;
struct dl_tls;
struct dl_tls_conn;

/* A certificate name longer than this (or with bytes outside printable
 * ASCII, a space or '=') is not used as a peer name. */
#define DL_TLS_NAME_MAX 64
/* Bytes of a TLS error description (dl_tls_error). */
#define DL_TLS_ERR_MAX 200

/* 1 if the configuration asks for TLS ([tls] cert is set). */
int dl_tls_enabled(const struct dl_config *cfg);

/* Load cfg's certificate, key and CA into a new context. DL_EBADARG with
 * `err` saying which file and why. *out is freed with dl_tls_free(). */
int dl_tls_new(const struct dl_config *cfg, struct dl_tls **out, char *err,
	       size_t errlen);
/* --check-config: the files load and the key matches the certificate. */
int dl_tls_check(const struct dl_config *cfg, char *err, size_t errlen);
/* Load cfg's files again into a new context for new connections; on
 * failure the old one stays and `err` says why. */
int dl_tls_reload(struct dl_tls *t, const struct dl_config *cfg, char *err,
		  size_t errlen);
/* "subject CN=..., serial 1A2B, expires Mar  1 12:00:00 2027 GMT". */
void dl_tls_describe_cert(const struct dl_tls *t, char *buf, size_t len);
void dl_tls_free(struct dl_tls *t);

/* ---- one connection ------------------------------------------------------ */

enum dl_tls_state {
	DL_TLS_HANDSHAKE = 0, /* accepted, handshake not done */
	DL_TLS_OPEN,	      /* application data flows */
	DL_TLS_FAILED,	      /* a TLS error: close (dl_tls_error says why) */
};

/* A server-side TLS connection on t's current context; `now` (ms, the
 * caller's clock) starts its handshake time (dl_tls_since). */
int dl_tls_conn_new(struct dl_tls *t, uint64_t now, struct dl_tls_conn **out);
/* NULL is a no-op. */
void dl_tls_conn_free(struct dl_tls_conn *tc);

/* Where to read ciphertext from the socket (libuv's alloc callback): one
 * buffer shared by every connection of the loop, as each read is fed with
 * dl_tls_feed() within its own read callback. */
char *dl_tls_rbuf(size_t *len);

/* Ciphertext read from the peer. DL_ENOMEM. */
int dl_tls_feed(struct dl_tls_conn *tc, const char *p, size_t n);
/* Up to cap bytes of plaintext into buf; *got 0 means nothing more until
 * more ciphertext comes (or the peer said close_notify: dl_tls_peer_closed).
 * Advances the handshake. DL_EPROTO on a TLS error (the state is then
 * FAILED and dl_tls_error() says why). */
int dl_tls_read(struct dl_tls_conn *tc, char *buf, size_t cap, size_t *got);
/* Replace out's plaintext by the ciphertext to send: out's bytes are
 * encrypted (dropped unless the connection is OPEN), then every byte the
 * TLS engine has for the peer (handshake, records, alerts, close_notify)
 * is what out holds. DL_ENOMEM, DL_EPROTO. */
int dl_tls_seal(struct dl_tls_conn *tc, struct dl_buf *out);
/* Encrypt n bytes (OPEN only; dropped otherwise) without taking them out. */
int dl_tls_write(struct dl_tls_conn *tc, const char *p, size_t n);
/* Append what the TLS engine has for the peer to dst. DL_ENOMEM. */
int dl_tls_take(struct dl_tls_conn *tc, struct dl_buf *dst);
/* Ciphertext waiting for dl_tls_take/dl_tls_seal, in bytes. */
size_t dl_tls_pending(const struct dl_tls_conn *tc);
/* Queue close_notify once (an OPEN connection about to be closed); 1 if it
 * was queued now. */
int dl_tls_shutdown(struct dl_tls_conn *tc);

enum dl_tls_state dl_tls_state(const struct dl_tls_conn *tc);
/* 1 once the peer sent close_notify: it will send nothing more. */
int dl_tls_peer_closed(const struct dl_tls_conn *tc);
/* When the connection was made (dl_tls_conn_new's `now`). */
uint64_t dl_tls_since(const struct dl_tls_conn *tc);
/* The verified client certificate's name (see above), or NULL: no
 * certificate, or one whose name is not usable. Lives as long as tc. */
const char *dl_tls_peer_name(const struct dl_tls_conn *tc);
/* Why the connection FAILED ("" otherwise). Lives as long as tc. */
const char *dl_tls_error(const struct dl_tls_conn *tc);
/* "TLSv1.3 TLS_AES_256_GCM_SHA384" once OPEN. */
void dl_tls_describe(const struct dl_tls_conn *tc, char *buf, size_t len);

#endif /* DL_SERVER_TLS_H */
