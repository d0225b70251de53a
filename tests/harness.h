/* SPDX-License-Identifier: MIT */
/*
 * harness.h -- real parts for integration tests: a dlockd process, a
 * redis-server process, and line-protocol clients over TCP.
 *
 * Every process is started under its own temporary directory, on its own
 * port (TCP ports are found free by binding port 0 first) or unix socket,
 * dies with the test process (PR_SET_PDEATHSIG), and is stopped by PID.
 * Failures are reported through criterion asserts.
 *
 * The daemon binary is $DLOCKD (the Makefile sets it; default
 * build/dlockd). Its stderr goes to <dir>/dlockd.log, which a failing
 * h_daemon_stop() prints.
 */
#ifndef DL_TESTS_HARNESS_H
#define DL_TESTS_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/proto.h"

#define H_DIR_MAX  128 /* a test's directory; files inside fit H_PATH_MAX */
#define H_PATH_MAX 256
#define H_ARGS_MAX 32

struct h_redis {
	pid_t pid;
	int port;	       /* TCP port on `host` */
	char host[32];	       /* 127.0.0.1, or an address in `netns` */
	const char *netns;     /* NULL, or the namespace it runs in */
	char dir[H_DIR_MAX];   /* data directory (AOF lives here) */
	char sock[H_PATH_MAX]; /* unix socket */
	char url[H_PATH_MAX];  /* redis://<host>:<port>/0 */
	const char *extra[24]; /* more arguments for the next (re)start */
	int nextra;
	int loading_ok;	    /* the next (re)start returns while it loads */
	char replicaof[16]; /* the primary's port, for a replica */
};

/* A redis-sentinel process (Sentinel: finds and fails over a primary). */
struct h_sentinel {
	pid_t pid;
	int port;
	char dir[H_DIR_MAX];
};

struct h_daemon {
	pid_t pid;
	const char *env[8]; /* NAME=value added to the next (re)start's
			       environment (borrowed) */
	int nenv;
	int port;
	char dir[H_DIR_MAX];
	char log[H_PATH_MAX];
	char conf[H_PATH_MAX]; /* <dir>/dlockd.conf, written by the test or
				  empty */
	const char *args[H_ARGS_MAX]; /* extra arguments of the last start */
	int nargs;
	const char *user; /* run as this user (root only; setpriv), or NULL */
};

struct h_client {
	int fd;
	struct dl_linebuf lb;
	char line[DL_LINE_MAX + 1]; /* last line read */
};

/* ---- processes ---------------------------------------------------------- */

/* A free TCP port on 127.0.0.1 (bound and released). */
int h_free_port(void);

/* Start redis-server with AOF on (appendfsync as given, e.g. "always" or
 * "everysec"); waits until it answers PING. */
void h_redis_start(struct h_redis *r, const char *appendfsync);
/* The same with `extra` arguments (nextra of them, up to 24; the strings
 * are borrowed and must outlive r) from the first start on, restarts
 * included; the port it picks is none of them (a port an argument names,
 * e.g. --cluster-port's). */
void h_redis_start_with(struct h_redis *r, const char *appendfsync,
			const char *const *extra, int nextra);
/* The same, in network namespace `ns` bound to `host` (see netns.h). */
void h_redis_start_in(struct h_redis *r, const char *appendfsync,
		      const char *ns, const char *host);
/* Restart on the same port and data directory (after a stop or kill),
 * with r->extra arguments; returns once it answers PING, or, with
 * r->loading_ok, as soon as it answers at all (-LOADING included). */
void h_redis_restart(struct h_redis *r);
void h_redis_stop(struct h_redis *r);  /* SHUTDOWN-free: SIGTERM, wait */
void h_redis_kill9(struct h_redis *r); /* SIGKILL, wait */
/* Run a redis-cli command against it; returns its stdout (static). */
const char *h_redis_cli(const struct h_redis *r, const char *cmd);
void h_redis_cleanup(struct h_redis *r); /* rm -rf its directory */
/* A replica of `primary` (appendfsync always), on a port of its own. */
void h_redis_start_replica(struct h_redis *r, const struct h_redis *primary);
/* A Sentinel watching `primary` as `master` (quorum 2, down after 1 s,
 * fail-over timeout 3 s); waits until it answers. */
void h_sentinel_start(struct h_sentinel *s, const char *master,
		      const struct h_redis *primary);
void h_sentinel_stop(struct h_sentinel *s); /* and rm -rf its directory */

/* Start dlockd on a free port with the given extra arguments (a NULL
 * terminated list, e.g. "--persist", "none", NULL), and wait until it
 * accepts connections. d->dir is created on the first start. */
void h_daemon_start(struct h_daemon *d, ...);
/* The same, returning at once (the daemon may never listen). */
void h_daemon_start_nowait(struct h_daemon *d, ...);
/* Start again with the same port, directory and arguments. */
void h_daemon_restart(struct h_daemon *d);
/* The same, returning at once: the daemon may wait before it listens. */
void h_daemon_restart_nowait(struct h_daemon *d);
/* 1 once it accepts connections within timeout_ms; 0 if not (or it
 * exited: then its log is printed). */
int h_daemon_listening(struct h_daemon *d, int timeout_ms);
/* SIGTERM and wait; returns the exit status (0 expected; the log is
 * printed to stderr when it is not). */
int h_daemon_stop(struct h_daemon *d);
void h_daemon_kill9(struct h_daemon *d);
/* 1 while the daemon runs; else it is reaped, its log printed, and 0. */
int h_daemon_alive(struct h_daemon *d);
void h_daemon_signal(struct h_daemon *d, int sig);
/* Wait up to timeout_ms for the daemon to exit by itself (after a signal
 * the test sent, or a refusal it provoked); returns its exit status, or
 * -1 on timeout, after which it is killed. The log is printed when the
 * status is not `expect`: a passing test's expected refusal stays out of
 * make check's output. */
int h_daemon_wait(struct h_daemon *d, int expect, int timeout_ms);
void h_daemon_cleanup(struct h_daemon *d);
/* Write text to d->conf (the test passes "-c", d->conf itself). */
void h_daemon_write_conf(struct h_daemon *d, const char *text);
/* Write text to <d->dir>/<name> (mode 0600, the directory made if need
 * be); returns its path (static buffer, valid until the next call). */
const char *h_daemon_write_file(struct h_daemon *d, const char *name,
				const char *text);
/* Start d with the config text `conf` (NULL: none) and --persist redis
 * on r, which runs. */
void h_daemon_start_redis(struct h_daemon *d, const struct h_redis *r,
			  const char *conf);
/* A daemon of partition `id` on Redis r, its keys under prefix (the
 * partition map <prefix>{map}): [partition] id, and `more` (NULL: none)
 * of its configuration. */
void h_part_start(struct h_daemon *d, const struct h_redis *r,
		  const char *prefix, const char *id, const char *more);
/* Redis r and n daemons of partitions p0..p<n-1> on it (h_part_start,
 * prefix t:); h_parts_stop stops them all. */
void h_parts_start(struct h_daemon *d, int n, struct h_redis *r);
void h_parts_stop(struct h_daemon *d, int n, struct h_redis *r);
/* MAP of the daemon on port once its epoch is at least `epoch` and its
 * text holds `needle` (NULL: anything): the reply's lines joined by
 * '\n' (static). Fails after 15 s. */
const char *h_map_wait(int port, uint64_t epoch, const char *needle);

/* 1 if the daemon's log contains `needle`. */
int h_daemon_log_has(const struct h_daemon *d, const char *needle);
/* 1 once the daemon's log contains `needle`, within timeout_ms (0 if not
 * by then): a step the daemon logs is done when it says so, not after a
 * fixed pause. */
int h_daemon_log_wait(const struct h_daemon *d, const char *needle,
		      int timeout_ms);
/* Print the daemon's log to stderr (before an assertion that is about to
 * fail, when the log says why). */
void h_daemon_print_log(const struct h_daemon *d);

/* The daemon in the suite's persistence mode: $DL_TEST_PERSIST is "none"
 * (the default) or "redis", which also starts a private redis-server
 * (appendfsync always) and points the daemon at it. Extra arguments as in
 * h_daemon_start (NULL-terminated). h_suite_stop asserts a clean exit and
 * removes both. */
void h_suite_start(struct h_daemon *d, struct h_redis *r, ...);
void h_suite_stop(struct h_daemon *d, struct h_redis *r);
/* 1 when the suite runs with --persist redis. */
int h_suite_redis(void);

/* ---- clients ------------------------------------------------------------ */

/* h_try_connect, h_send_raw, h_send_within, h_read and h_close do not
 * assert (but on out of memory): a thread may use them on clients of its
 * own. Everything else asserts and belongs to the test's main thread. */

struct h_client *h_connect(int port);
/* A client on a unix socket (the daemon's [server] unix_socket). */
struct h_client *h_connect_unix(const char *path);
/* NULL if the connection is refused (no assert). */
struct h_client *h_try_connect(int port);
/* The same from source address `src` (any of 127/8 is this host), so
 * that a test can be two peers. */
struct h_client *h_try_connect_from(const char *src, int port);
void h_close(struct h_client *c);

/* Send a formatted request; CRLF is appended. */
void h_send(struct h_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Send raw bytes. Returns 0, or -1 if the peer closed. */
int h_send_raw(struct h_client *c, const void *p, size_t n);

/* Send what the peer takes of p[0..n) within timeout_ms, without blocking
 * past it. Returns the bytes sent, or -1 once the peer has closed or reset
 * the connection. */
ssize_t h_send_within(struct h_client *c, const void *p, size_t n,
		      int timeout_ms);

/* Next line (ending removed) or NULL on timeout or EOF. The result lives
 * in c->line until the next read. */
char *h_read(struct h_client *c, int timeout_ms);
/* Next line, which must exist within 5 s. */
char *h_line(struct h_client *c);
/* Next line must equal the formatted text. */
void h_expect(struct h_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* s begins with prefix. */
int h_starts(const char *s, const char *prefix);
/* Next line must start with the formatted text; returns the line. */
char *h_expect_prefix(struct h_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Send a request and return its reply line. */
char *h_call(struct h_client *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Nothing arrives within ms (asserts). */
void h_expect_silence(struct h_client *c, int ms);
/* 1 if the peer closes within timeout_ms (data before EOF is skipped). */
int h_wait_closed(struct h_client *c, int timeout_ms);
/* Index of the first of cs[0..n) with something to read within timeout_ms
 * (a buffered line or bytes, new bytes, or EOF), or -1. Reads nothing. */
int h_poll_any(struct h_client *const *cs, int n, int timeout_ms);

/* argv[i] of a reply line as a u64 (asserts it is one). */
uint64_t h_arg_u64(const char *line, int i);
/* The value of key=<value> in a reply line (static buffer), and the same
 * as a number; both assert that it is there. */
const char *h_kv(const char *line, const char *key);
uint64_t h_kv_u64(const char *line, const char *key);
/* STATUS <name> answers for that name, in `state`, with `waiters`
 * waiting; token (0: any) and owner (NULL: any) as given. Returns the
 * line, for more checks (valid until c's next read). */
#define H_ANY_WAITERS UINT64_MAX
const char *h_expect_status(struct h_client *c, const char *name,
			    const char *state, uint64_t token,
			    const char *owner, uint64_t waiters);
/* STATUS <name>: held by owner, with that token (0: any). */
void h_expect_held(struct h_client *c, const char *name, const char *owner,
		   uint64_t token);
/* Lock + grant in one: "LOCK name ..." must be GRANTED; returns token. */
uint64_t h_lock(struct h_client *c, const char *name, const char *opts);

/* The TTL in argv[i] of a GRANTED or REFRESHED line, for a lease asked
 * for `asked` ms: it is what remains when the server sends the line, so
 * never more than asked, and no less than asked minus the time since
 * since_ms (when the request, or the release that granted it, was sent).
 * Asserts both; returns the TTL. */
uint64_t h_check_ttl(const char *line, int i, uint64_t asked,
		     uint64_t since_ms);
/* Send a request and expect a reply starting with `prefix` whose argv[i]
 * is such a TTL; returns the line. */
char *h_call_ttl(struct h_client *c, const char *prefix, int i, uint64_t asked,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Monotonic milliseconds. */
uint64_t h_now_ms(void);
void h_sleep_ms(int ms);

/* ---- added for test_persist --------------------------------------------- */

/* The key a test client proves owner `owner` with: the same for every
 * client of the tests that says that owner, as if one client reconnected
 * (static buffer, valid until the next call). */
const char *h_owner_key(const char *owner);
/* A new client on port that said HELLO owner=<owner> key=<its key>. */
struct h_client *h_hello(int port, const char *owner);
/* The same, describing itself with `desc` (words for HELLO, e.g.
 * "host=web3 pid=42 cmd=make%20deploy"). */
struct h_client *h_hello_desc(int port, const char *owner, const char *desc);
/* On c, n owners o0 .. o<n-1> (with their keys), each describing itself
 * with a command of 128 bytes, take a shared lease of `name` for 120 s:
 * a HOLDERS of it is then ~300 KB for n = 1000, more than a socket takes
 * from the daemon at once. */
void h_described_holders(struct h_client *c, const char *name, int n);
/* 1 if a reply line has the word key=<anything> (h_kv asserts it). */
int h_has_kv(const char *line, const char *key);
/* Poll STATUS until `name` is free (asserts it is within max_ms);
 * returns when (h_now_ms()). */
uint64_t h_wait_free(struct h_client *c, const char *name, int max_ms);
/* Poll STATS until `key` is `want` (asserts it is within max_ms): the
 * daemon has got to a step it counts (a close seen, a link up); returns
 * how long that took. */
uint64_t h_wait_stat(struct h_client *c, const char *key, uint64_t want,
		     int max_ms);
/* h_wait_stat of store_available. */
uint64_t h_wait_available(struct h_client *c, uint64_t want, int max_ms);

/* One value of STATS on c (reads the whole framed reply; asserts that the
 * key exists). */
uint64_t h_stats_value(struct h_client *c, const char *key);
/* The same, of a STATS already sent on c, its reply read within
 * timeout_ms (a test that stopped the daemon meanwhile). */
uint64_t h_stats_reply(struct h_client *c, const char *key, int timeout_ms);
/* Poll `redis-cli <cmd>` until its output contains `needle` (want 1) or
 * does not (want 0); returns 1 if that happened within timeout_ms. */
int h_redis_wait(const struct h_redis *r, const char *cmd, const char *needle,
		 int want, int timeout_ms);

/* ---- the daemon's keys in Redis (layout 2, server/store/store.c) ---- */

/* The bucket of lock `name` under the default prefix, "dlock:rec:<b>"
 * (server/store/bucket.h's function; static buffer, valid until the next
 * call). */
const char *h_rec_key(const char *name);
/* "<verb> dlock:rec:<b> <name>": a redis-cli command on the record of lock
 * `name` -- HGET reads it, HEXISTS tells if there is one, HDEL deletes it
 * (static buffer, valid until the next call). */
const char *h_rec_cmd(const char *verb, const char *name);
/* Its record, as redis-cli prints it ("" and a newline if none). */
const char *h_rec_get(const struct h_redis *r, const char *name);
/* Write `text` (printf escapes such as \n, as for printf(1)) as the
 * record of `name`, bypassing the daemon: redis-cli -x HSET. */
void h_rec_plant(const struct h_redis *r, const char *name, const char *text);

#endif /* DL_TESTS_HARNESS_H */
