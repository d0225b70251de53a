/* SPDX-License-Identifier: MIT */
/*
 * test_access.c -- who may do what: users and their grants, BREAK's
 * audit, what a connection may do before it authenticates, quotas, and
 * secrets kept out of sight. The real daemon, memory only unless a test
 * says otherwise (then a real redis-server).
 *
 * Every test starts its own daemon with the configuration it needs.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/harness.h"

static struct h_daemon d;
static struct h_redis r;

static void stop(void)
{
	if (d.dir[0])
		h_daemon_cleanup(&d);
	if (r.pid)
		h_redis_stop(&r);
	if (r.dir[0])
		h_redis_cleanup(&r);
}

TestSuite(access, .fini = stop, .timeout = 60);

/* ---- helpers ------------------------------------------------------------- */

/* Secrets of the users below, and their SHA-256 (sha256sum of each). */
#define OPS_SECRET "ops-secret-5f1c0b2a9e7d4c36"
#define OPS_HASH                                                               \
	"sha256:b50a4b454e448e794ba22b21891c408e13e4a6df3182a275e6d0eb4b1dbc8f3d"
#define APP_SECRET "app-secret-8d2e4f6a1b3c5d7e"
#define APP_HASH                                                               \
	"sha256:541ec7c9d1036f5553195d86ce23d116235e3910d32d2b913b4698297e5f8ec4"
#define PAY_SECRET "pay-secret-0a1b2c3d4e5f6a7b"
#define PAY_HASH                                                               \
	"sha256:383ecc63ed7e7abd8fe38af6d569ba634482f956c126b20aa751c4700b1cb3b4"
#define CI_SECRET "ci-secret-9f8e7d6c5b4a3210"
#define CI_HASH                                                                \
	"sha256:c942f046bfb15d968b6975413736473bffaf86df13301fc7a07e5da2b65b01c2"
#define NEW_SECRET "newsecret-77aa88bb99cc00dd"
#define NEW_HASH                                                               \
	"sha256:181afa0d5016bc6dc73fc6f1eaeb92f489c3a9662566270b7716f33fde754892"

/* The users most tests use: an operator, an application confined to
 * app/, payments and ci sharing nothing but their owners' names. */
#define USERS                                                                  \
	"# users of the tests\n"                                               \
	"ops " OPS_HASH " lock=* read=* break=* admin\n"                       \
	"app " APP_HASH " lock=app/ read=app/,shared/\n"                       \
	"payments " PAY_HASH " lock=* read=*\n"                                \
	"ci " CI_HASH " lock=* read=*\n"

/* Start d with `users` as its users file and `more` in its [server]. */
static void start_users(const char *users, const char *more)
{
	char conf[2048];
	const char *path = h_daemon_write_file(&d, "users", users);

	snprintf(conf, sizeof(conf), "[server]\nusers_file = %s\n%s\n", path,
		 more ? more : "");
	h_daemon_write_conf(&d, conf);
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
}

/* A client authenticated as user `u` with `secret`. */
static struct h_client *login(const char *u, const char *secret)
{
	struct h_client *c = h_connect(d.port);
	char want[64];

	snprintf(want, sizeof(want), "OK AUTH user=%s", u);
	cr_assert_str_eq(h_call(c, "AUTH %s %s", u, secret), want);
	return c;
}

/* ... that also said HELLO owner=<owner>. */
static struct h_client *login_as(const char *u, const char *secret,
				 const char *owner)
{
	struct h_client *c = login(u, secret);

	cr_assert(h_starts(
		h_call(c, "HELLO owner=%s key=%s", owner, h_owner_key(owner)),
		"OK HELLO "));
	return c;
}

/* Lines of the daemon's log containing needle. */
static int log_count(const char *needle)
{
	char line[4096];
	int n = 0;
	FILE *f = fopen(d.log, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* 1 once the log has a line containing needle, within ms. */
static int wait_log(const char *needle, int ms)
{
	uint64_t end = h_now_ms() + (uint64_t)ms;

	while (!log_count(needle)) {
		if (h_now_ms() >= end)
			return 0;
		h_sleep_ms(10);
	}
	return 1;
}

/* ---- users and grants ---------------------------------------------------- */

/* Default deny: a user acts on the names it was granted, and nothing
 * else; a refusal says DENIED, the name and the right it needs. */
Test(access, a_user_acts_only_on_the_names_it_was_granted)
{
	struct h_client *app, *ops;
	uint64_t t;
	char *l;

	start_users(USERS, NULL);
	app = login_as("app", APP_SECRET, "w1");
	t = h_lock(app, "app/job", "ttl=30s");
	cr_assert_str_eq(h_call(app, "LOCK pay/x"),
			 "NO DENIED pay/x need=lock");
	cr_assert_str_eq(h_call(app, "TRYLOCK pay/x id=t1"),
			 "NO DENIED pay/x need=lock id=t1");
	cr_assert_str_eq(h_call(app, "UNLOCK pay/x 5"),
			 "NO DENIED pay/x need=lock");
	cr_assert_str_eq(h_call(app, "REFRESH pay/x 5"),
			 "NO DENIED pay/x need=lock");
	cr_assert_str_eq(h_call(app, "CANCEL pay/x"),
			 "NO DENIED pay/x need=lock");
	cr_assert_str_eq(h_call(app, "STATUS pay/x"),
			 "NO DENIED pay/x need=read");
	cr_assert_str_eq(h_call(app, "CHECK pay/x 5"),
			 "NO DENIED pay/x need=read");
	cr_assert_str_eq(h_call(app, "HOLDERS pay/x"),
			 "NO DENIED pay/x need=read");
	cr_assert_str_eq(h_call(app, "STATS"), "NO DENIED - need=admin");
	/* read= without lock=: it may look, not take */
	cr_assert(h_starts(h_call(app, "STATUS shared/q"), "OK STATUS "));
	cr_assert_str_eq(h_call(app, "LOCK shared/q"),
			 "NO DENIED shared/q need=lock");
	l = h_call(app, "STATUS app/job");
	cr_assert_str_eq(h_kv(l, "owner"), "w1", "%s", l);
	cr_assert_str_eq(h_kv(l, "user"), "app", "%s", l);
	/* the operator may do everything */
	ops = login("ops", OPS_SECRET);
	cr_assert(h_starts(h_call(ops, "STATUS pay/x"), "OK STATUS "));
	cr_assert_eq(h_stats_value(ops, "errors_denied"), 10);
	cr_assert_str_eq(
		h_call(app, "UNLOCK app/job %llu", (unsigned long long)t),
		"OK RELEASED app/job");
	h_close(app);
	h_close(ops);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Who holds a lock is for those who may read it: a user with lock= but
 * not read= on a name is told NO BUSY without the holder's owner id,
 * hold time or description; STATUS, HOLDERS and LOCKS are refused or
 * leave the lock out, as for owner ids. */
Test(access, a_holder_is_described_only_to_users_who_may_read_the_lock)
{
	struct h_client *ops, *ci, *pay;
	char *l;

	start_users("ops " OPS_HASH " lock=* read=* break=* admin\n"
		    "ci " CI_HASH " lock=jobs/\n"
		    "payments " PAY_HASH " lock=* read=*\n",
		    NULL);
	ops = login("ops", OPS_SECRET);
	cr_assert(h_starts(h_call(ops,
				  "HELLO owner=deploy-7 key=%s host=web3 "
				  "pid=4242 cmd=make%%20deploy",
				  h_owner_key("deploy-7")),
			   "OK HELLO "));
	h_lock(ops, "jobs/nightly", "ttl=30s");
	ci = login_as("ci", CI_SECRET, "runner");
	l = h_call(ci, "TRYLOCK jobs/nightly");
	cr_assert(h_starts(l, "NO BUSY jobs/nightly "), "%s", l);
	cr_assert(!strstr(l, "owner=") && !strstr(l, "held_ms=") &&
			  !strstr(l, "web3") && !strstr(l, "deploy"),
		  "told a user who may not read: \"%s\"", l);
	cr_assert_str_eq(h_call(ci, "STATUS jobs/nightly"),
			 "NO DENIED jobs/nightly need=read");
	cr_assert_str_eq(h_call(ci, "HOLDERS jobs/nightly"),
			 "NO DENIED jobs/nightly need=read");
	cr_assert_str_eq(h_call(ci, "LOCKS jobs/"), "OK LOCKS 0 more=0");
	/* one who may read is told */
	pay = login_as("payments", PAY_SECRET, "p");
	l = h_call(pay, "TRYLOCK jobs/nightly");
	cr_assert(h_starts(l, "NO BUSY jobs/nightly "), "%s", l);
	cr_assert_str_eq(h_kv(l, "owner"), "deploy-7", "%s", l);
	cr_assert_str_eq(h_kv(l, "user"), "ops", "%s", l);
	cr_assert_str_eq(h_kv(l, "host"), "web3", "%s", l);
	h_close(ops);
	h_close(ci);
	h_close(pay);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* AUTH <user> <secret>: a wrong secret, an unknown user, a user's name
 * with no secret, or the one-word form are all just NO AUTH_FAILED. */
Test(access, auth_takes_a_user_and_its_secret_and_nothing_else)
{
	struct h_client *c;
	char *l;

	start_users(USERS, NULL);
	c = h_connect(d.port);
	cr_assert_str_eq(h_call(c, "AUTH app " OPS_SECRET), "NO AUTH_FAILED");
	cr_assert_str_eq(h_call(c, "AUTH nobody " OPS_SECRET),
			 "NO AUTH_FAILED");
	h_close(c);
	c = h_connect(d.port);
	cr_assert_str_eq(h_call(c, "AUTH " APP_SECRET), "NO AUTH_FAILED");
	h_close(c);
	c = login("app", APP_SECRET);
	l = h_call(c, "HELLO");
	cr_assert_str_eq(h_kv(l, "user"), "app", "%s", l);
	cr_assert_str_eq(h_kv(l, "auth"), "required", "%s", l);
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* The same owner id under two users is two owners: payments' worker-1
 * and ci's worker-1 exclude each other and cannot release each other's
 * lease -- also after a restart that loads the leases from Redis. */
Test(access, owners_of_two_users_stay_two_owners_across_a_restart)
{
	struct h_client *p, *c;
	uint64_t t;
	char *l;

	h_redis_start(&r, "always");
	{
		char conf[1024];
		const char *path = h_daemon_write_file(&d, "users", USERS);

		snprintf(conf, sizeof(conf), "[server]\nusers_file = %s\n",
			 path);
		h_daemon_start_redis(&d, &r, conf);
	}
	p = login_as("payments", PAY_SECRET, "worker-1");
	c = login_as("ci", CI_SECRET, "worker-1");
	t = h_lock(p, "deploy", "ttl=60s");
	cr_assert(h_starts(h_call(c, "TRYLOCK deploy"), "NO BUSY deploy "));
	cr_assert_str_eq(h_call(c, "UNLOCK deploy %llu", (unsigned long long)t),
			 "NO NOT_HOLDER deploy");
	h_close(p);
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
	h_daemon_restart(&d);
	c = login_as("ci", CI_SECRET, "worker-1");
	cr_assert(h_starts(h_call(c, "TRYLOCK deploy"), "NO BUSY deploy "));
	cr_assert_str_eq(h_call(c, "UNLOCK deploy %llu", (unsigned long long)t),
			 "NO NOT_HOLDER deploy");
	p = login_as("payments", PAY_SECRET, "worker-1");
	l = h_call(p, "STATUS deploy");
	cr_assert_str_eq(h_kv(l, "user"), "payments", "%s", l);
	cr_assert_str_eq(h_call(p, "UNLOCK deploy %llu", (unsigned long long)t),
			 "OK RELEASED deploy");
	h_close(p);
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* A lease stored before users existed belongs to the default user: with
 * a users file it is nobody's to release, and runs out. */
Test(access, a_lease_from_before_users_belongs_to_the_default_user)
{
	struct h_client *c;
	char *l;

	h_redis_start(&r, "always");
	h_daemon_start_redis(&d, &r, NULL);
	c = h_hello(d.port, "worker-1");
	h_lock(c, "old", "ttl=60s");
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
	{
		char conf[1024];
		const char *path = h_daemon_write_file(&d, "users", USERS);

		snprintf(conf, sizeof(conf), "[server]\nusers_file = %s\n",
			 path);
		h_daemon_write_conf(&d, conf);
	}
	h_daemon_restart(&d);
	c = login_as("payments", PAY_SECRET, "worker-1");
	l = h_call(c, "STATUS old");
	cr_assert_str_eq(h_kv(l, "state"), "held", "%s", l);
	cr_assert_str_eq(h_kv(l, "owner"), "worker-1", "%s", l);
	cr_assert(strstr(l, " user=") == NULL, "%s", l);
	cr_assert(h_starts(h_call(c, "TRYLOCK old"), "NO BUSY old "));
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* LOCKS lists only what the user may read, and counts only that. */
Test(access, a_listing_shows_only_readable_names)
{
	struct h_client *ops, *app;
	char *l;

	start_users(USERS, NULL);
	ops = login("ops", OPS_SECRET);
	h_lock(ops, "app/1", "ttl=30s");
	h_lock(ops, "pay/1", "ttl=30s");
	h_lock(ops, "shared/1", "ttl=30s");
	app = login("app", APP_SECRET);
	l = h_call(app, "LOCKS");
	cr_assert_str_eq(l, "OK LOCKS 2 more=0");
	cr_assert(h_starts(h_line(app), "app/1 "));
	cr_assert(h_starts(h_line(app), "shared/1 "));
	cr_assert_str_eq(h_call(app, "LOCKS pay/"), "OK LOCKS 0 more=0");
	cr_assert_str_eq(h_call(ops, "LOCKS"), "OK LOCKS 3 more=0");
	h_close(ops);
	h_close(app);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* A users file that does not parse stops the start, with file:line;
 * a password beside a users file is refused (one way to log in). */
Test(access, a_bad_users_file_stops_the_start_with_file_and_line)
{
	const char *path;
	char conf[1024];

	path = h_daemon_write_file(&d, "users",
				   "ops " OPS_HASH " lock=*\n"
				   "app lock=app/\n");
	snprintf(conf, sizeof(conf), "[server]\nusers_file = %s\n", path);
	h_daemon_write_conf(&d, conf);
	h_daemon_start_nowait(&d, "-c", d.conf, "--check-config", NULL);
	cr_assert_eq(h_daemon_wait(&d, 3, 10000), 3);
	cr_assert(log_count("users:2: user 'app' has neither"), "log: %s",
		  d.log);
	snprintf(conf, sizeof(conf),
		 "[server]\nusers_file = %s\npassword = s3cret\n", path);
	h_daemon_write_conf(&d, conf);
	h_daemon_start_nowait(&d, "-c", d.conf, "--check-config", NULL);
	cr_assert_eq(h_daemon_wait(&d, 3, 10000), 3);
}

/* On the unix socket, the peer's uid may stand for a user (uid=): no
 * AUTH needed. The tests run as root: uid 0. */
Test(access, a_unix_peer_uid_maps_to_its_user)
{
	struct h_client *c;
	char conf[1024], sock[H_PATH_MAX];
	const char *path =
		h_daemon_write_file(&d, "users",
				    "local " OPS_HASH " uid=0 lock=* read=*\n"
				    "app " APP_HASH " lock=app/\n");
	char *l;
	int i;

	snprintf(sock, sizeof(sock), "%s/dlockd.sock", d.dir);
	snprintf(conf, sizeof(conf),
		 "[server]\nusers_file = %s\nunix_socket = %s\n", path, sock);
	h_daemon_write_conf(&d, conf);
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	c = h_connect_unix(sock);
	l = h_call(c, "HELLO owner=me");
	cr_assert_str_eq(h_kv(l, "user"), "local", "%s", l);
	h_lock(c, "x", "ttl=5s");
	cr_assert_str_eq(h_call(c, "STATS"), "NO DENIED - need=admin");
	/* Logged in by its uid, the connection is never told whether a
	 * secret is right: that would be guessing with no delay, no count
	 * and no log (found from outside). Wrong and right read the same. */
	for (i = 0; i < 5; i++)
		cr_assert(h_starts(h_call(c, "AUTH local wrong-%d-secret", i),
				   "ERR BAD_ARG authenticated already"));
	cr_assert(h_starts(h_call(c, "AUTH local " OPS_SECRET),
			   "ERR BAD_ARG authenticated already"));
	h_close(c);
	/* over TCP the same process is nobody until it says AUTH */
	c = h_connect(d.port);
	cr_assert(h_starts(h_call(c, "LOCK x"), "ERR NOAUTH "));
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* dlockd --new-secret prints a secret and the line for the users file. */
Test(access, new_secret_prints_a_secret_and_its_hash_line)
{
	char cmd[512], out[512] = "";
	const char *bin = getenv("DLOCKD");
	FILE *p;
	char secret[128], hash[128];

	snprintf(cmd, sizeof(cmd), "%s --new-secret 2>/dev/null",
		 bin && bin[0] ? bin : "build/dlockd");
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	cr_assert_not_null(fgets(out, sizeof(out), p));
	cr_assert_eq(pclose(p), 0);
	cr_assert_eq(sscanf(out, "%127s %127s", secret, hash), 2, "%s", out);
	cr_assert_eq(strlen(secret), 64, "%s", out);
	cr_assert(h_starts(hash, "sha256:"), "%s", out);
	cr_assert_eq(strlen(hash), 71);
	/* and that hash is the secret's: it logs in */
	{
		char users[256];
		struct h_client *c;

		snprintf(users, sizeof(users), "u %s lock=*\n", hash);
		start_users(users, NULL);
		c = login("u", secret);
		h_close(c);
		cr_assert_eq(h_daemon_stop(&d), 0);
	}
}

/* ---- BREAK -------------------------------------------------------------- */

/* BREAK needs the break right on the name and a reason; the holder is
 * told who broke its lease, the log says who, from where, whose lease
 * and why, and the denied attempt is counted. */
Test(access, break_needs_the_right_and_a_reason_and_is_audited)
{
	struct h_client *holder, *app, *ops;
	char want[256];
	uint64_t t;
	char *l;

	start_users(USERS, NULL);
	holder = login_as("payments", PAY_SECRET, "w7");
	t = h_lock(holder, "app/db", "ttl=60s");
	app = login("app", APP_SECRET);
	cr_assert_str_eq(h_call(app, "BREAK app/db %llu reason=mine",
				(unsigned long long)t),
			 "NO DENIED app/db need=break");
	ops = login("ops", OPS_SECRET);
	l = h_call(ops, "BREAK app/db %llu", (unsigned long long)t);
	cr_assert(h_starts(l, "ERR BAD_FORMAT missing reason="), "%s", l);
	l = h_call(ops, "BREAK app/db %llu reason=INC-1234:stuck-migration",
		   (unsigned long long)t);
	snprintf(want, sizeof(want), "OK BROKEN app/db %llu",
		 (unsigned long long)t);
	cr_assert_str_eq(l, want);
	h_expect(holder, "* EXPIRED app/db %llu broken_by=ops",
		 (unsigned long long)t);
	snprintf(want, sizeof(want),
		 "audit: BREAK name=app/db token=%llu user=ops peer=127.0.0.1:",
		 (unsigned long long)t);
	cr_assert_eq(log_count(want), 1, "no audit line in %s", d.log);
	cr_assert_eq(log_count("owner=w7 owner_user=payments "
			       "reason=INC-1234:stuck-migration"),
		     1);
	cr_assert_eq(h_stats_value(ops, "breaks"), 1);
	cr_assert_eq(h_stats_value(ops, "errors_denied"), 1);
	h_close(holder);
	h_close(app);
	h_close(ops);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* ---- owners are proven, not claimed -------------------------------------- */

/* The key a HELLO reply gives (static buffer). */
static const char *key_of(const char *hello)
{
	cr_assert(h_starts(hello, "OK HELLO "), "%s", hello);
	return h_kv(hello, "key");
}

/* Found from outside: HELLO owner=alice from any connection, then
 * UNLOCK, REFRESH ttl=24h or a reentry on alice's lease (owner ids and
 * tokens are in STATUS), and alice got no event. Now the id alone is
 * refused while alice's owner lives: NO DENIED alice need=key. Without
 * it, the impostor is another owner: its UNLOCK and REFRESH of alice's
 * token are NOT_HOLDER, its LOCK waits behind alice's lease. */
Test(access, an_owner_id_is_proven_by_its_key_not_claimed)
{
	struct h_client *alice, *eve;
	char key[DL_OWNER_SECRET_MAX + 1], *l;
	uint64_t tok;

	h_daemon_start(&d, "--persist", "none", NULL);
	alice = h_connect(d.port);
	snprintf(key, sizeof(key), "%s",
		 key_of(h_call(alice, "HELLO owner=alice")));
	cr_assert_eq(strlen(key), DL_OWNER_SECRET_NEW, "key %s", key);
	tok = h_lock(alice, "x", "ttl=30s");

	eve = h_connect(d.port);
	cr_assert_str_eq(h_call(eve, "HELLO owner=alice"),
			 "NO DENIED alice need=key");
	cr_assert_str_eq(
		h_call(eve, "HELLO owner=alice key=guessed-guessed-00"),
		"NO DENIED alice need=key");
	l = h_call(eve, "UNLOCK x %llu", (unsigned long long)tok);
	cr_assert_str_eq(l, "NO NOT_HOLDER x");
	l = h_call(eve, "REFRESH x %llu ttl=24h", (unsigned long long)tok);
	cr_assert_str_eq(l, "NO NOT_HOLDER x");
	l = h_call(eve, "LOCK x wait=0");
	cr_assert(h_starts(l, "NO BUSY x "), "%s", l);
	cr_assert_eq(h_stats_value(alice, "owner_denials"), 2);

	/* alice's key, from another connection, is alice */
	l = h_call(eve, "HELLO owner=alice key=%s", key);
	cr_assert_str_eq(key_of(l), key);
	cr_assert_str_eq(h_kv(l, "owner"), "alice");
	l = h_call(eve, "UNLOCK x %llu", (unsigned long long)tok);
	cr_assert_str_eq(l, "OK RELEASED x");
	h_close(alice);
	h_close(eve);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Found from outside: two hosts with one owner id (DLOCK_OWNER=backup)
 * both got OK GRANTED, count=2: two holders by configuration. The second
 * is refused while the first lives; once the owner holds nothing and has
 * no client, its id is free for anyone again (with a new key). */
Test(access, two_clients_that_say_one_owner_id_never_share_a_lock)
{
	struct h_client *h1, *h2;
	char key1[DL_OWNER_SECRET_MAX + 1], *l;
	uint64_t tok;

	h_daemon_start(&d, "--persist", "none", NULL);
	h1 = h_connect(d.port);
	snprintf(key1, sizeof(key1), "%s",
		 key_of(h_call(h1, "HELLO owner=backup")));
	tok = h_lock(h1, "nightly", "ttl=30s");
	h2 = h_connect(d.port);
	cr_assert_str_eq(h_call(h2, "HELLO owner=backup"),
			 "NO DENIED backup need=key");
	l = h_call(h2, "LOCK nightly wait=0");
	cr_assert(h_starts(l, "NO BUSY nightly "), "second host: %s", l);
	l = h_call(h1, "STATUS nightly");
	cr_assert_eq(h_kv_u64(l, "count"), 1, "%s", l);

	h_call(h1, "UNLOCK nightly %llu", (unsigned long long)tok);
	h_close(h1);
	/* once the daemon has seen h1 go (it counts h2 alone), not after a
	 * fixed pause the daemon may take longer than */
	h_wait_stat(h2, "connections", 1, 5000);
	l = h_call(h2, "HELLO owner=backup");
	cr_assert(strcmp(key_of(l), key1) != 0, "the old key came back");
	h_close(h2);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* A key chosen by the client binds a new owner (a script exports
 * DLOCK_OWNER=<id>=<key> once); a short or malformed one is refused;
 * key= goes with owner=; the default owner is random and keyed. */
Test(access, a_chosen_key_binds_a_new_owner_and_bad_keys_are_refused)
{
	struct h_client *c, *c2;
	char anon[DL_OWNER_MAX + 1], want[128], *l;

	h_daemon_start(&d, "--persist", "none", NULL);
	c = h_connect(d.port);
	l = h_call(c, "HELLO");
	snprintf(anon, sizeof(anon), "%s", h_kv(l, "owner"));
	cr_assert(h_starts(anon, "anon-") && strlen(anon) == 21, "%s", anon);
	cr_assert_eq(strlen(key_of(l)), DL_OWNER_SECRET_NEW);
	c2 = h_connect(d.port);
	snprintf(want, sizeof(want), "NO DENIED %s need=key", anon);
	cr_assert_str_eq(h_call(c2, "HELLO owner=%s", anon), want);
	cr_assert(h_starts(h_call(c, "HELLO owner=deploy key=short"),
			   "ERR BAD_ARG "));
	cr_assert(h_starts(h_call(c, "HELLO key=0123456789abcdef0123"),
			   "ERR BAD_FORMAT "));
	l = h_call(c, "HELLO owner=deploy key=chosen-by-the-script-0001");
	cr_assert_str_eq(key_of(l), "chosen-by-the-script-0001");
	h_lock(c, "d", "ttl=30s");
	cr_assert_str_eq(
		h_call(c2, "HELLO owner=deploy key=chosen-by-the-script-0002"),
		"NO DENIED deploy need=key");
	l = h_call(c2, "HELLO owner=deploy key=chosen-by-the-script-0001");
	cr_assert_str_eq(h_kv(l, "owner"), "deploy");
	h_close(c);
	h_close(c2);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* The binding is stored with the owner's leases: after kill -9 and a
 * restart, the owner id alone is still refused, its key still works, and
 * the record says k=<proof> (a hash, not the key). */
Test(access, an_owners_key_binds_it_across_a_restart)
{
	struct h_client *a, *b;
	char key[DL_OWNER_SECRET_MAX + 1], rec[1024], *l;
	uint64_t tok;

	h_redis_start(&r, "always");
	h_daemon_start_redis(&d, &r, NULL);
	a = h_connect(d.port);
	snprintf(key, sizeof(key), "%s",
		 key_of(h_call(a, "HELLO owner=alice")));
	tok = h_lock(a, "x", "ttl=30s");
	snprintf(rec, sizeof(rec), "%s", h_rec_get(&r, "x"));
	cr_assert(strstr(rec, " alice k=") != NULL, "record: %s", rec);
	cr_assert(strstr(rec, key) == NULL, "the key is in Redis: %s", rec);
	h_daemon_kill9(&d);
	h_close(a);
	h_daemon_restart(&d);
	b = h_connect(d.port);
	cr_assert_str_eq(h_call(b, "HELLO owner=alice"),
			 "NO DENIED alice need=key");
	l = h_call(b, "HELLO owner=alice key=%s", key);
	cr_assert(h_starts(l, "OK HELLO "), "%s", l);
	l = h_call(b, "UNLOCK x %llu", (unsigned long long)tok);
	cr_assert_str_eq(l, "OK RELEASED x");
	h_close(b);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* ---- before AUTH --------------------------------------------------------- */

/* Before AUTH a connection has no owner: HELLO owner= is refused, and
 * it receives nobody's events -- not those of the owner it named. */
Test(access, an_unauthenticated_connection_has_no_owner_and_no_events)
{
	struct h_client *carol, *spy;
	char *l;

	h_daemon_write_conf(&d, "[server]\npassword = s3cret-long-enough\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	carol = h_connect(d.port);
	cr_assert_str_eq(h_call(carol, "AUTH s3cret-long-enough"), "OK AUTH");
	cr_assert(h_starts(h_call(carol, "HELLO owner=carol"), "OK HELLO "));
	h_lock(carol, "x", "ttl=300ms");
	spy = h_connect(d.port);
	l = h_call(spy, "HELLO owner=carol");
	cr_assert(h_starts(l, "ERR NOAUTH "), "%s", l);
	l = h_call(spy, "HELLO key=0123456789abcdef");
	cr_assert(h_starts(l, "ERR NOAUTH "), "%s", l);
	h_expect_prefix(carol, "* EXPIRED x ");
	h_expect_silence(spy, 300);
	h_close(carol);
	h_close(spy);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Before AUTH a connection describes nobody: HELLO host= pid= cmd= is
 * refused as HELLO owner= is. */
Test(access, an_unauthenticated_connection_cannot_describe_itself)
{
	struct h_client *c;
	char *l;

	h_daemon_write_conf(&d, "[server]\npassword = s3cret-long-enough\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	c = h_connect(d.port);
	l = h_call(c, "HELLO host=web3 pid=42 cmd=make");
	cr_assert(h_starts(l, "ERR NOAUTH "), "%s", l);
	cr_assert_str_eq(h_call(c, "AUTH s3cret-long-enough"), "OK AUTH");
	l = h_call(c, "HELLO host=web3 pid=42 cmd=make");
	cr_assert(h_starts(l, "OK HELLO "), "%s", l);
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Before AUTH, HELLO says the version and that AUTH is required, and
 * nothing about the server: no node, epoch or limits. */
Test(access, hello_before_auth_says_only_version_and_auth)
{
	struct h_client *c;

	h_daemon_write_conf(&d, "[server]\npassword = s3cret-long-enough\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	c = h_connect(d.port);
	cr_assert_str_eq(h_call(c, "HELLO id=h"),
			 "OK HELLO version=" DL_VERSION " auth=required id=h");
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Silent connections get a share of the slots, and a smaller share per
 * address: 30 of them from one address (max_connections = 30) leave
 * room for a client from another one. */
Test(access, silent_sockets_do_not_lock_out_a_client_from_elsewhere)
{
	struct h_client *silent[30], *c;
	int i, refused = 0;

	h_daemon_write_conf(&d, "[server]\npassword = s3cret-long-enough\n"
				"[limits]\nmax_connections = 30\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	for (i = 0; i < 30; i++) {
		silent[i] = h_try_connect_from("127.0.0.1", d.port);
		cr_assert_not_null(silent[i]);
	}
	for (i = 0; i < 30; i++)
		if (h_wait_closed(silent[i], 20))
			refused++;
	cr_assert_geq(refused, 20, "only %d of 30 refused", refused);
	c = h_try_connect_from("127.0.0.2", d.port);
	cr_assert_not_null(c);
	cr_assert_str_eq(h_call(c, "AUTH s3cret-long-enough"), "OK AUTH");
	h_lock(c, "x", "ttl=5s");
	h_close(c);
	for (i = 0; i < 30; i++)
		h_close(silent[i]);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Silent connections from many addresses, each under the per-address
 * cap, take every place for unauthenticated connections: a new one takes
 * the place of the oldest, which is closed, and logs in. Found from
 * outside: 5,000 silent connections from 625 loopback addresses, renewed
 * as auth_timeout closed them, refused every new client (admins and the
 * unix socket included) with "too many connections not authenticated
 * yet". */
Test(access, silent_sockets_from_many_addresses_give_way_to_a_new_client)
{
	enum { N = 12 };
	struct h_client *silent[N], *c;
	char src[32];
	int i;

	h_daemon_write_conf(&d, "[server]\npassword = s3cret-long-enough\n"
				"[limits]\nmax_unauth_connections = 12\n"
				"max_unauth_per_address = 2\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	for (i = 0; i < N; i++) {
		snprintf(src, sizeof(src), "127.0.3.%d", 1 + i / 2);
		silent[i] = h_try_connect_from(src, d.port);
		cr_assert_not_null(silent[i]);
		cr_assert_str_eq(h_call(silent[i], "PING"), "OK PONG");
	}
	c = h_try_connect_from("127.0.4.1", d.port);
	cr_assert_not_null(c);
	cr_assert_str_eq(h_call(c, "AUTH s3cret-long-enough"), "OK AUTH");
	cr_assert(h_wait_closed(silent[0], 2000),
		  "the oldest silent connection is still open");
	cr_assert_str_eq(h_call(silent[1], "PING"), "OK PONG");
	cr_assert_eq(h_stats_value(c, "connections_evicted"), 1);
	h_close(c);
	for (i = 0; i < N; i++)
		h_close(silent[i]);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Before AUTH a connection makes at most DL_UNAUTH_REQUESTS_MAX requests:
 * the next is refused and the connection closed. Found from outside:
 * 1,000 connections that never logged in pipelined PINGs, each with a
 * turn of the loop of its own, and another user's PING p50 went from
 * 0.05 to 75 ms. A client that logs in is not counted after. */
Test(access, a_connection_makes_few_requests_before_auth)
{
	enum { N = 40 };
	static char buf[N * 5];
	struct h_client *c, *ok;
	char *l;
	int i, pongs = 0;

	start_users(USERS, NULL);
	for (i = 0; i < N; i++)
		memcpy(buf + i * 5, "PING\n", 5);
	c = h_connect(d.port);
	cr_assert_eq(h_send_raw(c, buf, sizeof(buf)), 0);
	while ((l = h_read(c, 5000)) != NULL && strcmp(l, "OK PONG") == 0)
		pongs++;
	cr_assert_eq(pongs, DL_UNAUTH_REQUESTS_MAX);
	cr_assert(l && h_starts(l, "ERR LIMIT limit reached: 32 requests "
				   "before AUTH"),
		  "got \"%s\"", l ? l : "(nothing)");
	cr_assert(h_wait_closed(c, 5000));
	h_close(c);
	/* past AUTH, no such count */
	ok = login("ops", OPS_SECRET);
	cr_assert_eq(h_send_raw(ok, buf, sizeof(buf)), 0);
	for (i = 0; i < N; i++)
		cr_assert_str_eq(h_line(ok), "OK PONG");
	h_close(ok);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* A connection that does not authenticate within auth_timeout is told
 * and closed. */
Test(access, a_connection_that_does_not_authenticate_in_time_is_closed)
{
	struct h_client *c, *ok;
	uint64_t t0;

	struct h_client *piper;
	char *help = malloc(60000);
	int i;

	cr_assert_not_null(help);
	for (i = 0; i + 6 <= 60000; i += 6)
		memcpy(help + i, "HELP\r\n", 6);
	h_daemon_write_conf(&d, "[server]\npassword = s3cret-long-enough\n"
				"auth_timeout = 500ms\n"
				"[limits]\nmax_output = 8192\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	t0 = h_now_ms();
	c = h_connect(d.port);
	ok = h_connect(d.port);
	cr_assert_str_eq(h_call(ok, "AUTH s3cret-long-enough"), "OK AUTH");
	cr_assert_str_eq(h_call(c, "PING"), "OK PONG");
	h_expect(c, "* BYE auth-timeout");
	cr_assert(h_wait_closed(c, 2000));
	cr_assert_geq(h_now_ms() - t0, 450);
	/* one pipelining HELP without reading is closed too: at its 33rd
	 * request before AUTH (DL_UNAUTH_REQUESTS_MAX), or at auth_timeout
	 * if it was paused for its unread output before that */
	piper = h_connect(d.port);
	for (i = 0; i < 20; i++)
		h_send_within(piper, help, 60000, 5);
	cr_assert(h_wait_closed(piper, 2000));
	cr_assert_geq(h_stats_value(ok, "auth_timeouts"), 1);
	/* an authenticated one stays */
	cr_assert_str_eq(h_call(ok, "PING"), "OK PONG");
	h_close(piper);
	h_close(c);
	h_close(ok);
	free(help);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Three failed AUTHs close the connection; failures are logged as a
 * summary per interval, not a line each. */
Test(access, guessing_costs_the_connection_and_the_log_sums_it_up)
{
	struct h_client *c;
	int i, k;

	h_daemon_write_conf(&d, "[server]\npassword = s3cret-long-enough\n"
				"[limits]\nauth_delay = 0\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	for (k = 0; k < 10; k++) {
		c = h_connect(d.port);
		for (i = 0; i < 3; i++)
			cr_assert_str_eq(h_call(c, "AUTH guess%d", i),
					 "NO AUTH_FAILED");
		cr_assert(h_wait_closed(c, 2000), "still open after 3");
		h_close(c);
	}
	c = h_connect(d.port);
	cr_assert_str_eq(h_call(c, "AUTH s3cret-long-enough"), "OK AUTH");
	cr_assert_eq(h_stats_value(c, "auth_failures"), 30);
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
	/* the first failure at once, then one summary for the rest */
	cr_assert_leq(log_count("AUTH failed"), 2, "see %s", d.log);
	cr_assert_eq(log_count("auth: 29 more failed AUTHs from 1 address"), 1,
		     "see %s", d.log);
}

/* ---- quotas ------------------------------------------------------------- */

/* A user's quota holds whatever owner it names: switching HELLO owner=
 * between LOCKs does not get round it. */
Test(access, a_users_quota_holds_whatever_owner_it_says)
{
	struct h_client *c, *o;
	char *l;
	int i;

	start_users("app " APP_HASH " lock=* read=* locks=3 waits=1 conns=2\n"
		    "ops " OPS_HASH " lock=* read=*\n",
		    NULL);
	c = login("app", APP_SECRET);
	for (i = 0; i < 3; i++) {
		cr_assert(
			h_starts(h_call(c, "HELLO owner=o%d", i), "OK HELLO "));
		h_lock(c, i == 0 ? "a" : i == 1 ? "b" : "c", "ttl=30s");
	}
	cr_assert(h_starts(h_call(c, "HELLO owner=o9"), "OK HELLO "));
	l = h_call(c, "LOCK d ttl=30s");
	cr_assert(h_starts(l, "ERR LIMIT "), "%s", l);
	cr_assert(strstr(l, "user app"), "%s", l);
	cr_assert(strstr(l, "locks=3"), "%s", l);
	/* another user is not counted with it */
	o = login("ops", OPS_SECRET);
	h_lock(o, "d", "ttl=30s");
	/* conns=2: a third connection of app is refused */
	{
		struct h_client *c2 = login("app", APP_SECRET);
		struct h_client *c3 = h_connect(d.port);

		l = h_call(c3, "AUTH app " APP_SECRET);
		cr_assert(h_starts(l, "ERR LIMIT "), "%s", l);
		cr_assert(strstr(l, "at most 2 (its conns=)"), "%s", l);
		h_close(c2);
		h_close(c3);
	}
	h_close(c);
	h_close(o);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Found from outside: one user's 400 connections took the daemon's
 * 100000 watches in 0.2 s, and every other user's WATCH was refused. A
 * user's watches are bounded by its watches= (or max_watches_per_user),
 * across its connections, and given back by UNWATCH, by the end of a
 * connection and kept through a reload. */
Test(access, one_user_cannot_take_every_watch)
{
	struct h_client *m1, *m2, *app, *ops;
	char *l;
	int i;

	start_users("ops " OPS_HASH " lock=* read=* watches=20\n"
		    "app " APP_HASH " lock=* read=* watches=2\n"
		    "mal " CI_HASH " lock=m/ read=m/\n",
		    "[limits]\nmax_watches_per_user = 4");
	m1 = login("mal", CI_SECRET);
	m2 = login("mal", CI_SECRET);
	for (i = 0; i < 3; i++)
		cr_assert(h_starts(h_call(m1, "WATCH m/%d", i), "OK WATCHING"));
	cr_assert(h_starts(h_call(m2, "WATCH m/*"), "OK WATCHING"));
	l = h_call(m2, "WATCH m/9");
	cr_assert(h_starts(l, "ERR LIMIT "), "%s", l);
	cr_assert(strstr(l, "user mal has 4 watches, at most 4 "
			    "(max_watches_per_user)"),
		  "%s", l);
	l = h_call(m1, "WATCH m/0"); /* one it has: nothing new */
	cr_assert(h_starts(l, "OK WATCHING m/0"), "%s", l);
	/* the others are not counted with it */
	ops = login("ops", OPS_SECRET);
	for (i = 0; i < 8; i++)
		cr_assert(
			h_starts(h_call(ops, "WATCH m/%d", i), "OK WATCHING"));
	app = login("app", APP_SECRET);
	cr_assert(h_starts(h_call(app, "WATCH a"), "OK WATCHING"));
	cr_assert(h_starts(h_call(app, "WATCH b*"), "OK WATCHING"));
	l = h_call(app, "WATCH c");
	cr_assert(strstr(l, "at most 2 (its watches=)"), "%s", l);
	/* given back: by UNWATCH, by the end of a connection */
	cr_assert(h_starts(h_call(m1, "UNWATCH m/1"), "OK UNWATCHED"));
	cr_assert(h_starts(h_call(m2, "WATCH m/5"), "OK WATCHING"));
	cr_assert(h_starts(h_call(m2, "WATCH m/6"), "ERR LIMIT "));
	h_close(m2);
	h_close(login("ops", OPS_SECRET)); /* m2's end is handled */
	cr_assert(h_starts(h_call(m1, "WATCH m/7"), "OK WATCHING"));
	cr_assert(h_starts(h_call(m1, "WATCH m/8"), "OK WATCHING"));
	cr_assert(h_starts(h_call(m1, "WATCH m/9"), "ERR LIMIT "));
	/* kept through a reload that changes nothing of mal's */
	h_daemon_signal(&d, SIGHUP);
	cr_assert(wait_log("reload: users file", 5000));
	l = h_call(m1, "WATCH m/9");
	cr_assert(strstr(l, "user mal has 4 watches"), "%s", l);
	h_close(m1);
	h_close(app);
	h_close(ops);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Files of secrets that others may read are warned of, at start and at
 * each reload, with the fix; once fixed, nothing more is said. */
Test(access, files_of_secrets_others_may_read_are_warned_of)
{
	char conf[H_PATH_MAX + 64];
	const char *pw =
		h_daemon_write_file(&d, "password", "a-password-of-20-chars\n");
	const char *users;

	cr_assert_eq(chmod(pw, 0644), 0);
	snprintf(conf, sizeof(conf), "[server]\npassword_file = %s\n", pw);
	h_daemon_write_conf(&d, conf);
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	cr_assert(wait_log("password_file", 5000));
	cr_assert_eq(log_count("mode 0644 lets every user read it: chmod 600"),
		     1);
	cr_assert_eq(chmod(pw, 0600), 0);
	h_daemon_signal(&d, SIGHUP);
	cr_assert(wait_log("reload", 5000));
	h_sleep_ms(200);
	cr_assert_eq(log_count("lets every user read it"), 1,
		     "warned again once fixed");
	cr_assert_eq(h_daemon_stop(&d), 0);

	users = h_daemon_write_file(&d, "users", USERS);
	cr_assert_eq(chmod(users, 0640), 0);
	start_users(USERS, NULL);
	cr_assert(wait_log("mode 0640 lets its group read it: chmod 600, "
			   "unless that group must",
			   5000));
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* max_locks bounds the locks of everyone together; a known name is still
 * served. */
Test(access, max_locks_bounds_the_locks_of_all_clients)
{
	struct h_client *a, *b;
	char *l;

	h_daemon_write_conf(&d, "[limits]\nmax_locks = 3\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	a = h_hello(d.port, "a");
	b = h_hello(d.port, "b");
	h_lock(a, "x", "ttl=30s");
	h_lock(b, "y", "ttl=30s");
	h_lock(a, "z", "ttl=30s");
	l = h_call(b, "LOCK w ttl=30s");
	cr_assert(h_starts(l, "ERR LIMIT "), "%s", l);
	cr_assert(strstr(l, "max_locks"), "%s", l);
	cr_assert(h_starts(h_call(b, "LOCK x wait=0"), "NO BUSY x "));
	h_close(a);
	h_close(b);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* ---- reloads ------------------------------------------------------------ */

/* SIGHUP re-reads the users file: a session whose user is gone, whose
 * secret changed or whose rights shrank is told * BYE revoked and
 * closed; the others go on. A file that does not parse changes nothing. */
Test(access, a_reload_ends_the_sessions_whose_rights_are_gone)
{
	struct h_client *ops, *app, *pay, *ci;

	start_users(USERS, NULL);
	ops = login("ops", OPS_SECRET);
	app = login("app", APP_SECRET);
	pay = login("payments", PAY_SECRET);
	ci = login("ci", CI_SECRET);
	h_daemon_write_file(&d, "users", "this line is not valid\n");
	h_daemon_signal(&d, SIGHUP);
	cr_assert(wait_log("users:1:", 5000), "no error in %s", d.log);
	cr_assert_str_eq(h_call(ops, "PING"), "OK PONG");
	/* ops keeps its rights and more; app loses shared/; payments has a
	 * new secret; ci is gone */
	h_daemon_write_file(&d, "users",
			    "ops " OPS_HASH " lock=* read=* break=* admin\n"
			    "app " APP_HASH " lock=app/ read=app/\n"
			    "payments " NEW_HASH " lock=* read=*\n");
	h_daemon_signal(&d, SIGHUP);
	h_expect(app, "* BYE revoked");
	cr_assert(h_wait_closed(app, 2000));
	h_expect(pay, "* BYE revoked");
	cr_assert(h_wait_closed(pay, 2000));
	h_expect(ci, "* BYE revoked");
	cr_assert(h_wait_closed(ci, 2000));
	cr_assert_str_eq(h_call(ops, "PING"), "OK PONG");
	h_close(login("payments", NEW_SECRET));
	h_close(ops);
	h_close(app);
	h_close(pay);
	h_close(ci);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* A password changed and reloaded ends the sessions that gave the old
 * one. */
Test(access, a_password_change_ends_the_sessions_of_the_old_one)
{
	struct h_client *c, *n;

	h_daemon_write_conf(&d, "[server]\npassword = old-password-0123\n");
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	c = h_connect(d.port);
	cr_assert_str_eq(h_call(c, "AUTH old-password-0123"), "OK AUTH");
	h_daemon_write_conf(&d, "[server]\npassword = new-password-4567\n");
	h_daemon_signal(&d, SIGHUP);
	h_expect(c, "* BYE revoked");
	cr_assert(h_wait_closed(c, 2000));
	n = h_connect(d.port);
	cr_assert_str_eq(h_call(n, "AUTH new-password-4567"), "OK AUTH");
	h_close(c);
	h_close(n);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* ---- secrets ----------------------------------------------------------- */

/* A Redis password given with --redis is masked in the daemon's argv
 * (ps(1)); one in redis_password_file never shows at all. */
Test(access, the_redis_password_does_not_show_in_ps)
{
	char url[256], cmdline[4096] = "", path[64];
	struct h_client *c;
	size_t n;
	FILE *f;

	h_redis_start(&r, "always");
	h_redis_cli(&r, "CONFIG SET requirepass pw-in-argv-5b9c");
	snprintf(url, sizeof(url), "redis://:pw-in-argv-5b9c@127.0.0.1:%d/0",
		 r.port);
	h_daemon_start(&d, "--persist", "redis", "--redis", url, NULL);
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)d.pid);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	n = fread(cmdline, 1, sizeof(cmdline) - 1, f);
	fclose(f);
	cmdline[n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (!cmdline[i])
			cmdline[i] = ' ';
	cr_assert(strstr(cmdline, "redis://:***************@127.0.0.1"), "%s",
		  cmdline);
	cr_assert_null(strstr(cmdline, "pw-in-argv"), "%s", cmdline);
	c = h_hello(d.port, "a");
	h_lock(c, "x", "ttl=5s");
	h_close(c);
	cr_assert_eq(h_daemon_stop(&d), 0);
	/* from a file: the URL has none */
	{
		char conf[512];
		const char *pw = h_daemon_write_file(&d, "redis-pw",
						     "pw-in-argv-5b9c\n");

		snprintf(conf, sizeof(conf),
			 "[persistence]\nredis_password_file = %s\n", pw);
		h_daemon_write_conf(&d, conf);
		h_daemon_start(&d, "-c", d.conf, "--persist", "redis",
			       "--redis", r.url, NULL);
		c = h_hello(d.port, "a");
		h_lock(c, "y", "ttl=5s");
		h_close(c);
		cr_assert_eq(h_daemon_stop(&d), 0);
	}
}

/* The daemon makes itself non-dumpable: no core file, and its
 * /proc/<pid>/ files (environ, mem) belong to root, not to the user it
 * runs as. */
Test(access, the_daemon_is_not_dumpable)
{
	char path[64];
	struct stat sb;

	if (geteuid() != 0)
		cr_skip_test("needs root to run the daemon as another user");
	d.user = "daemon";
	h_daemon_start(&d, "--persist", "none", NULL);
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)d.pid);
	cr_assert_eq(stat(path, &sb), 0, "%s: %s", path, strerror(errno));
	cr_assert_eq(sb.st_uid, 0, "%s belongs to uid %u", path,
		     (unsigned)sb.st_uid);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* The unit keeps secrets out of the configuration and out of core
 * dumps. */
Test(access, the_systemd_unit_loads_credentials_and_dumps_no_core)
{
	char unit[8192] = "";
	size_t n;
	FILE *f = fopen("systemd/dlockd.service.in", "r");

	cr_assert_not_null(f);
	n = fread(unit, 1, sizeof(unit) - 1, f);
	fclose(f);
	unit[n] = '\0';
	cr_assert(strstr(unit, "\nLimitCORE=0\n"));
	cr_assert(strstr(unit, "\nLoadCredential=dlockd.password\n"));
	cr_assert(strstr(unit, "\nLoadCredential=dlockd.users\n"));
	cr_assert(strstr(unit, "\nLoadCredential=dlockd.redis-password\n"));
}

/* ---- bounds -------------------------------------------------------------- */

/* LOCKS by=waiters walks every lock under the prefix: after a listing of
 * T ms the same user waits 2T for its next one -- each user its own, so
 * that one cannot deny listings to another (the operator's, here). A
 * page by name walks only the prefixes the user may read (the table's
 * index of names): app's, of the 100,000 locks, and not ops'. */
Test(access, listings_are_spaced_per_user)
{
	enum { N = 100000, CHUNK = 1000 };
	struct h_client *ops, *app;
	char *buf = malloc(CHUNK * 32), *l;
	size_t len;
	int i, j;

	cr_assert_not_null(buf);
	start_users(USERS, "[limits]\nmax_locks_per_user = 200000\n");
	ops = login("ops", OPS_SECRET);
	for (i = 0; i < N; i += CHUNK) {
		for (len = 0, j = i; j < i + CHUNK; j++)
			len += (size_t)sprintf(buf + len,
					       "TRYLOCK app/f%d ttl=1h\n", j);
		cr_assert(h_send_raw(ops, buf, len) == 0);
		for (j = 0; j < CHUNK; j++)
			cr_assert(h_starts(h_line(ops), "OK GRANTED "));
	}
	free(buf);
	app = login("app", APP_SECRET);
	l = h_call(app, "LOCKS limit=1");
	cr_assert(h_starts(l, "OK LOCKS 1 more=99999"), "%s", l);
	cr_assert(h_starts(h_line(app), "app/f0 "));
	l = h_call(app, "LOCKS limit=1 after=app/f5");
	cr_assert(h_starts(l, "OK LOCKS 1 more="), "%s", l);
	cr_assert(h_starts(h_line(app), "app/f50 "));
	/* both in one write: the second comes within the spacing however
	 * slow the machine (found in a loaded run: two calls a round trip
	 * apart let the spacing of a short walk pass) */
	h_send(app, "LOCKS limit=1 by=waiters\nLOCKS limit=1 by=waiters");
	l = h_line(app);
	cr_assert_str_eq(l, "OK LOCKS 0 more=0");
	l = h_line(app);
	cr_assert(h_starts(l, "ERR LIMIT limit reached: a listing costs "),
		  "%s", l);
	/* a prefix under which app may read nothing walks nothing, spaced
	 * or not (found from outside: users who could read none of 100,000
	 * locks listed them in turn, each a walk) */
	for (i = 0; i < 3; i++) {
		l = h_call(app, "LOCKS ops/ limit=1000");
		cr_assert_str_eq(l, "OK LOCKS 0 more=0");
	}
	l = h_call(ops, "LOCKS limit=1");
	cr_assert(h_starts(l, "OK LOCKS 1 more=99999"),
		  "another user is not spaced by app's listing: %s", l);
	h_line(ops);
	h_close(ops);
	h_close(app);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* NO DEADLOCK names the cycle as HOLDERS would: a lock the user may not
 * read is "-", and so is an owner seen only through such locks. */
Test(access, a_deadlock_names_only_what_the_user_may_read)
{
	struct h_client *a, *p[3];
	const char *who[3] = {"p1", "p2", "p3"};
	int i;

	start_users(USERS, NULL);
	a = login_as("app", APP_SECRET, "a1");
	for (i = 0; i < 3; i++)
		p[i] = login_as("payments", PAY_SECRET, who[i]);
	h_lock(p[0], "app/X", "ttl=30s");
	h_lock(p[1], "pay/Y", "ttl=30s");
	h_lock(p[2], "pay/W", "ttl=30s");
	h_lock(a, "app/Z", "ttl=30s");
	h_send(p[0], "LOCK pay/Y ttl=30s");
	h_expect(p[0], "OK QUEUED pay/Y 1");
	h_send(p[1], "LOCK pay/W ttl=30s");
	h_expect(p[1], "OK QUEUED pay/W 1");
	h_send(p[2], "LOCK app/Z ttl=30s");
	h_expect(p[2], "OK QUEUED app/Z 1");
	/* a1 -> app/X (p1) -> pay/Y (p2) -> pay/W (p3) -> app/Z (a1) */
	cr_assert_str_eq(h_call(a, "LOCK app/X ttl=30s"),
			 "NO DEADLOCK app/X 4 p1 user=payments - - - p3 "
			 "user=payments app/Z");
	for (i = 0; i < 3; i++)
		h_close(p[i]);
	h_close(a);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* a holds x, b holds y, a waits for y: the reply to b's LOCK of x,
 * which closes the cycle. */
static char *close_cycle(struct h_client *a, struct h_client *b, const char *x,
			 const char *y)
{
	cr_assert(h_starts(h_call(a, "LOCK %s ttl=1m", x), "OK GRANTED"));
	cr_assert(h_starts(h_call(b, "LOCK %s ttl=1m", y), "OK GRANTED"));
	cr_assert(
		h_starts(h_call(a, "LOCK %s ttl=1m wait=1m", y), "OK QUEUED"));
	return h_call(b, "LOCK %s ttl=1m wait=1m", x);
}

/* A user's deadlock checks are paid from its budget of steps a second
 * (max_deadlock_steps_per_user): spent (0 here), its waits are not
 * checked -- a cycle waits, as when a check gives up, and is counted --
 * so that one user's long wait chains cannot take the loop from the
 * others (found from outside: a 990-owner chain made each blocked LOCK
 * cost 9.4 us, and another user's PING p50 went from 0.09 to 55 ms). The
 * setting is live: with the default budget, the same cycle is refused. */
Test(access, a_users_deadlock_checks_are_paid_from_its_budget)
{
	char conf[2048], *l;
	struct h_client *a, *b, *c, *e;

	start_users("ops " OPS_HASH " lock=* read=* admin\n"
		    "mal " CI_HASH " lock=m/ read=m/\n",
		    "[limits]\nmax_deadlock_steps_per_user = 0");
	a = login_as("mal", CI_SECRET, "m1");
	b = login_as("mal", CI_SECRET, "m2");
	l = close_cycle(a, b, "m/a", "m/b");
	cr_assert(h_starts(l, "OK QUEUED m/a"), "unchecked: %s", l);
	/* both of mal's waits went unchecked */
	cr_assert_eq(h_stats_value(login("ops", OPS_SECRET),
				   "deadlock_walks_capped"),
		     2);
	/* the default budget, live: the same cycle is refused */
	snprintf(conf, sizeof(conf), "[server]\nusers_file = %s/users\n",
		 d.dir);
	h_daemon_write_conf(&d, conf);
	h_daemon_signal(&d, SIGHUP);
	cr_assert(
		wait_log("max_deadlock_steps_per_user changed, applied", 5000));
	c = login_as("mal", CI_SECRET, "m3");
	e = login_as("mal", CI_SECRET, "m4");
	l = close_cycle(c, e, "m/c", "m/e");
	cr_assert(h_starts(l, "NO DEADLOCK m/c"), "%s", l);
	h_close(a);
	h_close(b);
	h_close(c);
	h_close(e);
}

/* One address's new connections that must authenticate are rate-limited
 * (max_connects_per_address a second, a bucket of that many), refused as
 * they are accepted, before any TLS handshake: found from outside, one
 * address made 1,905 TLS handshakes a second (44 % of a core) within
 * max_unauth_per_address, which limits connections at once, not their
 * rate. Another address has a bucket of its own. */
Test(access, new_connections_from_one_address_are_rate_limited)
{
	struct h_client *c;
	uint64_t t0, took;
	int i, ok = 0, refused = 0;
	char *l;

	start_users("app " APP_HASH " lock=* read=*\n",
		    "[limits]\nmax_connects_per_address = 1");
	h_sleep_ms(1100); /* the start's probe took the bucket's one */
	t0 = h_now_ms();
	for (i = 0; i < 10; i++) {
		c = h_try_connect(d.port);
		cr_assert(c, "connect %d", i);
		h_send(c, "AUTH app %s", APP_SECRET);
		l = h_read(c, 5000);
		if (l && h_starts(l, "OK AUTH"))
			ok++;
		else if (l && strstr(l, "ERR LIMIT too many new connections "
					"from this address "
					"(max_connects_per_address"))
			refused++;
		else
			cr_assert_fail("connect %d: \"%s\"", i, l ? l : "");
		h_close(c);
	}
	took = h_now_ms() - t0;
	/* a bucket of one, one more a second */
	cr_assert(ok >= 1 && ok <= 2 + (int)(took / 1000),
		  "%d accepted in %llu ms", ok, (unsigned long long)took);
	cr_assert_eq(ok + refused, 10);
	c = h_try_connect_from("127.0.0.2", d.port);
	cr_assert(c);
	cr_assert(h_starts(h_call(c, "AUTH app %s", APP_SECRET), "OK AUTH"));
	h_close(c);
}

/* The output budget is shared fairly: one user of the users file holds at
 * most max_output_per_user of unread output (a quarter of
 * max_output_total by default), and past it its own biggest connection is
 * closed, never another user's. Before, one user's clients that never
 * read could fill the whole budget, and the connection closed to make
 * room was the biggest of all, whoever's it was. */
Test(access, one_users_unread_output_cannot_close_anothers)
{
	enum { N = 40, HOLDERS = 1000, SHARE = 1024 * 1024 };
	static struct h_client *m[N];
	struct h_client *o, *a[2], *ops;
	char conf[2048], sock[H_PATH_MAX + 16], *l;
	const char *path =
		h_daemon_write_file(&d, "users",
				    "ops " OPS_HASH " lock=* read=* admin\n"
				    "app " APP_HASH " lock=* read=*\n"
				    "mal " CI_HASH " lock=* read=*\n");
	uint64_t held;
	int i, k, n;

	snprintf(sock, sizeof(sock), "%s/dlockd.sock", d.dir);
	snprintf(conf, sizeof(conf),
		 "[server]\nusers_file = %s\nunix_socket = %s\n"
		 "[limits]\nmax_output_total = %d\nmax_output_per_user = %d\n",
		 path, sock, 4 * SHARE, SHARE);
	h_daemon_write_conf(&d, conf);
	h_daemon_start(&d, "-c", d.conf, "--persist", "none", NULL);
	o = login("ops", OPS_SECRET);
	h_described_holders(o, "big", HOLDERS);
	/* app asks twice and does not read yet: within its share */
	for (k = 0; k < 2; k++) {
		a[k] = h_connect_unix(sock);
		cr_assert(h_starts(h_call(a[k], "AUTH app %s", APP_SECRET),
				   "OK AUTH"));
		h_send(a[k], "HOLDERS big");
	}
	h_sleep_ms(200);
	/* mal asks from 40 connections and never reads */
	for (i = 0; i < N; i++) {
		m[i] = h_connect_unix(sock);
		cr_assert(h_starts(h_call(m[i], "AUTH mal %s", CI_SECRET),
				   "OK AUTH"));
		h_send(m[i], "HOLDERS big");
	}
	h_sleep_ms(1000);
	ops = login("ops", OPS_SECRET);
	held = h_stats_value(ops, "output_buffered_bytes");
	cr_assert_geq(h_stats_value(ops, "output_budget_closes"), 1);
	/* mal's share, app's two replies and a reply's slack: far from the
	 * 4 MiB mal alone filled before */
	cr_assert_leq(held, 3 * SHARE, "%llu bytes held",
		      (unsigned long long)held);
	/* app's connections were not closed for mal: every line comes */
	for (k = 0; k < 2; k++) {
		l = h_line(a[k]);
		cr_assert(h_starts(l, "OK HOLDERS big "), "%s", l);
		n = (int)h_arg_u64(l, 1);
		cr_assert_eq(n, HOLDERS, "%s", l);
		for (i = 0; i < n; i++)
			cr_assert(h_starts(h_line(a[k]), "holder "), "line %d",
				  i);
		h_close(a[k]);
	}
	for (i = 0; i < N; i++)
		h_close(m[i]);
	h_close(o);
	h_close(ops);
}

/* The connections of one user share one turn of requests per loop
 * iteration: another user's request, read in the same iteration just
 * after ten pipelines of the first, runs after one turn of them, not ten.
 * Found from outside: 50 connections of one user pipelining long
 * listings made another user's PING p50 2 ms (0.04 idle). All arrive
 * while the daemon is stopped, the pipelines first, so that the daemon
 * reads them in one iteration in that order; the STATS of the second
 * user says how many requests ran before it. */
Test(access, one_users_connections_share_a_turn_per_iteration)
{
	enum { K = 10, N = 2000 };
	static char buf[N * 5];
	struct h_client *a[K], *b;
	uint64_t before, ran;
	int i, j;

	start_users(USERS, NULL);
	for (i = 0; i < K; i++)
		a[i] = login("payments", PAY_SECRET);
	b = login("ops", OPS_SECRET);
	for (i = 0; i < N; i++)
		memcpy(buf + i * 5, "PING\n", 5);
	before = h_stats_value(b, "commands");
	h_daemon_signal(&d, SIGSTOP);
	for (i = 0; i < K; i++)
		cr_assert_eq(h_send_raw(a[i], buf, sizeof(buf)), 0);
	h_sleep_ms(100);
	h_send(b, "STATS");
	h_sleep_ms(100);
	h_daemon_signal(&d, SIGCONT);
	ran = h_stats_reply(b, "commands", 10000) - before;
	/* a turn of the first user's (256) and the STATS: without a share
	 * per user, a turn of each of its ten connections ran first */
	cr_assert_lt(ran, 3 * 256, "%llu requests ran before the STATS",
		     (unsigned long long)ran);
	for (i = 0; i < K; i++) {
		for (j = 0; j < N; j++)
			cr_assert_str_eq(h_line(a[i]), "OK PONG");
		h_close(a[i]);
	}
	h_close(b);
	cr_assert_eq(h_daemon_stop(&d), 0);
}

/* Found by review: a multi-lock's rights were checked on its first name
 * alone, so app (lock=app/) took secret/x as a second name. Every name
 * is checked, before anything is taken. */
Test(access, a_multi_lock_needs_the_right_on_every_name)
{
	struct h_client *app, *ops;

	start_users(USERS, NULL);
	app = login_as("app", APP_SECRET, "a1");
	ops = login_as("ops", OPS_SECRET, "o1");
	cr_assert_str_eq(h_call(app, "LOCK app/a secret/x"),
			 "NO DENIED secret/x need=lock");
	cr_assert_str_eq(h_call(app, "LOCK zz app/b"),
			 "NO DENIED zz need=lock");
	h_expect_status(ops, "app/a", "free", 0, NULL, 0);
	h_expect_status(ops, "app/b", "free", 0, NULL, 0);
	h_expect_status(ops, "secret/x", "free", 0, NULL, 0);
	cr_assert(
		h_starts(h_call(app, "LOCK app/a app/b"), "OK LOCKED app/a 2"));
	h_close(app);
	h_close(ops);
}

/* Found from outside: a multi-lock over a user's quota was told "fencing
 * tokens exhausted": what it took was given back before the reply
 * counted it. The reply names the quota, as a single LOCK's does. */
Test(access, a_multi_lock_over_a_quota_names_the_quota)
{
	struct h_client *app;
	const char *l;

	start_users("app " APP_HASH " lock=app/ read=app/ locks=2\n", NULL);
	app = login_as("app", APP_SECRET, "a1");
	l = h_call(app, "LOCK app/a app/b app/c");
	cr_assert(h_starts(l, "ERR LIMIT limit reached: user app holds"),
		  "\"%s\"", l);
	cr_assert(strstr(l, "locks=2") != NULL, "\"%s\"", l);
	h_expect_status(app, "app/a", "free", 0, NULL, 0);
	cr_assert(
		h_starts(h_call(app, "LOCK app/a app/b"), "OK LOCKED app/a 2"));
	h_close(app);
}
