/* SPDX-License-Identifier: MIT */
/*
 * test_config.c -- configuration: defaults, the INI file, flags, reloads,
 * Redis URLs (server/config.h).
 */
#include <criterion/criterion.h>
#include <criterion/new/assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/proto.h"
#include "server/config.h"

static char path[64];

/* Write text to a fresh temporary file; its path is in `path`. */
static const char *conf(const char *text)
{
	int fd;

	if (path[0])
		unlink(path); /* the test's previous one: only one is kept */
	snprintf(path, sizeof(path), "/tmp/dlockd-conf-XXXXXX");
	fd = mkstemp(path);
	cr_assert(fd >= 0);
	cr_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void drop(void)
{
	if (path[0])
		unlink(path);
}

TestSuite(config, .fini = drop);

static int load(struct dl_config *c, const char *text, char *err)
{
	return dl_config_load(c, text ? conf(text) : NULL, NULL, 0, err,
			      DL_CONFIG_ERR_MAX);
}

#define expect_err(text, needle)                                               \
	do {                                                                   \
		struct dl_config c_;                                           \
		char err_[DL_CONFIG_ERR_MAX] = "";                             \
		cr_assert(eq(int, load(&c_, (text), err_), DL_EBADARG));       \
		cr_assert(strstr(err_, (needle)) != NULL,                      \
			  "error \"%s\" does not mention \"%s\"", err_,        \
			  (needle));                                           \
		dl_config_free(&c_);                                           \
	} while (0)

Test(config, defaults_are_safe_and_valid)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX];

	cr_assert(eq(int, load(&c, NULL, err), 0));
	cr_assert(strcmp(c.bind, "127.0.0.1") == 0);
	cr_assert(eq(u64, c.port, DL_DEFAULT_PORT));
	cr_assert(eq(u64, c.persist, DL_PERSIST_REDIS));
	cr_assert(eq(u64, c.default_ttl_ms, DL_DEFAULT_TTL_MS));
	cr_assert(eq(u64, c.max_output, DL_DEFAULT_MAX_OUTPUT));
	cr_assert(c.password[0] == '\0');
	dl_config_free(&c);
}

Test(config, the_shipped_example_file_loads)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "";

	cr_assert(eq(int,
		     dl_config_load(&c, "conf/dlockd.conf", NULL, 0, err,
				    sizeof(err)),
		     0),
		  "conf/dlockd.conf: %s", err);
	dl_config_free(&c);
}

Test(config, every_kind_of_value_is_parsed)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "";

	cr_assert(eq(int,
		     load(&c,
			  "[server]\nport = 9000\nlog_level = debug\n"
			  "password = a=b,c\n"
			  "[limits]\ndefault_ttl = 2m\nmax_ttl = 3m\n"
			  "tick = 5ms\nmax_output = 8192\n"
			  "[persistence]\npersist = none\n"
			  "restore_grace = 1500ms\n",
			  err),
		     0),
		  "%s", err);
	cr_assert(eq(u64, c.port, 9000));
	cr_assert(eq(u64, c.log_level, 4));
	cr_assert(strcmp(c.password, "a=b,c") == 0, "password %s", c.password);
	cr_assert(eq(u64, c.default_ttl_ms, 120000));
	cr_assert(eq(u64, c.tick_ms, 5));
	cr_assert(eq(u64, c.persist, DL_PERSIST_NONE));
	cr_assert(eq(u64, c.restore_grace_ms, 1500));
	dl_config_free(&c);
}

Test(config, unknown_keys_and_sections_are_errors_with_file_and_line)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "", want[128];

	cr_assert(eq(int, load(&c, "[server]\nport = 1\nprot = 2\n", err),
		     DL_EBADARG));
	snprintf(want, sizeof(want), "%s:3: unknown key 'prot' in [server]",
		 path);
	cr_assert(strcmp(err, want) == 0, "expected \"%s\", got \"%s\"", want,
		  err);
	dl_config_free(&c);
	expect_err("[serverr]\nport = 1\n", "unknown section [serverr]");
	expect_err("port = 1\n", "unknown section []");
	expect_err("[server]\nthis is not ini\n", ":2:");
}

Test(config, bad_values_are_rejected_with_the_reason)
{
	expect_err("[server]\nport = 70000\n", "out of range");
	expect_err("[server]\nport = http\n", "not a number");
	expect_err("[limits]\ndefault_ttl = 5d\n", "not a duration");
	expect_err("[limits]\nmax_ttl = 1200h\n", "out of range");
	expect_err("[limits]\ndefault_ttl = -1s\n", "not a duration");
	expect_err("[limits]\ntick = 0\n", "out of range");
	/* a bare number is not a duration in a file: 30 ms or 30 s? */
	expect_err("[limits]\ndefault_ttl = 30\n",
		   ":2: default_ttl: '30' needs a unit: 30ms, 30s, 30m or 30h");
	expect_err("[limits]\nmax_output = 100\n", "out of range");
	expect_err("[server]\nlog_level = loud\n", "expected error");
	expect_err("[persistence]\npersist = disk\n", "none or redis");
	expect_err("[server]\nallow_remote_without_password = maybe\n",
		   "yes or no");
	expect_err("[limits]\ndefault_ttl = 10m\nmax_ttl = 1m\n",
		   "above max_ttl");
	expect_err("[persistence]\nredis = http://x\n", "bad URL");
}

/* [cluster] peers: other nodes' ids, with a node_id of one's own. */
Test(config, peers_name_other_nodes)
{
	struct dl_config c;
	char err[256];

	expect_err("[cluster]\npeers = b\n", "peers needs node_id");
	expect_err("[cluster]\nnode_id = a\npeers = b a\n",
		   "a is this daemon's own node_id");
	expect_err("[cluster]\nnode_id = a\npeers = b,b\n", "b is named twice");
	expect_err("[cluster]\nnode_id = a\npeers = b c/d\n",
		   "c/d is not a node id");
	expect_err("[cluster]\nnode_id = a\npeers = b c d e f g h i j\n",
		   "at most 8 node ids");
	cr_assert_eq(load(&c, "[cluster]\nnode_id = a\npeers = b, c\n", err), 0,
		     "%s", err);
	cr_assert_str_eq(c.peers, "b, c");
	dl_config_free(&c);
}

/* Every duration key, not only default_ttl, refuses "30" with the file
 * and line: the keys are those --check-config prints in ms, so a key added
 * later is checked too. */
Test(config, every_duration_key_refuses_a_bare_number_with_file_and_line)
{
	char line[256], section[64] = "", key[64], text[256], want[256];
	struct dl_config c;
	int n = 0, fd;
	FILE *f;

	dl_config_defaults(&c);
	f = tmpfile();
	cr_assert_not_null(f);
	fd = fileno(f);
	dl_config_dump(&c, fd);
	dl_config_free(&c);
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long v;
		char unit[8];

		if (sscanf(line, "[%63[^]]]", section) == 1)
			continue;
		if (sscanf(line, "%63s = %llu%7s", key, &v, unit) != 3 ||
		    strcmp(unit, "ms") != 0)
			continue;
		snprintf(text, sizeof(text), "[%s]\n%s = 30\n", section, key);
		snprintf(want, sizeof(want),
			 ":2: %s: '30' needs a unit: 30ms, 30s, 30m or 30h",
			 key);
		expect_err(text, want);
		n++;
	}
	fclose(f);
	/* auth_timeout ... leader_lease: 11 when this test was written */
	cr_assert(n >= 11, "%d duration keys found", n);
}

Test(config, a_public_address_needs_a_password_or_an_explicit_yes)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "";

	expect_err("[server]\nbind = 0.0.0.0\n", "without a password");
	cr_assert(eq(int,
		     load(&c,
			  "[server]\nbind = 0.0.0.0\n"
			  "password = x-long-enough-0123\n",
			  err),
		     0),
		  "%s", err);
	dl_config_free(&c);
	cr_assert(eq(int,
		     load(&c,
			  "[server]\nbind = ::\n"
			  "allow_remote_without_password = yes\n",
			  err),
		     0));
	dl_config_free(&c);
	cr_assert(eq(int, load(&c, "[server]\nbind = ::1\n", err), 0));
	dl_config_free(&c);
}

Test(config, flags_override_the_file)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "";
	struct dl_override ov[] = {
		{"server", "port", "7777"},
		{"persistence", "persist", "none"},
	};

	cr_assert(eq(int,
		     dl_config_load(&c,
				    conf("[server]\nport = 1234\n"
					 "[persistence]\npersist = redis\n"),
				    ov, 2, err, sizeof(err)),
		     0),
		  "%s", err);
	cr_assert(eq(u64, c.port, 7777));
	cr_assert(eq(u64, c.persist, DL_PERSIST_NONE));
	dl_config_free(&c);
	ov[0].value = "port";
	cr_assert(eq(int, dl_config_load(&c, NULL, ov, 1, err, sizeof(err)),
		     DL_EBADARG));
	cr_assert(strstr(err, "command line") != NULL, "%s", err);
	dl_config_free(&c);
}

struct diff {
	int n, live;
	char keys[256];
};

static void report(const char *section, const char *key, int live, void *arg)
{
	struct diff *d = arg;

	(void)section;
	d->n++;
	d->live += live;
	strncat(d->keys, key, sizeof(d->keys) - strlen(d->keys) - 2);
	strcat(d->keys, " ");
}

Test(config, reload_reports_changes_and_applies_only_live_keys)
{
	struct dl_config a, b;
	struct diff d = {0};
	char err[DL_CONFIG_ERR_MAX];

	cr_assert(eq(int, load(&a, "[server]\nport = 1000\n", err), 0));
	cr_assert(eq(int,
		     load(&b,
			  "[server]\nport = 2000\npassword = new\n"
			  "[limits]\nmax_waiters_per_lock = 7\n",
			  err),
		     0));
	cr_assert(eq(sz, dl_config_diff(&a, &b, report, &d), 3));
	cr_assert(eq(int, d.live, 2), "changed: %s", d.keys);
	cr_assert(eq(int, dl_config_apply_live(&a, &b), 0));
	cr_assert(eq(u64, a.port, 1000), "port is not live");
	cr_assert(eq(u64, a.max_waiters, 7));
	cr_assert(strcmp(a.password, "new") == 0);
	dl_config_free(&a);
	dl_config_free(&b);
}

Test(config, redis_urls)
{
	struct dl_redis_addr a;

	cr_assert(
		eq(int, dl_redis_url_parse("redis://10.0.0.1:6380/3", &a), 0));
	cr_assert(strcmp(a.host, "10.0.0.1") == 0);
	cr_assert(eq(int, a.port, 6380));
	cr_assert(eq(int, a.db, 3));
	cr_assert(a.password == NULL);
	dl_redis_addr_free(&a);

	cr_assert(eq(int, dl_redis_url_parse("redis://:p%40ss@h", &a), 0));
	cr_assert(strcmp(a.password, "p%40ss") == 0);
	cr_assert(eq(int, a.port, 6379));
	cr_assert(eq(int, a.db, 0));
	dl_redis_addr_free(&a);

	cr_assert(eq(int, dl_redis_url_parse("redis://[::1]:7000", &a), 0));
	cr_assert(strcmp(a.host, "::1") == 0);
	cr_assert(eq(int, a.port, 7000));
	dl_redis_addr_free(&a);

	cr_assert(
		eq(int,
		   dl_redis_url_parse("unix:///run/r.sock?db=2&password=x", &a),
		   0));
	cr_assert(strcmp(a.path, "/run/r.sock") == 0);
	cr_assert(eq(int, a.db, 2));
	cr_assert(strcmp(a.password, "x") == 0);
	cr_assert(a.host == NULL);
	dl_redis_addr_free(&a);

	cr_assert(
		eq(int, dl_redis_url_parse("redis://h:99999", &a), DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("redis://", &a), DL_EBADARG));
	cr_assert(
		eq(int, dl_redis_url_parse("unix://rel.sock", &a), DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("unix:///s?bogus=1", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("tcp://h:1", &a), DL_EBADARG));
}

Test(config, sentinel_urls)
{
	struct dl_redis_addr a;

	cr_assert(
		eq(int,
		   dl_redis_url_parse("sentinel://:sp@10.0.0.1:26380,h2,[::1]:"
				      "5000/mymaster?db=2&password=rp",
				      &a),
		   0));
	cr_assert(eq(int, a.nseeds, 3));
	cr_assert_str_eq(a.seed_host[0], "10.0.0.1");
	cr_assert(eq(int, a.seed_port[0], 26380));
	cr_assert_str_eq(a.seed_host[1], "h2");
	cr_assert(eq(int, a.seed_port[1], DL_SENTINEL_DEFAULT_PORT));
	cr_assert_str_eq(a.seed_host[2], "::1");
	cr_assert(eq(int, a.seed_port[2], 5000));
	cr_assert_str_eq(a.master, "mymaster");
	cr_assert_str_eq(a.sentinel_password, "sp");
	cr_assert_str_eq(a.password, "rp");
	cr_assert(eq(int, a.db, 2));
	cr_assert_null(a.host);
	dl_redis_addr_free(&a);

	cr_assert(eq(int, dl_redis_url_parse("sentinel://h/m", &a), 0));
	cr_assert(eq(int, a.nseeds, 1));
	cr_assert_null(a.sentinel_password);
	cr_assert_null(a.password);
	dl_redis_addr_free(&a);

	/* no master, no Sentinel, too many, bad port, empty entry */
	cr_assert(
		eq(int, dl_redis_url_parse("sentinel://h:1", &a), DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("sentinel://h/", &a), DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("sentinel:///m", &a), DL_EBADARG));
	cr_assert(eq(int,
		     dl_redis_url_parse("sentinel://a,b,c,d,e,f,g,h,i/m", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("sentinel://h:0/m", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("sentinel://h:x/m", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("sentinel://a,,b/m", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("sentinel://h/m?x=1", &a),
		     DL_EBADARG));
}

Test(config, cluster_urls)
{
	struct dl_redis_addr a;

	cr_assert(eq(int,
		     dl_redis_url_parse("redis-cluster://app:pw@10.0.0.1:7000,"
					"h2,[::1]:7002",
					&a),
		     0));
	cr_assert(a.cluster);
	cr_assert(eq(int, a.nseeds, 3));
	cr_assert_str_eq(a.seed_host[0], "10.0.0.1");
	cr_assert(eq(int, a.seed_port[0], 7000));
	cr_assert_str_eq(a.seed_host[1], "h2");
	cr_assert(eq(int, a.seed_port[1], DL_REDIS_DEFAULT_PORT));
	cr_assert_str_eq(a.seed_host[2], "::1");
	cr_assert_str_eq(a.user, "app");
	cr_assert_str_eq(a.password, "pw");
	cr_assert_null(a.host);
	cr_assert_null(a.master);
	dl_redis_addr_free(&a);

	cr_assert(eq(int,
		     dl_redis_url_parse("redis-cluster://h/?password=p", &a),
		     0));
	cr_assert(eq(int, a.nseeds, 1));
	cr_assert_str_eq(a.password, "p");
	dl_redis_addr_free(&a);

	/* no node, a db (a cluster has db 0 only), an empty entry */
	cr_assert(eq(int, dl_redis_url_parse("redis-cluster://", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("redis-cluster://h/1", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("redis-cluster://h?db=1", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("redis-cluster://a,,b", &a),
		     DL_EBADARG));
	cr_assert(eq(int, dl_redis_url_parse("redis-cluster://h:0", &a),
		     DL_EBADARG));
}

Test(config, a_cluster_needs_a_tagged_prefix)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "";

	cr_assert(eq(int,
		     load(&c,
			  "[persistence]\npersist = redis\n"
			  "redis = redis-cluster://127.0.0.1:7000\n",
			  err),
		     DL_EBADARG));
	cr_assert(strstr(err, "hash tag") != NULL, "%s", err);
	cr_assert(eq(int,
		     load(&c,
			  "[persistence]\npersist = redis\n"
			  "redis = redis-cluster://127.0.0.1:7000\n"
			  "redis_prefix = dlock:{}:\n",
			  err),
		     DL_EBADARG));
	cr_assert(eq(int,
		     load(&c,
			  "[persistence]\npersist = redis\n"
			  "redis = redis-cluster://127.0.0.1:7000\n"
			  "redis_prefix = dlock:{a}:\n",
			  err),
		     0),
		  "%s", err);
}

Test(config, loopback_addresses)
{
	cr_assert(dl_addr_is_loopback("127.0.0.1"));
	cr_assert(dl_addr_is_loopback("127.1.2.3"));
	cr_assert(dl_addr_is_loopback("::1"));
	cr_assert(dl_addr_is_loopback("localhost"));
	cr_assert(dl_addr_is_loopback("0.0.0.0") == 0);
	cr_assert(dl_addr_is_loopback("10.0.0.1") == 0);
	cr_assert(dl_addr_is_loopback("::") == 0);
	cr_assert(dl_addr_is_loopback("example.com") == 0);
}

/* A key given twice is an error naming both lines (the second would
 * silently win otherwise); a file that cannot be opened says why. */
Test(config, a_key_given_twice_names_both_lines_and_a_missing_file_says_why)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "";

	expect_err("[limits]\n; a comment\nmax_ttl = 1h\n\n[server]\nport = 1\n"
		   "[limits]\nmax_ttl = 2h\n",
		   "'max_ttl' in [limits] given twice, lines 3 and 8");
	cr_assert(eq(int,
		     dl_config_load(&c, "/nonexistent/dlockd.conf", NULL, 0,
				    err, sizeof(err)),
		     DL_EBADARG));
	cr_assert(strstr(err, "/nonexistent/dlockd.conf: cannot open: No such "
			      "file or directory") != NULL,
		  "%s", err);
	dl_config_free(&c);
}

/* The metrics page tells how busy which locks are: off loopback it needs
 * TLS, or an operator's explicit yes. */
Test(config, a_metrics_page_off_loopback_needs_tls_or_an_explicit_yes)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX];

	expect_err("[metrics]\nlisten = 0.0.0.0:9100\n",
		   "allow_remote_without_tls");
	expect_err("[metrics]\nlisten = 10.1.2.3:9100\n", "TLS is off");
	cr_assert(eq(int,
		     load(&c,
			  "[metrics]\nlisten = 0.0.0.0:9100\n"
			  "allow_remote_without_tls = yes\n",
			  err),
		     0),
		  "%s", err);
	dl_config_free(&c);
	cr_assert(eq(int,
		     load(&c,
			  "[metrics]\nlisten = 0.0.0.0:9100\n"
			  "[tls]\ncert = /x.pem\nkey = /x.key\n",
			  err),
		     0),
		  "%s", err);
	dl_config_free(&c);
	cr_assert(eq(int, load(&c, "[metrics]\nlisten = [::1]:9100\n", err), 0),
		  "%s", err);
	dl_config_free(&c);
}

Test(config, tls_keys_go_together)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX];

	expect_err("[tls]\ncert = /x.pem\n", "cert and key go together");
	expect_err("[tls]\nkey = /x.key\n", "cert and key go together");
	expect_err("[tls]\nca = /ca.pem\n", "need cert and key");
	expect_err("[tls]\ncert = /x.pem\nkey = /x.key\nverify_clients = yes\n",
		   "verify_clients needs ca");
	expect_err("[tls]\nhandshake_timeout = 10ms\n", "out of range");
	cr_assert(eq(int,
		     load(&c,
			  "[tls]\ncert = /x.pem\nkey = /x.key\nca = /ca.pem\n"
			  "verify_clients = yes\nhandshake_timeout = 2s\n",
			  err),
		     0),
		  "%s", err);
	cr_assert(eq(u64, c.tls_handshake_timeout_ms, 2000));
	cr_assert(eq(u64, c.tls_verify_clients, 1));
	dl_config_free(&c);
}

/* A file of one line, written in a fresh temporary directory; its path
 * (static buffer). */
static const char *secret_file(const char *name, const char *text)
{
	static char dir[64], p[128];
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/dlockd-sec-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	return p;
}

/* inih takes " ;" for a comment: "password = abc ;def" would silently
 * be "abc". A secret in the file with ';' or '#' is refused, loudly. */
Test(config, a_secret_with_a_semicolon_or_hash_is_refused_not_cut)
{
	expect_err("[server]\npassword = abc ;def\n",
		   "password: a secret here may not contain ';' or '#'");
	expect_err("[server]\npassword = abc#def\n", "password_file");
	expect_err("[persistence]\nredis = redis://:p;w@127.0.0.1:6379/0\n",
		   "redis: a secret here may not contain");
}

/* Secrets from files: the whole first line, its newline stripped. */
Test(config, secrets_come_from_files_whole_first_line)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "", text[512];
	const char *pw = secret_file("pw", "abc ;def#1234567890\nignored\n");
	char pwpath[128];

	snprintf(pwpath, sizeof(pwpath), "%s", pw);
	snprintf(text, sizeof(text),
		 "[server]\npassword_file = %s\n"
		 "[persistence]\nredis_password_file = %s\n",
		 pwpath, secret_file("rpw", "r3d!s pw\n"));
	cr_assert(eq(int, load(&c, text, err), 0), "%s", err);
	cr_assert(strcmp(c.password, "abc ;def#1234567890") == 0, "%s",
		  c.password);
	cr_assert(strcmp(c.redis_password, "r3d!s pw") == 0, "%s",
		  c.redis_password);
	dl_config_free(&c);
	/* one source of a secret */
	snprintf(text, sizeof(text),
		 "[server]\npassword = x\npassword_file = %s\n", pwpath);
	expect_err(text, "password and password_file");
	snprintf(text, sizeof(text),
		 "[persistence]\nredis = redis://:pw@h:1/0\n"
		 "redis_password_file = %s\n",
		 pwpath);
	expect_err(text, "a password in the redis URL and redis_password_file");
	expect_err("[server]\npassword_file = /nonexistent/pw\n",
		   "password_file /nonexistent/pw: cannot open");
	snprintf(text, sizeof(text), "[server]\npassword_file = %s\n",
		 secret_file("empty", "\n"));
	expect_err(text, "no secret on its first line");
}

/* Under systemd, LoadCredential= puts the secrets in
 * $CREDENTIALS_DIRECTORY: used when the file names none. */
Test(config, systemd_credentials_supply_the_secrets)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "", dir[128];
	const char *p = secret_file("dlockd.password", "from-credential\n");

	snprintf(dir, sizeof(dir), "%.*s", (int)(strrchr(p, '/') - p), p);
	secret_file("x", ""); /* another directory: p is still there */
	setenv("CREDENTIALS_DIRECTORY", dir, 1);
	cr_assert(eq(int, load(&c, NULL, err), 0), "%s", err);
	cr_assert(strcmp(c.password, "from-credential") == 0, "%s", c.password);
	dl_config_free(&c);
	cr_assert(eq(int, load(&c, "[server]\npassword = in-file\n", err), 0));
	cr_assert(strcmp(c.password, "in-file") == 0);
	dl_config_free(&c);
	unsetenv("CREDENTIALS_DIRECTORY");
}

/* A short password on a non-loopback address is refused: online
 * guessing is slowed down, not made impossible. */
Test(config, a_short_password_on_a_public_bind_is_refused)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "";

	expect_err("[server]\nbind = 0.0.0.0\npassword = a\n",
		   "shorter than 16");
	cr_assert(eq(int,
		     load(&c,
			  "[server]\nbind = 0.0.0.0\npassword = a\n"
			  "allow_short_password = yes\n",
			  err),
		     0),
		  "%s", err);
	dl_config_free(&c);
	cr_assert(eq(int, load(&c, "[server]\npassword = a\n", err), 0));
	dl_config_free(&c);
}

/* --check-config shows the Redis URL with its password masked, and a URL
 * without one as it is (it used to say "(set)" for the default). */
Test(config, the_dump_shows_the_redis_url_without_its_password)
{
	struct dl_config c;
	char err[DL_CONFIG_ERR_MAX] = "", out[8192] = "";
	int fds[2];
	ssize_t n;

	cr_assert(
		eq(int,
		   load(&c,
			"[persistence]\nredis = redis://app:s3cret@db:6380/2\n",
			err),
		   0),
		"%s", err);
	cr_assert(eq(int, pipe(fds), 0));
	dl_config_dump(&c, fds[1]);
	close(fds[1]);
	n = read(fds[0], out, sizeof(out) - 1);
	close(fds[0]);
	cr_assert(gt(sz, (size_t)n, 0));
	cr_assert(strstr(out, "redis = redis://app:***@db:6380/2\n") != NULL,
		  "%s", out);
	cr_assert(strstr(out, "s3cret") == NULL, "%s", out);
	dl_config_free(&c);
	dl_config_defaults(&c);
	cr_assert(eq(int, pipe(fds), 0));
	dl_config_dump(&c, fds[1]);
	close(fds[1]);
	n = read(fds[0], out, sizeof(out) - 1);
	out[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	cr_assert(strstr(out, "redis = redis://127.0.0.1:6379/0\n") != NULL,
		  "%s", out);
	dl_config_free(&c);
}
