/* SPDX-License-Identifier: MIT */
/*
 * test_tls.c -- TLS between clients and a real dlockd: the daemon's TCP
 * port and metrics page, libdlock, the dlock command.
 *
 * Certificates are made for each test with the openssl command in its own
 * directory (make_certs): a CA, server certificates for 127.0.0.1 and
 * localhost (a second one for reloads, one with the DNS name only, an
 * expired one), a client certificate (CN=alice), another CA and a client
 * certificate it signed. The raw TLS client below (struct tc) speaks the
 * line protocol over OpenSSL on a blocking socket, so that a test sees
 * exactly what the daemon sends.
 */
#include <criterion/criterion.h>

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/lib/dlock.h"
#include "tests/harness.h"

static struct h_daemon d, d2;
static struct h_redis rs;
static char certs[H_DIR_MAX];

/* ---- certificates ------------------------------------------------------- */

static const char cert_script[] =
	"set -e; cd '%s'\n"
	"ec='-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes'\n"
	"ca() { openssl req -x509 $ec -keyout $1.key -out $1.pem -days 30 "
	"-subj \"/CN=$2\"; }\n"
	/* leaf NAME CN CA DAYS SAN */
	"leaf() { openssl req $ec -keyout $1.key -out $1.csr -subj \"/CN=$2\"\n"
	"  printf 'subjectAltName=%%s\\n' \"$5\" > $1.ext\n"
	"  openssl x509 -req -in $1.csr -CA $3.pem -CAkey $3.key "
	"-CAcreateserial -days $4 -extfile $1.ext -out $1.pem; }\n"
	"ca ca 'dlockd test CA'; ca wrongca 'another CA'\n"
	"both='DNS:localhost,IP:127.0.0.1'\n"
	"leaf server dlockd-1 ca 30 $both; leaf server2 dlockd-2 ca 30 $both\n"
	"leaf dnsonly dlockd-dns ca 30 DNS:localhost\n"
	"leaf expired dlockd-old ca -1 $both\n"
	"leaf client alice ca 30 DNS:alice.example\n"
	"leaf stranger mallory wrongca 30 DNS:mallory.example\n";

static void make_certs(void)
{
	char script[2048], cmd[H_PATH_MAX + 32];
	FILE *f;

	snprintf(certs, sizeof(certs), "/tmp/dlockd-test-tls-XXXXXX");
	cr_assert(mkdtemp(certs) != NULL);
	snprintf(script, sizeof(script), cert_script, certs);
	snprintf(cmd, sizeof(cmd), "%s/make.sh", certs);
	f = fopen(cmd, "w");
	cr_assert(f != NULL);
	fputs(script, f);
	fclose(f);
	snprintf(cmd, sizeof(cmd), "sh %s/make.sh >/dev/null 2>&1", certs);
	cr_assert_eq(system(cmd), 0, "openssl could not make the certs");
}

/* A file of the certificate directory (static buffer, 8 in rotation). */
static const char *cf(const char *name)
{
	static char bufs[8][H_PATH_MAX];
	static int k;
	char *b = bufs[k++ % 8];

	snprintf(b, H_PATH_MAX, "%s/%s", certs, name);
	return b;
}

static void init(void)
{
	signal(SIGPIPE, SIG_IGN);
	make_certs();
}

static void fini(void)
{
	char cmd[H_DIR_MAX + 16];

	/* a clean exit, sanitizers included */
	if (d.pid > 0)
		cr_expect_eq(h_daemon_stop(&d), 0);
	h_daemon_cleanup(&d);
	if (d2.pid > 0)
		cr_expect_eq(h_daemon_stop(&d2), 0);
	h_daemon_cleanup(&d2);
	if (rs.pid)
		h_redis_stop(&rs);
	if (rs.dir[0])
		h_redis_cleanup(&rs);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certs);
	if (certs[0] && system(cmd) != 0)
		cr_log_warn("could not remove %s", certs);
}

TestSuite(tls, .init = init, .fini = fini, .timeout = 60);

/* dlockd --persist none with TLS (server.pem) and the extra arguments. */
#define start_tls(dm, ...)                                                     \
	h_daemon_start((dm), "--persist", "none", "-l", "info", "--tls-cert",  \
		       cf("server.pem"), "--tls-key", cf("server.key"),        \
		       ##__VA_ARGS__, NULL)

/* ---- a raw TLS client --------------------------------------------------- */

struct tc {
	int fd;
	SSL_CTX *ctx;
	SSL *ssl;
	struct dl_linebuf lb;
	char line[DL_LINE_MAX + 1];
	char err[256]; /* why tc_open failed */
};

/* Connect to port, verify the server against ca.pem and `name`, with an
 * optional client certificate (files in the certificate directory). NULL
 * when the handshake fails: *why says why. */
static struct tc *tc_open(int port, const char *name, const char *cert,
			  char *why, size_t whylen)
{
	struct tc *t = calloc(1, sizeof(*t));
	struct h_client *raw = h_connect(port);
	char file[64];
	int r;

	cr_assert(t != NULL);
	t->fd = dup(raw->fd);
	h_close(raw);
	dl_linebuf_init(&t->lb);
	t->ctx = SSL_CTX_new(TLS_client_method());
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	cr_assert(SSL_CTX_load_verify_locations(t->ctx, cf("ca.pem"), NULL));
	if (cert) {
		snprintf(file, sizeof(file), "%s.pem", cert);
		cr_assert(SSL_CTX_use_certificate_file(t->ctx, cf(file),
						       SSL_FILETYPE_PEM));
		snprintf(file, sizeof(file), "%s.key", cert);
		cr_assert(SSL_CTX_use_PrivateKey_file(t->ctx, cf(file),
						      SSL_FILETYPE_PEM));
	}
	t->ssl = SSL_new(t->ctx);
	SSL_set1_host(t->ssl, name);
	SSL_set_fd(t->ssl, t->fd);
	r = SSL_connect(t->ssl);
	if (r != 1) {
		snprintf(why, whylen, "%s",
			 ERR_reason_error_string(ERR_peek_last_error()));
		SSL_free(t->ssl);
		SSL_CTX_free(t->ctx);
		close(t->fd);
		free(t);
		return NULL;
	}
	return t;
}

static struct tc *tc_connect(int port)
{
	char why[256] = "";
	struct tc *t = tc_open(port, "127.0.0.1", NULL, why, sizeof(why));

	cr_assert(t != NULL, "TLS handshake: %s", why);
	return t;
}

static void tc_close(struct tc *t)
{
	SSL_free(t->ssl);
	SSL_CTX_free(t->ctx);
	close(t->fd);
	free(t);
}

static void tc_write(struct tc *t, const void *p, size_t n)
{
	size_t done = 0;

	cr_assert(SSL_write_ex(t->ssl, p, n, &done) == 1 && done == n,
		  "SSL_write failed");
}

static void tc_send(struct tc *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void tc_send(struct tc *t, const char *fmt, ...)
{
	char buf[DL_LINE_MAX + 3];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 2, fmt, ap);
	va_end(ap);
	memcpy(buf + n, "\r\n", 2);
	tc_write(t, buf, (size_t)n + 2);
}

/* Next line within timeout_ms, or NULL (EOF, error, timeout). *eof (if
 * not NULL) says whether the stream ended with close_notify (1), or
 * otherwise (-1). */
static char *tc_read_eof(struct tc *t, int timeout_ms, int *eof)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;
	struct pollfd p = {.fd = t->fd, .events = POLLIN};
	char *line, *space;
	size_t len, avail, n;
	int r;

	for (;;) {
		if (dl_linebuf_next(&t->lb, &line, &len) == DL_LB_LINE) {
			memcpy(t->line, line, len + 1);
			return t->line;
		}
		if (!SSL_pending(t->ssl) &&
		    poll(&p, 1,
			 (int)(end > h_now_ms() ? end - h_now_ms() : 0)) <= 0)
			return NULL;
		space = dl_linebuf_space(&t->lb, &avail);
		r = SSL_read_ex(t->ssl, space, avail, &n);
		if (r != 1) {
			if (eof)
				*eof = SSL_get_error(t->ssl, r) ==
						       SSL_ERROR_ZERO_RETURN
					       ? 1
					       : -1;
			return NULL;
		}
		dl_linebuf_commit(&t->lb, n);
	}
}

static char *tc_read(struct tc *t, int timeout_ms)
{
	return tc_read_eof(t, timeout_ms, NULL);
}

static char *tc_call(struct tc *t, const char *req)
{
	char *line;

	tc_send(t, "%s", req);
	line = tc_read(t, 5000);
	cr_assert(line != NULL, "no reply to %s", req);
	return line;
}

/* The server certificate's CN and serial (hex) on this connection. */
static void tc_cert(struct tc *t, char *cn, size_t cnlen, char *serial,
		    size_t slen)
{
	X509 *x = SSL_get0_peer_certificate(t->ssl);
	BIGNUM *bn;
	char *hex;

	cr_assert(x != NULL);
	X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, cn,
				  (int)cnlen);
	bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	hex = BN_bn2hex(bn);
	snprintf(serial, slen, "%s", hex);
	OPENSSL_free(hex);
	BN_free(bn);
}

/* ---- libdlock ------------------------------------------------------------ */

static void tls_opts(struct dlock_options *o, int port, const char *ca)
{
	dlock_options_init(o);
	o->port = port;
	o->tls_ca = cf(ca);
}

/* dlock_connect's code, and its dlock_last_error() in *err. */
static int try_connect(const struct dlock_options *o, dlock_client **c,
		       char *err, size_t errlen)
{
	int rc = dlock_connect(o, c);

	snprintf(err, errlen, "%s", dlock_last_error());
	return rc;
}

static void expect_refused(const struct dlock_options *o, const char *needle)
{
	dlock_client *c = NULL;
	char err[512];
	int rc = try_connect(o, &c, err, sizeof(err));

	cr_assert_eq(rc, DLOCK_ETLS, "dlock_connect: %s (%s)",
		     dlock_strerror(rc), err);
	cr_assert(c == NULL);
	cr_assert(strstr(err, needle) != NULL, "\"%s\" does not say \"%s\"",
		  err, needle);
}

/* ---- the TCP port ------------------------------------------------------- */

Test(tls, lock_and_unlock_work_over_tls_from_a_raw_client_and_libdlock)
{
	struct dlock_options o;
	dlock_client *c;
	dlock_lease *l;
	struct tc *t;
	char *line, cn[64], serial[64];
	uint64_t token;

	start_tls(&d);
	t = tc_connect(d.port);
	tc_cert(t, cn, sizeof(cn), serial, sizeof(serial));
	cr_assert_str_eq(cn, "dlockd-1");
	cr_assert_str_eq(tc_call(t, "PING"), "OK PONG");
	line = tc_call(t, "LOCK a ttl=10s");
	cr_assert(h_starts(line, "OK GRANTED a "), "%s", line);
	token = h_arg_u64(line, 1);
	tc_send(t, "CHECK a %llu", (unsigned long long)token);
	line = tc_read(t, 5000);
	cr_assert(line && h_starts(line, "OK VALID a "), "%s", line);
	tc_send(t, "UNLOCK a %llu", (unsigned long long)token);
	line = tc_read(t, 5000);
	cr_assert(line && strcmp(line, "OK RELEASED a") == 0, "%s", line);
	tc_close(t);

	tls_opts(&o, d.port, "ca.pem");
	cr_assert_eq(dlock_connect(&o, &c), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_lock(c, "b", 10000, 0, &l), 0);
	cr_assert(dlock_lease_valid(l));
	cr_assert_eq(dlock_unlock(c, l), 0);
	dlock_close(c);
	cr_assert(h_daemon_log_wait(&d, "TLS handshake done (TLSv1.3", 2000));
}

Test(tls, plaintext_or_garbage_on_the_tls_port_is_closed_with_a_notice)
{
	static const char junk[] = "\x16\x03\x01\x00\x05hello, this is not TLS";
	struct h_client *plain, *bad;
	struct tc *t;
	char buf[256];
	ssize_t n, total = 0;

	start_tls(&d);
	plain = h_connect(d.port);
	h_send(plain, "PING");
	/* nothing of the protocol comes back, and the connection ends */
	while ((n = read(plain->fd, buf + total,
			 sizeof(buf) - 1 - (size_t)total)) > 0)
		total += n;
	buf[total] = '\0';
	cr_assert(strstr(buf, "PONG") == NULL, "a plaintext reply: %s", buf);
	h_close(plain);
	bad = h_connect(d.port);
	cr_assert_eq(h_send_raw(bad, junk, sizeof(junk) - 1), 0);
	cr_assert(h_wait_closed(bad, 3000), "garbage kept the connection");
	h_close(bad);
	cr_assert(h_daemon_log_wait(&d, "TLS handshake failed: ", 2000));
	cr_assert(h_daemon_log_has(&d, " N conn "), "not at notice level");
	/* the daemon serves the next client as ever */
	t = tc_connect(d.port);
	cr_assert_str_eq(tc_call(t, "PING"), "OK PONG");
	tc_close(t);
}

/* The unix socket is protected by its file mode: it stays plaintext. */
Test(tls, the_unix_socket_stays_plaintext)
{
	struct h_client *c;
	char path[H_PATH_MAX];

	snprintf(path, sizeof(path), "%s/dlockd.sock", certs);
	start_tls(&d, "--unix-socket", path);
	c = h_connect_unix(path);
	cr_assert_str_eq(h_call(c, "PING"), "OK PONG");
	h_close(c);
}

Test(tls, quit_over_tls_ends_with_close_notify)
{
	struct tc *t;
	int eof = 0;

	start_tls(&d);
	t = tc_connect(d.port);
	cr_assert_str_eq(tc_call(t, "QUIT"), "OK BYE");
	cr_assert(tc_read_eof(t, 3000, &eof) == NULL);
	cr_assert_eq(eof, 1, "the stream ended without close_notify");
	tc_close(t);
}

Test(tls, a_client_that_never_handshakes_is_closed_after_the_timeout)
{
	struct h_client *silent;
	struct tc *t;
	uint64_t t0;

	h_daemon_write_conf(&d, "[tls]\nhandshake_timeout = 500ms\n");
	start_tls(&d, "-c", d.conf);
	t0 = h_now_ms();
	silent = h_connect(d.port);
	/* others are served meanwhile */
	t = tc_connect(d.port);
	cr_assert_str_eq(tc_call(t, "PING"), "OK PONG");
	cr_assert(h_wait_closed(silent, 3000), "still open after 3 s");
	cr_assert_geq(h_now_ms() - t0, 450, "closed before its time");
	cr_assert(h_daemon_log_wait(&d, "TLS handshake not done within 500ms",
				    1000));
	cr_assert_str_eq(tc_call(t, "PING"), "OK PONG");
	tc_close(t);
	h_close(silent);
}

/* Output the client does not read: the connection is paused, not cut,
 * and every reply arrives once it reads (max_output counts ciphertext). */
Test(tls, a_pipelining_client_is_slowed_down_not_closed)
{
	enum { N = 10000 };
	static char reqs[N * 6];
	struct tc *t;
	char *line;
	int i, got = 0;

	h_daemon_write_conf(&d, "[limits]\nmax_output = 8192\n");
	start_tls(&d, "-c", d.conf);
	t = tc_connect(d.port);
	for (i = 0; i < N; i++)
		memcpy(reqs + i * 6, "PING\r\n", 6);
	tc_write(t, reqs, sizeof(reqs));
	while (got < N && (line = tc_read(t, 5000)) != NULL) {
		cr_assert_str_eq(line, "OK PONG", "reply %d: %s", got, line);
		got++;
	}
	cr_assert_eq(got, N);
	tc_close(t);
	cr_assert(h_daemon_log_has(&d, "output limit") == 0);
}

/* ---- what libdlock accepts ---------------------------------------------- */

Test(tls, libdlock_refuses_a_server_certificate_from_another_ca)
{
	struct dlock_options o;

	start_tls(&d);
	tls_opts(&o, d.port, "wrongca.pem");
	expect_refused(&o, "unable to get local issuer certificate");
}

Test(tls, libdlock_refuses_a_server_whose_certificate_lacks_its_name)
{
	struct dlock_options o;
	dlock_client *c;
	char err[512];

	start_tls(&d);
	tls_opts(&o, d.port, "ca.pem");
	o.tls_server_name = "db.example";
	expect_refused(&o, "hostname mismatch");
	/* by IP address: the IP SAN is checked */
	h_daemon_start(&d2, "--persist", "none", "--tls-cert",
		       cf("dnsonly.pem"), "--tls-key", cf("dnsonly.key"), NULL);
	tls_opts(&o, d2.port, "ca.pem");
	expect_refused(&o, "IP address mismatch");
	o.host = "localhost"; /* its DNS name is in the certificate */
	cr_assert_eq(try_connect(&o, &c, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(dlock_ping(c), 0);
	dlock_close(c);
}

Test(tls, libdlock_refuses_an_expired_server_certificate)
{
	struct dlock_options o;

	h_daemon_start(&d, "--persist", "none", "--tls-cert", cf("expired.pem"),
		       "--tls-key", cf("expired.key"), NULL);
	cr_assert(h_daemon_log_has(&d, "(EXPIRED)"), "no warning at start");
	tls_opts(&o, d.port, "ca.pem");
	expect_refused(&o, "certificate has expired");
}

/* ---- client certificates ------------------------------------------------ */

Test(tls, verify_clients_refuses_a_client_without_a_trusted_certificate)
{
	struct dlock_options o;
	char why[256];

	h_daemon_write_conf(&d, "[tls]\nverify_clients = yes\n");
	start_tls(&d, "--tls-ca", cf("ca.pem"), "-c", d.conf);
	tls_opts(&o, d.port, "ca.pem");
	expect_refused(&o, "certificate required");
	cr_assert(h_daemon_log_wait(&d, "peer did not return a certificate",
				    2000));
	o.tls_cert = cf("stranger.pem");
	o.tls_key = cf("stranger.key");
	expect_refused(&o, "unknown ca");
	cr_assert(h_daemon_log_wait(
		&d, "unable to get local issuer certificate", 2000));
	/* a raw client without one learns nothing of the protocol */
	struct tc *t = tc_open(d.port, "127.0.0.1", NULL, why, sizeof(why));
	if (t) { /* TLS 1.3: the client's side ends before the refusal */
		tc_send(t, "PING");
		cr_assert(tc_read(t, 3000) == NULL);
		tc_close(t);
	}
}

Test(tls, a_verified_client_certificate_names_the_connection)
{
	struct dlock_options o;
	dlock_client *c;
	dlock_lease *l;
	struct tc *t;
	char why[256];

	h_daemon_write_conf(&d, "[tls]\nverify_clients = yes\n");
	start_tls(&d, "--tls-ca", cf("ca.pem"), "-c", d.conf);
	tls_opts(&o, d.port, "ca.pem");
	o.tls_cert = cf("client.pem");
	o.tls_key = cf("client.key");
	cr_assert_eq(dlock_connect(&o, &c), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_lock(c, "n", 10000, 0, &l), 0);
	cr_assert_eq(dlock_unlock(c, l), 0);
	dlock_close(c);
	cr_assert(
		h_daemon_log_wait(&d, " cert=alice: TLS handshake done", 2000));
	t = tc_open(d.port, "localhost", "client", why, sizeof(why));
	cr_assert(t != NULL, "%s", why);
	cr_assert_str_eq(tc_call(t, "PING"), "OK PONG");
	tc_close(t);
}

/* With a users file, a verified certificate's name is the user: no AUTH,
 * and its grants apply; a connection without one must AUTH. */
Test(tls, a_verified_client_certificate_is_its_user)
{
	struct tc *t;
	char why[256], conf[512];
	const char *users = h_daemon_write_file(
		&d, "users", "alice uid=4242 lock=a/ read=a/\n");

	snprintf(conf, sizeof(conf), "[server]\nusers_file = %s\n", users);
	h_daemon_write_conf(&d, conf);
	start_tls(&d, "--tls-ca", cf("ca.pem"), "-c", d.conf);
	t = tc_open(d.port, "127.0.0.1", "client", why, sizeof(why));
	cr_assert(t != NULL, "%s", why);
	cr_assert(strncmp(tc_call(t, "LOCK a/1 ttl=5s"), "OK GRANTED a/1 ",
			  15) == 0);
	cr_assert_str_eq(tc_call(t, "LOCK b/1"), "NO DENIED b/1 need=lock");
	tc_close(t);
	t = tc_connect(d.port);
	cr_assert(strncmp(tc_call(t, "LOCK a/2"), "ERR NOAUTH ", 11) == 0);
	tc_close(t);
}

/* With ca but not verify_clients, a certificate is optional: the name of
 * one that verifies is seen, a client without one is served. */
Test(tls, without_verify_clients_a_certificate_is_optional)
{
	struct tc *t;
	char why[256];

	start_tls(&d, "--tls-ca", cf("ca.pem"));
	t = tc_connect(d.port);
	cr_assert_str_eq(tc_call(t, "PING"), "OK PONG");
	tc_close(t);
	t = tc_open(d.port, "127.0.0.1", "client", why, sizeof(why));
	cr_assert(t != NULL, "%s", why);
	cr_assert_str_eq(tc_call(t, "PING"), "OK PONG");
	tc_close(t);
	cr_assert(
		h_daemon_log_wait(&d, " cert=alice: TLS handshake done", 2000));
}

/* ---- reload and configuration ------------------------------------------- */

static void copy_file(const char *from, const char *to)
{
	char cmd[3 * H_PATH_MAX];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", from, to);
	cr_assert_eq(system(cmd), 0);
}

static void open_cert(int port, char *cn, char *serial)
{
	struct tc *t = tc_connect(port);

	tc_cert(t, cn, 64, serial, 64);
	cr_assert_str_eq(tc_call(t, "PING"), "OK PONG");
	tc_close(t);
}

Test(tls, sighup_gives_new_connections_the_new_certificate)
{
	char cn[64], serial1[64], serial2[64], serial[64];
	struct tc *old;
	FILE *f;

	copy_file(cf("server.pem"), cf("cur.pem"));
	copy_file(cf("server.key"), cf("cur.key"));
	h_daemon_start(&d, "--persist", "none", "--tls-cert", cf("cur.pem"),
		       "--tls-key", cf("cur.key"), NULL);
	old = tc_connect(d.port);
	open_cert(d.port, cn, serial1);
	cr_assert_str_eq(cn, "dlockd-1");
	copy_file(cf("server2.pem"), cf("cur.pem"));
	copy_file(cf("server2.key"), cf("cur.key"));
	h_daemon_signal(&d, SIGHUP);
	cr_assert(h_daemon_log_wait(&d, "reload: TLS certificate", 3000));
	open_cert(d.port, cn, serial2);
	cr_assert_str_eq(cn, "dlockd-2");
	cr_assert(strcmp(serial1, serial2) != 0, "same serial %s", serial1);
	cr_assert_str_eq(tc_call(old, "PING"), "OK PONG");
	/* a file that does not load: the last good one stays */
	f = fopen(cf("cur.pem"), "w");
	cr_assert(f != NULL);
	fputs("-----BEGIN CERTIFICATE-----\nnot one\n", f);
	fclose(f);
	h_daemon_signal(&d, SIGHUP);
	cr_assert(h_daemon_log_wait(&d, "keeping the certificate loaded before",
				    3000));
	open_cert(d.port, cn, serial);
	cr_assert_str_eq(cn, "dlockd-2");
	cr_assert_str_eq(serial, serial2);
	tc_close(old);
}

/* dlockd --check-config ARGS...: its exit status, its stderr in err. */
static int check_config(char *err, size_t errlen, const char *args)
{
	const char *bin = getenv("DLOCKD");
	char cmd[1024], out[H_PATH_MAX];
	FILE *f;
	size_t n = 0;
	int st;

	snprintf(out, sizeof(out), "%s/check.err", certs);
	snprintf(cmd, sizeof(cmd), "%s --check-config %s >/dev/null 2>'%s'",
		 bin && bin[0] ? bin : "build/dlockd", args, out);
	st = system(cmd);
	if ((f = fopen(out, "r"))) {
		n = fread(err, 1, errlen - 1, f);
		fclose(f);
	}
	err[n] = '\0';
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(tls, check_config_loads_the_files_and_matches_key_and_certificate)
{
	char args[1024], err[1024];

	snprintf(args, sizeof(args), "--tls-cert %s --tls-key %s --tls-ca %s",
		 cf("server.pem"), cf("server.key"), cf("ca.pem"));
	cr_assert_eq(check_config(err, sizeof(err), args), 0, "%s", err);
	snprintf(args, sizeof(args), "--tls-cert %s --tls-key %s",
		 cf("server.pem"), cf("client.key"));
	cr_assert_eq(check_config(err, sizeof(err), args), 3);
	cr_assert(strstr(err, "does not match") != NULL, "%s", err);
	snprintf(args, sizeof(args), "--tls-cert %s --tls-key %s",
		 cf("nothing.pem"), cf("server.key"));
	cr_assert_eq(check_config(err, sizeof(err), args), 3);
	cr_assert(strstr(err, "nothing.pem") != NULL, "%s", err);
}

/* ---- the metrics page --------------------------------------------------- */

/* GET /metrics over TLS; the whole response (static buffer). */
static const char *tls_scrape(int port)
{
	static char page[1 << 17];
	struct tc *t = tc_connect(port);
	size_t n, len = 0;

	tc_send(t, "GET /metrics HTTP/1.1\r\nHost: x\r\n");
	while (len < sizeof(page) - 1 &&
	       SSL_read_ex(t->ssl, page + len, sizeof(page) - 1 - len, &n) == 1)
		len += n;
	page[len] = '\0';
	tc_close(t);
	return page;
}

/* GET /metrics in plaintext: the status line, or "" (static buffer). */
static const char *scrape(int port)
{
	static char buf[4096];
	struct h_client *c = h_connect(port);
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	ssize_t n = -1;

	h_send_raw(c, "GET /metrics HTTP/1.0\r\n\r\n", 25);
	if (poll(&p, 1, 3000) == 1)
		n = read(c->fd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	*strchrnul(buf, '\r') = '\0';
	h_close(c);
	return buf;
}

Test(tls, metrics_are_served_over_tls_when_tls_is_configured)
{
	const char *page;
	char conf[128];
	int mport = h_free_port();

	snprintf(conf, sizeof(conf), "[metrics]\nlisten = 127.0.0.1:%d\n",
		 mport);
	h_daemon_write_conf(&d, conf);
	start_tls(&d, "-c", d.conf);
	page = tls_scrape(mport);
	cr_assert(h_starts(page, "HTTP/1.1 200 OK\r\n"), "%.80s", page);
	cr_assert(strstr(page, "\ndlockd_tls_handshakes_total ") != NULL);
	cr_assert_str_eq(scrape(mport), "", "plaintext answered");
	cr_assert(h_daemon_log_has(&d, "metrics on https://"));
}

/* ---- the dlock command -------------------------------------------------- */

/* Run `sh -c cmd` with DLOCK=$DLOCK; its exit status and stderr. */
static int run_dlock(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int run_dlock(char *err, size_t errlen, const char *fmt, ...)
{
	const char *bin = getenv("DLOCK");
	char cmd[2048], out[H_PATH_MAX];
	va_list ap;
	FILE *f;
	size_t n = 0;
	int st, k;

	k = snprintf(cmd, sizeof(cmd), "DLOCK='%s'; ",
		     bin && bin[0] ? bin : "build/dlock");
	va_start(ap, fmt);
	k += vsnprintf(cmd + k, sizeof(cmd) - (size_t)k, fmt, ap);
	va_end(ap);
	snprintf(out, sizeof(out), "%s/dlock.err", certs);
	snprintf(cmd + k, sizeof(cmd) - (size_t)k, " >/dev/null 2>'%s'", out);
	st = system(cmd);
	if ((f = fopen(out, "r"))) {
		n = fread(err, 1, errlen - 1, f);
		fclose(f);
	}
	err[n] = '\0';
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(tls, the_dlock_command_speaks_tls_from_flags_and_environment)
{
	char err[1024];

	h_daemon_write_conf(&d, "[tls]\nverify_clients = yes\n");
	start_tls(&d, "--tls-ca", cf("ca.pem"), "-c", d.conf);
	cr_assert_eq(run_dlock(err, sizeof(err),
			       "$DLOCK --port %d --tls-ca %s --tls-cert %s "
			       "--tls-key %s lock x --ttl 10s",
			       d.port, cf("ca.pem"), cf("client.pem"),
			       cf("client.key")),
		     0, "%s", err);
	cr_assert_eq(run_dlock(err, sizeof(err),
			       "DLOCK_TLS_CA=%s DLOCK_TLS_CERT=%s "
			       "DLOCK_TLS_KEY=%s $DLOCK --port %d status x",
			       cf("ca.pem"), cf("client.pem"), cf("client.key"),
			       d.port),
		     0, "%s", err);
	cr_assert_eq(run_dlock(err, sizeof(err),
			       "DLOCK_TLS_CA=%s $DLOCK --port %d ping",
			       cf("wrongca.pem"), d.port),
		     69);
	cr_assert(strstr(err, "certificate verify failed") != NULL, "%s", err);
	cr_assert_eq(
		run_dlock(err, sizeof(err),
			  "$DLOCK --port %d --tls-ca %s --tls-cert %s ping",
			  d.port, cf("ca.pem"), cf("client.pem")),
		64);
	cr_assert(strstr(err, "go together") != NULL, "%s", err);
}

/* ---- reconnects and fail-over ------------------------------------------- */

Test(tls, libdlock_reconnects_over_tls_and_keeps_its_lease, .timeout = 90)
{
	struct dlock_options o;
	struct dlock_status st;
	dlock_client *c;
	dlock_lease *l;
	uint64_t token;

	h_redis_start(&rs, "always");
	h_daemon_start(&d, "--persist", "redis", "--redis", rs.url,
		       "--tls-cert", cf("server.pem"), "--tls-key",
		       cf("server.key"), NULL);
	tls_opts(&o, d.port, "ca.pem");
	cr_assert_eq(dlock_connect(&o, &c), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_lock(c, "kept", 6000, 0, &l), 0);
	token = dlock_lease_token(l);
	cr_assert_eq(h_daemon_stop(&d), 0);
	h_daemon_restart(&d);
	h_sleep_ms(3000); /* past a renewal (TTL/3), over a new connection */
	cr_assert(dlock_lease_valid(l), "the lease was lost");
	cr_assert_eq(dlock_status(c, "kept", &st), 0);
	cr_assert(st.held && st.token == token, "held %d token %llu", st.held,
		  (unsigned long long)st.token);
	cr_assert_eq(dlock_unlock(c, l), 0);
	dlock_close(c);
}

Test(tls, libdlock_follows_a_failover_between_tls_daemons, .timeout = 90)
{
	struct dlock_options o;
	struct dlock_status st;
	dlock_client *c;
	dlock_lease *l;
	char servers[64];
	uint64_t token;

	h_redis_start(&rs, "always");
	h_daemon_start(&d, "--persist", "redis", "--redis", rs.url, "--node-id",
		       "a", "--leader-lease", "1s", "--tls-cert",
		       cf("server.pem"), "--tls-key", cf("server.key"), NULL);
	h_daemon_start(&d2, "--persist", "redis", "--redis", rs.url,
		       "--node-id", "b", "--leader-lease", "1s", "--tls-cert",
		       cf("server.pem"), "--tls-key", cf("server.key"), NULL);
	tls_opts(&o, 0, "ca.pem");
	/* the standby first: the client finds the active itself */
	snprintf(servers, sizeof(servers), "127.0.0.1:%d,127.0.0.1:%d", d2.port,
		 d.port);
	o.servers = servers;
	o.owner = "failover";
	cr_assert_eq(dlock_connect(&o, &c), 0, "%s", dlock_last_error());
	cr_assert_eq(dlock_lock(c, "f", 9000, 0, &l), 0);
	token = dlock_lease_token(l);
	h_daemon_kill9(&d);
	cr_assert(h_daemon_log_wait(&d2, "took over the leadership", 10000));
	h_sleep_ms(4000); /* past a renewal at the new active */
	cr_assert(dlock_lease_valid(l), "the lease was lost");
	cr_assert_eq(dlock_status(c, "f", &st), 0);
	cr_assert(st.held && st.token == token, "held %d token %llu", st.held,
		  (unsigned long long)st.token);
	cr_assert_eq(dlock_unlock(c, l), 0);
	dlock_close(c);
}
