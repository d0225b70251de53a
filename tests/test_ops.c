/* SPDX-License-Identifier: MIT */
/*
 * test_ops.c -- running dlockd as a service: systemd readiness and
 * watchdog datagrams, SIGHUP reload, AUTH throttling, limits, metrics.
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/harness.h"

/* ---- a NOTIFY_SOCKET of our own --------------------------------------- */

struct notify {
	int fd;
	char path[108];
};

static void notify_open(struct notify *n)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(n->path, sizeof(n->path), "/tmp/dlockd-notify-%d",
		 (int)getpid());
	unlink(n->path);
	n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	cr_assert(n->fd >= 0);
	memcpy(sa.sun_path, n->path, strlen(n->path) + 1);
	cr_assert(bind(n->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
		  "bind %s: %s", n->path, strerror(errno));
}

static void notify_close(struct notify *n)
{
	close(n->fd);
	unlink(n->path);
}

/* The next datagram, or "" after timeout_ms. */
static const char *notify_recv(struct notify *n, int timeout_ms)
{
	static char buf[512];
	struct pollfd p = {.fd = n->fd, .events = POLLIN};
	ssize_t k;

	buf[0] = '\0';
	if (poll(&p, 1, timeout_ms) != 1)
		return buf;
	k = recv(n->fd, buf, sizeof(buf) - 1, 0);
	buf[k > 0 ? k : 0] = '\0';
	return buf;
}

/* Wait for a datagram containing `what`; 1 if it came in time. */
static int notify_wait(struct notify *n, const char *what, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;

	while (h_now_ms() < end)
		if (strstr(notify_recv(n, (int)(end - h_now_ms())), what))
			return 1;
	return 0;
}

/* dlockd with NOTIFY_SOCKET (and more environment), not waited for. */
static pid_t spawn_notified(const struct notify *n, const char *watchdog_us,
			    const char *log, const char *const *args)
{
	const char *argv[24];
	const char *bin = getenv("DLOCKD");
	pid_t pid;
	int i = 0, fd;

	argv[i++] = bin && bin[0] ? bin : "build/dlockd";
	while (*args && i < 23)
		argv[i++] = *args++;
	argv[i] = NULL;
	pid = fork();
	cr_assert(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		setenv("NOTIFY_SOCKET", n->path, 1);
		if (watchdog_us)
			setenv("WATCHDOG_USEC", watchdog_us, 1);
		fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 2);
			close(fd);
		}
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static int reap(pid_t pid, int timeout_ms)
{
	uint64_t end = h_now_ms() + (uint64_t)timeout_ms;
	int st;

	while (h_now_ms() < end) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st)
					     : 128 + WTERMSIG(st);
		h_sleep_ms(10);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

Test(ops, ready_only_once_state_is_loaded_and_the_port_listens, .timeout = 60)
{
	struct h_redis r;
	struct notify n;
	struct h_client *c;
	char port[16], rec[256], log[H_PATH_MAX], *l;
	const char *args[8];
	uint64_t deadline;
	int st;
	pid_t pid;

	h_redis_start(&r, "always");
	/* A lease written by an earlier life of the daemon. */
	deadline = (uint64_t)time(NULL) * 1000 + 600000;
	snprintf(rec, sizeof(rec), "dlock1\\nH 77 %llu 1 600000 alice",
		 (unsigned long long)deadline);
	h_rec_plant(&r, "seeded", rec);
	notify_open(&n);
	snprintf(port, sizeof(port), "%d", h_free_port());
	snprintf(log, sizeof(log), "%s/dlockd.log", r.dir);
	args[0] = "--port";
	args[1] = port;
	args[2] = "--redis";
	args[3] = r.url;
	args[4] = NULL;
	pid = spawn_notified(&n, NULL, log, args);

	cr_assert(notify_wait(&n, "READY=1", 20000), "no READY=1");
	/* At READY the listener must be up (no retry) and the state
	 * loaded. */
	c = h_try_connect(atoi(port));
	cr_assert(c != NULL, "READY=1 sent before the port listens");
	l = h_call(c, "CHECK seeded 77");
	cr_assert(strncmp(l, "OK VALID seeded 77 ", 19) == 0,
		  "READY=1 before the state was loaded: %s", l);
	l = h_call(c, "LOCK fresh");
	cr_assert(h_arg_u64(l, 1) > 77, "token after a loaded one: %s", l);
	h_close(c);

	kill(pid, SIGTERM);
	cr_assert(notify_wait(&n, "STOPPING=1", 10000), "no STOPPING=1");
	st = reap(pid, 20000);
	cr_assert(eq(int, st, 0));
	notify_close(&n);
	h_redis_cleanup(&r);
}

Test(ops, watchdog_pings_arrive_at_half_the_interval, .timeout = 60)
{
	struct notify n;
	char port[16], log[64];
	const char *args[] = {"--persist", "none", "--port", port, NULL};
	uint64_t end;
	int pings = 0;
	pid_t pid;

	notify_open(&n);
	snprintf(port, sizeof(port), "%d", h_free_port());
	snprintf(log, sizeof(log), "/tmp/dlockd-wd-%d.log", (int)getpid());
	/* WATCHDOG_USEC=200 ms: a ping every 100 ms. */
	pid = spawn_notified(&n, "200000", log, args);
	cr_assert(notify_wait(&n, "READY=1", 20000));
	end = h_now_ms() + 1500;
	while (h_now_ms() < end)
		if (strstr(notify_recv(&n, (int)(end - h_now_ms())),
			   "WATCHDOG=1"))
			pings++;
	/* 15 expected; the bounds allow a slow, loaded machine. */
	cr_assert(pings >= 8 && pings <= 20,
		  "%d WATCHDOG=1 pings in 1.5 s with WatchdogSec=200ms", pings);
	kill(pid, SIGTERM);
	cr_assert(eq(int, reap(pid, 20000), 0));
	notify_close(&n);
	unlink(log);
}

/* ---- reload, auth, limits ------------------------------------------------ */

static struct h_daemon d;

static void stop(void)
{
	int st = h_daemon_stop(&d);

	h_daemon_cleanup(&d);
	cr_assert(eq(int, st, 0));
}

Test(ops, sighup_changes_password_and_limit_without_dropping_clients,
     .fini = stop, .timeout = 60)
{
	struct h_client *old, *c1, *c2, *c3;

	h_daemon_write_conf(&d, "[server]\npassword = first\n"
				"[limits]\nmax_waiters_per_lock = 100\n");
	h_daemon_start(&d, "--persist", "none", "-c", d.conf, NULL);
	old = h_connect(d.port);
	cr_assert(strcmp(h_call(old, "AUTH first"), "OK AUTH") == 0);
	h_lock(old, "q", NULL);

	h_daemon_write_conf(&d, "[server]\npassword = second\n"
				"[limits]\nmax_waiters_per_lock = 1\n"
				"auth_delay = 0\n");
	h_daemon_signal(&d, SIGHUP);
	cr_assert(h_daemon_log_wait(&d, "password changed, applied", 5000));

	/* The connection that gave the old password is told and closed:
	 * a password change is how a leaked one is taken back. Its lease
	 * stays until its TTL. */
	cr_assert(strcmp(h_line(old), "* BYE revoked") == 0);
	cr_assert(h_wait_closed(old, 2000));
	c1 = h_connect(d.port);
	cr_assert(strcmp(h_call(c1, "AUTH first"), "NO AUTH_FAILED") == 0);
	cr_assert(strcmp(h_call(c1, "AUTH second"), "OK AUTH") == 0);
	cr_assert(strncmp(h_call(c1, "STATUS q"), "OK STATUS q state=held",
			  22) == 0);
	cr_assert(strcmp(h_call(c1, "LOCK q"), "OK QUEUED q 1") == 0);
	c2 = h_connect(d.port);
	h_call(c2, "AUTH second");
	cr_assert(strncmp(h_call(c2, "LOCK q"), "ERR LIMIT", 9) == 0,
		  "max_waiters_per_lock = 1 was not applied");
	/* A key that needs a restart is reported, not applied. (The port
	 * would not do: the harness gives it on the command line, and flags
	 * win over the file at reload too.) */
	h_daemon_write_conf(&d, "[server]\npassword = second\n"
				"[limits]\ntick = 20ms\n");
	h_daemon_signal(&d, SIGHUP);
	cr_assert(h_daemon_log_wait(&d, "tick changed, needs a restart", 5000));
	/* A broken file is refused; the running configuration stays. */
	h_daemon_write_conf(&d, "[server]\npasword = x\n");
	h_daemon_signal(&d, SIGHUP);
	cr_assert(h_daemon_log_wait(&d, "reload failed", 5000));
	c3 = h_connect(d.port);
	cr_assert(strcmp(h_call(c3, "AUTH second"), "OK AUTH") == 0);
	h_close(old);
	h_close(c1);
	h_close(c2);
	h_close(c3);
}

Test(ops, auth_guessing_is_slowed_and_counted, .fini = stop, .timeout = 60)
{
	struct h_client *c, *other;
	uint64_t t0, took;
	int i;

	h_daemon_write_conf(&d, "[server]\npassword = s3cret\n"
				"[limits]\nauth_delay = 200ms\n");
	h_daemon_start(&d, "--persist", "none", "-c", d.conf, NULL);
	c = h_connect(d.port);
	other = h_connect(d.port);
	cr_assert(strncmp(h_call(c, "LOCK x"), "ERR NOAUTH", 10) == 0);
	t0 = h_now_ms();
	for (i = 0; i < 3; i++)
		cr_assert(strcmp(h_call(c, "AUTH guess%d", i),
				 "NO AUTH_FAILED") == 0);
	took = h_now_ms() - t0;
	cr_assert(took >= 3 * 200 - 20, "3 failed AUTHs answered in %llu ms",
		  (unsigned long long)took);
	/* the third was the last: the guesser needs a new connection */
	cr_assert(h_wait_closed(c, 2000));
	h_close(c);
	/* Pipelined requests behind a failed AUTH wait their turn. */
	c = h_connect(d.port);
	h_send(c, "AUTH wrong");
	h_send(c, "PING behind");
	cr_assert(strcmp(h_line(c), "NO AUTH_FAILED") == 0);
	cr_assert(strcmp(h_line(c), "OK PONG behind") == 0);
	/* Other clients are not slowed down meanwhile. */
	cr_assert(strcmp(h_call(other, "AUTH s3cret"), "OK AUTH") == 0);
	cr_assert(eq(u64, h_stats_value(other, "auth_failures"), 4));
	cr_assert(strcmp(h_call(c, "AUTH s3cret"), "OK AUTH") == 0);
	h_close(c);
	h_close(other);
}

Test(ops, every_limit_says_err_limit_and_the_daemon_keeps_serving, .fini = stop,
     .timeout = 60)
{
	struct h_client *cs[4], *extra, *a, *b, *w;
	char *l;
	int i;

	h_daemon_write_conf(&d, "[limits]\nmax_connections = 4\n"
				"max_waiters_per_lock = 1\n"
				"max_locks_per_owner = 2\n");
	h_daemon_start(&d, "--persist", "none", "-c", d.conf, NULL);
	/* Once the daemon has seen the harness's readiness probe close, it
	 * counts cs[0] alone. */
	cs[0] = h_connect(d.port);
	h_wait_stat(cs[0], "connections", 1, 5000);
	for (i = 1; i < 4; i++)
		cs[i] = h_connect(d.port);
	extra = h_connect(d.port);
	l = h_read(extra, 5000);
	cr_assert(l && strcmp(l, "ERR LIMIT too many connections") == 0,
		  "fifth connection: %s", l ? l : "(nothing)");
	cr_assert(h_wait_closed(extra, 5000));
	h_close(extra);

	a = cs[0];
	b = cs[1];
	w = cs[2];
	h_lock(a, "one", NULL);
	h_lock(a, "two", NULL);
	cr_assert(strncmp(h_call(a, "LOCK three"), "ERR LIMIT", 9) == 0,
		  "max_locks_per_owner");
	cr_assert(strcmp(h_call(b, "LOCK one"), "OK QUEUED one 1") == 0);
	cr_assert(strncmp(h_call(w, "LOCK one"), "ERR LIMIT", 9) == 0,
		  "max_waiters_per_lock");
	for (i = 0; i < 3; i++)
		cr_assert(strcmp(h_call(cs[i], "PING"), "OK PONG") == 0);
	cr_assert(eq(u64, h_stats_value(cs[3], "errors_limit"), 2));
	/* an out-of-range number is a BAD_ARG, and counted as one */
	cr_assert(strncmp(h_call(a, "LOCK r ttl=99999999999999999999"),
			  "ERR BAD_ARG", 11) == 0);
	cr_assert(eq(u64, h_stats_value(cs[3], "errors_bad_arg"), 1));
	cr_assert(eq(u64, h_stats_value(cs[3], "connections_rejected"), 1));
	/* A slot frees: a new connection is accepted again. */
	h_close(cs[3]);
	h_wait_stat(cs[0], "connections", 3, 5000);
	cs[3] = h_connect(d.port);
	cr_assert(strcmp(h_call(cs[3], "PING"), "OK PONG") == 0);
	for (i = 0; i < 4; i++)
		h_close(cs[i]);
}

/* One HTTP GET; returns the response (static). */
static const char *http_get(int port, const char *path)
{
	static char resp[65536];
	struct h_client *c = h_connect(port);
	size_t n = 0;
	ssize_t k;

	dprintf(c->fd, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
	while (n < sizeof(resp) - 1 &&
	       (k = read(c->fd, resp + n, sizeof(resp) - 1 - n)) > 0)
		n += (size_t)k;
	resp[n] = '\0';
	h_close(c);
	return resp;
}

/* Prometheus's naming rules, over the whole page: every series belongs to
 * a family announced by # TYPE; names are dlockd_ and lower case; base
 * units (seconds, not ms or us) end a name, and the HELP of a family in
 * seconds says seconds (it used to say milliseconds or microseconds, the
 * STATS key's unit); a counter ends in _total once; a gauge does not end
 * in _total. */
static void check_metric_names(const char *page)
{
	char fam[128][96], kind[128][16], name[96], help[512];
	const char *p = page, *eol, *text;
	int nfam = 0, i, ok;
	size_t n;

	p = strstr(p, "\r\n\r\n");
	cr_assert_not_null(p);
	for (p += 4; *p; p = eol + 1) {
		eol = strchr(p, '\n');
		cr_assert_not_null(eol, "unterminated line");
		if (strncmp(p, "# HELP ", 7) == 0) {
			n = (size_t)(eol - p);
			cr_assert_lt(n, sizeof(help));
			memcpy(help, p, n);
			help[n] = '\0';
			ok = strstr(help, "millisec") == NULL &&
			     strstr(help, "microsec") == NULL &&
			     strstr(help, " ms ") == NULL &&
			     strstr(help, " us ") == NULL;
			cr_assert(ok, "%s: a unit the name does not have",
				  help);
			text = strchr(help + 7, ' ');
			cr_assert_not_null(text, "%s: no text", help);
			ok = strstr(help, "_seconds ") == NULL ||
			     strcasestr(text, "seconds") != NULL;
			cr_assert(ok, "%s: does not say seconds", help);
			continue;
		}
		if (strncmp(p, "# TYPE ", 7) == 0) {
			cr_assert_lt(nfam, 128);
			cr_assert_eq(sscanf(p + 7, "%95s %15s", fam[nfam],
					    kind[nfam]),
				     2);
			n = strlen(fam[nfam]);
			cr_assert(
				strncmp(fam[nfam], "dlockd_", 7) == 0 &&
					strspn(fam[nfam],
					       "abcdefghijklmnopqrstuvwxyz0123456789_") ==
						n,
				"name %s", fam[nfam]);
			ok = !strstr(fam[nfam], "_ms") &&
			     !strstr(fam[nfam], "_us_") &&
			     !(n > 3 && !strcmp(fam[nfam] + n - 3, "_us"));
			cr_assert(ok, "%s: not in base units", fam[nfam]);
			if (!strcmp(kind[nfam], "counter"))
				cr_assert(n > 6 &&
						  !strcmp(fam[nfam] + n - 6,
							  "_total") &&
						  !strstr(fam[nfam],
							  "_total_total"),
					  "counter %s", fam[nfam]);
			else if (!strcmp(kind[nfam], "gauge"))
				cr_assert(n <= 6 || strcmp(fam[nfam] + n - 6,
							   "_total") != 0,
					  "gauge %s ends in _total", fam[nfam]);
			nfam++;
			continue;
		}
		n = strcspn(p, "{ ");
		cr_assert_lt(n, sizeof(name));
		memcpy(name, p, n);
		name[n] = '\0';
		for (ok = 0, i = 0; i < nfam && !ok; i++) {
			size_t f = strlen(fam[i]);

			ok = !strcmp(name, fam[i]) ||
			     (!strcmp(kind[i], "histogram") &&
			      !strncmp(name, fam[i], f) &&
			      (!strcmp(name + f, "_bucket") ||
			       !strcmp(name + f, "_sum") ||
			       !strcmp(name + f, "_count")));
		}
		cr_assert(ok, "series %s has no # TYPE", name);
	}
	cr_assert_gt(nfam, 20);
}

Test(ops, metrics_page_has_counters_errors_and_histograms, .fini = stop,
     .timeout = 60)
{
	struct h_client *c;
	char conf[128];
	const char *page;
	int mport = h_free_port();

	snprintf(conf, sizeof(conf), "[metrics]\nlisten = 127.0.0.1:%d\n",
		 mport);
	h_daemon_write_conf(&d, conf);
	h_daemon_start(&d, "--persist", "none", "-c", d.conf, NULL);
	c = h_connect(d.port);
	h_lock(c, "m", NULL);
	h_call(c, "bogus");
	page = http_get(mport, "/metrics");
	cr_assert(strncmp(page, "HTTP/1.1 200 OK\r\n", 17) == 0, "%.60s", page);
	cr_assert(strstr(page, "\ndlockd_grants_total 1\n") != NULL, "%s",
		  page);
	cr_assert(strstr(page, "\ndlockd_leases 1\n") != NULL);
	cr_assert(strstr(page,
			 "dlockd_errors_total{code=\"unknown_command\"} 1\n") !=
		  NULL);
	cr_assert(strstr(page, "# TYPE dlockd_wait_seconds histogram\n") !=
		  NULL);
	cr_assert(strstr(page, "dlockd_wait_seconds_bucket{le=\"+Inf\"} 1\n") !=
		  NULL);
	cr_assert(strstr(page, "dlockd_hold_seconds_count 0\n") != NULL);
	check_metric_names(page);
	cr_assert(strstr(page, "\ndlockd_connections_total ") != NULL);
	cr_assert(strstr(page, "_total_total") == NULL);
	cr_assert(strstr(page, "\ndlockd_uptime_seconds ") != NULL);
	page = http_get(mport, "/nothing");
	cr_assert(strncmp(page, "HTTP/1.1 404", 12) == 0, "%.60s", page);
	/* The lock service goes on. */
	cr_assert(strcmp(h_call(c, "PING"), "OK PONG") == 0);
	h_close(c);
}

/* SIGTERM while the daemon still waits for Redis at start: it says so and
 * exits 0 at once (systemd's stop must not wait for Redis either). */
Test(ops, sigterm_during_the_start_up_wait_exits_0, .fini = stop, .timeout = 60)
{
	char url[64];

	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", h_free_port());
	h_daemon_start_nowait(&d, "--redis", url, NULL);
	for (int i = 0; i < 100 && !h_daemon_log_has(&d, "waiting"); i++)
		h_sleep_ms(50);
	cr_assert(h_daemon_log_has(&d, "redis not ready"), "no wait logged");
	kill(d.pid, SIGTERM);
	cr_assert_eq(h_daemon_wait(&d, 0, 5000), 0);
	cr_assert(h_daemon_log_has(&d, "Terminated during start-up: exiting"));
}

/* Sockets left idle on the metrics port (a connection pool, a port
 * scanner, a slow client) never block a scrape: at the limit, a new
 * connection closes the oldest one that has sent no request. */
Test(ops, metrics_scrapes_succeed_while_32_idle_sockets_are_open, .fini = stop,
     .timeout = 60)
{
	struct h_client *idle[32];
	const char *page;
	char conf[128];
	int i, mport = h_free_port();

	snprintf(conf, sizeof(conf), "[metrics]\nlisten = 127.0.0.1:%d\n",
		 mport);
	h_daemon_write_conf(&d, conf);
	h_daemon_start(&d, "--persist", "none", "-c", d.conf, NULL);
	for (i = 0; i < 32; i++)
		idle[i] = h_connect(mport);
	for (i = 0; i < 10; i++) {
		page = http_get(mport, "/metrics");
		cr_assert(strncmp(page, "HTTP/1.1 200 OK\r\n", 17) == 0,
			  "scrape %d with 32 idle sockets open: \"%.60s\"", i,
			  page);
	}
	for (i = 0; i < 32; i++)
		h_close(idle[i]);
}
