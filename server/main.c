/* SPDX-License-Identifier: MIT */
/*
 * main.c -- dlockd's command line: flags, --check-config, then the loop.
 *
 * Flags override the configuration file; they are kept as overrides so
 * that SIGHUP re-applies them after re-reading the file.
 */
#include <getopt.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "server/access.h"
#include "server/config.h"
#include "server/log.h"
#include "server/part/part.h"
#include "server/server.h"
#include "server/store/store.h"
#include "server/tls.h"
#include "server/users.h"
#include "server/watch.h"

static const char usage[] =
	"usage: dlockd [-c FILE] [options]\n"
	"\n"
	"A distributed lock server: leased, fenced, fair locks over a line\n"
	"protocol, persisted to Redis.\n"
	"\n"
	"  -c, --config FILE       read FILE (INI, see dlockd.conf(5))\n"
	"  -p, --port PORT         TCP port (0: none)             [7420]\n"
	"  -b, --bind ADDR         TCP address                    [127.0.0.1]\n"
	"  -s, --unix-socket PATH  also listen on a unix socket\n"
	"      --persist MODE      redis or none (memory only: a restart\n"
	"                          loses every lock)              [redis]\n"
	"      --redis URL         redis://[[user]:password@]host:port/db or\n"
	"                          unix:///path.sock[?db=N]\n"
	"      --node-id ID        join a cluster as node ID: a standby while\n"
	"                          another daemon is active ([cluster])\n"
	"      --advertise H:P     the address clients should use for it\n"
	"      --leader-lease DUR  leadership lease (e.g. 4s)     [4s]\n"
	"      --allow-nondurable-redis  serve on a Redis without AOF\n"
	"                          (a restart of Redis loses every lease)\n"
	"      --allow-evicting-redis  serve on a Redis whose maxmemory-policy\n"
	"                          may evict the daemon's keys\n"
	"      --state-dir DIR     keep what Redis was seen to hold in\n"
	"                          DIR/dlockd.<id>.state [$STATE_DIRECTORY]\n"
	"      --accept-token-jump go on from a stored token mark or epoch\n"
	"                          no daemon could have written\n"
	"      --tls-cert FILE     TLS on the TCP port (and the metrics page)\n"
	"                          with this PEM certificate chain ([tls])\n"
	"      --tls-key FILE      its private key (PEM)\n"
	"      --tls-ca FILE       verify client certificates against this CA\n"
	"  -l, --log-level LEVEL   error, warn, notice, info, debug [notice]\n"
	"      --check-config      check the configuration, print it, exit\n"
	"      --new-secret        print a new user secret and its hash line\n"
	"                          for the users file, exit\n"
	"  -h, --help              this help\n"
	"  -v, --version           print the version\n"
	"\n"
	"Signals: TERM/INT drain and exit 0, HUP reloads the configuration.\n"
	"Exit codes: 0 ok, 2 usage, 3 configuration, 4 cannot listen,\n"
	"5 cannot load state from Redis, 6 another daemon is active on that\n"
	"Redis and prefix (and no node id was given), 1 other.\n";

/* Overwrite in place every byte of `secret` found in `arg` (ps(1) shows
 * argv as it is now). */
static void mask(char *arg, const char *secret)
{
	size_t n = secret ? strlen(secret) : 0;
	char *p;

	while (n && (p = strstr(arg, secret)) != NULL)
		memset(p, '*', n);
}

/* --redis URL: the override keeps a copy (a reload re-applies it), and
 * the passwords in argv are masked. They were visible to other users
 * until now: redis_password_file keeps them out of argv for good. */
static const char *redis_flag(char *arg)
{
	struct dl_redis_addr a;
	char *copy = strdup(arg);

	if (!copy) {
		fprintf(stderr, "dlockd: out of memory\n");
		exit(1);
	}
	if (dl_redis_url_parse(copy, &a) == 0) {
		if (a.password || a.sentinel_password)
			fprintf(stderr,
				"dlockd: --redis carries a password, masked "
				"now in ps(1) but visible until then: prefer "
				"[persistence] redis_password_file\n");
		mask(arg, a.password);
		mask(arg, a.sentinel_password);
		dl_redis_addr_free(&a);
	}
	return copy;
}

/* A secret for a user: the secret (for the client) and its hash (for the
 * users file), on one line; what goes where on stderr. */
static int new_secret(void)
{
	char secret[DL_SECRET_TEXT + 1], hash[DL_SECRET_HASH_TEXT + 1];

	if (dl_secret_new(secret, hash) != 0) {
		fprintf(stderr, "dlockd: cannot make a secret (getrandom)\n");
		return 1;
	}
	printf("%s %s\n", secret, hash);
	fflush(stdout);
	fprintf(stderr,
		"dlockd: the first word is the secret: give it to the client "
		"(AUTH <user> <secret>; dlock --secret-file, DLOCK_SECRET) "
		"and keep it nowhere else; the second goes on the user's line "
		"of the users file\n");
	return 0;
}

enum {
	OPT_PERSIST = 256,
	OPT_REDIS,
	OPT_CHECK,
	OPT_NODE,
	OPT_ADVERTISE,
	OPT_LEASE,
	OPT_NONDURABLE,
	OPT_EVICTING,
	OPT_STATE_DIR,
	OPT_TOKEN_JUMP,
	OPT_TLS_CERT,
	OPT_TLS_KEY,
	OPT_TLS_CA,
	OPT_NEW_SECRET
};

static const struct option opts[] = {
	{"config", required_argument, NULL, 'c'},
	{"port", required_argument, NULL, 'p'},
	{"bind", required_argument, NULL, 'b'},
	{"unix-socket", required_argument, NULL, 's'},
	{"persist", required_argument, NULL, OPT_PERSIST},
	{"redis", required_argument, NULL, OPT_REDIS},
	{"log-level", required_argument, NULL, 'l'},
	{"node-id", required_argument, NULL, OPT_NODE},
	{"advertise", required_argument, NULL, OPT_ADVERTISE},
	{"leader-lease", required_argument, NULL, OPT_LEASE},
	{"allow-nondurable-redis", no_argument, NULL, OPT_NONDURABLE},
	{"allow-evicting-redis", no_argument, NULL, OPT_EVICTING},
	{"state-dir", required_argument, NULL, OPT_STATE_DIR},
	{"accept-token-jump", no_argument, NULL, OPT_TOKEN_JUMP},
	{"tls-cert", required_argument, NULL, OPT_TLS_CERT},
	{"tls-key", required_argument, NULL, OPT_TLS_KEY},
	{"tls-ca", required_argument, NULL, OPT_TLS_CA},
	{"check-config", no_argument, NULL, OPT_CHECK},
	{"new-secret", no_argument, NULL, OPT_NEW_SECRET},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'v'},
	{NULL, 0, NULL, 0},
};

/* The options that set a key of the configuration file (dlockd.conf(5)):
 * the option's argument is the value, or `value` for a flag. */
static const struct flag {
	int opt;
	const char *sec, *key, *value;
} flags[] = {
	{'p', "server", "port", NULL},
	{'b', "server", "bind", NULL},
	{'s', "server", "unix_socket", NULL},
	{'l', "server", "log_level", NULL},
	{OPT_PERSIST, "persistence", "persist", NULL},
	{OPT_REDIS, "persistence", "redis", NULL},
	{OPT_NODE, "cluster", "node_id", NULL},
	{OPT_ADVERTISE, "cluster", "advertise", NULL},
	{OPT_LEASE, "cluster", "leader_lease", NULL},
	{OPT_NONDURABLE, "persistence", "allow_nondurable_redis", "yes"},
	{OPT_EVICTING, "persistence", "allow_evicting_redis", "yes"},
	{OPT_STATE_DIR, "persistence", "state_dir", NULL},
	{OPT_TOKEN_JUMP, "persistence", "accept_token_jump", "yes"},
	{OPT_TLS_CERT, "tls", "cert", NULL},
	{OPT_TLS_KEY, "tls", "key", NULL},
	{OPT_TLS_CA, "tls", "ca", NULL},
};

static const struct flag *flag_of(int opt)
{
	size_t i;

	for (i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
		if (flags[i].opt == opt)
			return &flags[i];
	return NULL;
}

/* --check-config: the configuration loaded; the users file and the TLS
 * files too (they load, the key matches); then print it. An exit status. */
static int check_config(struct dl_server *srv, const char *path)
{
	char err[DL_CONFIG_ERR_MAX];
	struct dl_users *u = NULL;
	int r = 0;

	if (srv->cfg.users_file[0]) {
		r = dl_users_load(srv->cfg.users_file, &u, err, sizeof(err));
		dl_users_free(u);
	}
	if (r == 0 && dl_tls_enabled(&srv->cfg))
		r = dl_tls_check(&srv->cfg, err, sizeof(err));
	if (r != 0) {
		fprintf(stderr, "dlockd: %s\n", err);
		dl_config_free(&srv->cfg);
		return DL_EXIT_CONFIG;
	}
	printf("# %s: configuration OK\n", path ? path : "(defaults)");
	/* the Redis it names, when reachable: what a start would refuse */
	r = dl_store_probe(&srv->cfg, err, sizeof(err));
	printf("# redis: %s%s\n", r == 0 ? "OK, persistence " : "", err);
	if (srv->cfg.persist == DL_PERSIST_REDIS)
		printf("# state_dir: %s\n",
		       srv->cfg.state_dir[0]
			       ? srv->cfg.state_dir
			       : "none: a restart will not notice that Redis "
				 "went back while it was down, and a loss found "
				 "closes grants for max_ttl (set state_dir)");
	fflush(stdout);
	dl_config_dump(&srv->cfg, STDOUT_FILENO);
	dl_config_free(&srv->cfg);
	if (r == DL_EBADARG) {
		fprintf(stderr,
			"dlockd: the Redis it names would be refused: %s\n",
			err);
		return DL_EXIT_CONFIG;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static struct dl_override ov[24];
	static struct dl_server srv;
	char err[DL_CONFIG_ERR_MAX];
	const char *path = NULL, *redis = NULL, *value;
	const struct flag *f;
	int check_only = 0;
	size_t nov = 0;
	uv_loop_t *loop;
	int o, r;

	/* No core dump, no ptrace by other users, /proc/<pid>/mem and
	 * environ root's: the memory holds the password, the users' hashes
	 * and Redis's password. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		perror("dlockd: prctl(PR_SET_DUMPABLE)");
	dl_log_init(DL_LOG_NOTICE, -1);
	while ((o = getopt_long(argc, argv, "c:p:b:s:l:hv", opts, NULL)) !=
	       -1) {
		switch (o) {
		case 'c':
			path = optarg;
			continue;
		case OPT_CHECK:
			check_only = 1;
			continue;
		case OPT_NEW_SECRET:
			return new_secret();
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'v':
			printf("dlockd %s\n", DL_VERSION);
			return 0;
		}
		if (!(f = flag_of(o))) {
			fputs(usage, stderr);
			return DL_EXIT_USAGE;
		}
		value = f->value ? f->value : optarg;
		if (o == OPT_REDIS)
			value = redis = redis_flag(optarg);
		ov[nov++] = (struct dl_override){f->sec, f->key, value};
		if (nov == sizeof(ov) / sizeof(ov[0])) {
			fprintf(stderr, "dlockd: too many options\n");
			return DL_EXIT_USAGE;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "dlockd: unexpected argument '%s'\n%s",
			argv[optind], usage);
		return DL_EXIT_USAGE;
	}
	if (dl_config_load(&srv.cfg, path, ov, nov, err, sizeof(err)) != 0) {
		fprintf(stderr, "dlockd: %s\n", err);
		dl_config_free(&srv.cfg);
		return DL_EXIT_CONFIG;
	}
	if (check_only)
		return check_config(&srv, path);
	dl_log_init((int)srv.cfg.log_level, -1);
	srv.config_path = path;
	srv.ov = ov;
	srv.nov = nov;

	loop = uv_default_loop();
	dl_server_init(&srv, loop);
	uv_run(loop, UV_RUN_DEFAULT);

	r = uv_loop_close(loop);
	if (r != 0)
		dl_warn("loop closed with handles open: %s", uv_strerror(r));
	dl_part_free(srv.part);
	dl_store_free(srv.store);
	dl_access_free(srv.access);
	dl_watch_free(&srv);
	dl_locktab_free(srv.tab);
	dl_config_free(&srv.cfg);
	free((char *)redis);
	return srv.exit_code;
}
