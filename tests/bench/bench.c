/* SPDX-License-Identifier: MIT */
/*
 * bench.c -- the load generator behind `make bench` (tests/bench/run.sh).
 *
 * One process, one thread, non-blocking sockets on epoll, many
 * connections. It speaks dlockd's line protocol (split and parsed with the
 * codec in proto/, not with libdlock: the client library's threads and
 * renewals would be measured too) and RESP, so that the same program, with
 * the same loop and the same costs per request, drives dlockd and the Redis
 * recipe it replaces.
 *
 *   dlock-pairs    N connections, one lock each: LOCK ttl=10s -> OK GRANTED
 *                  -> UNLOCK <token> -> OK RELEASED, one request in flight
 *                  per connection. Counts pairs.
 *   dlock-handoff  N connections on ONE lock, LOCK wait=inf; whoever is
 *                  granted (OK GRANTED or * GRANTED) UNLOCKs and LOCKs
 *                  again. Counts grants (handoffs).
 *   redis-pairs    the recipe: SET <key> <unique> NX PX 10000 -> +OK, then
 *                  EVALSHA of the compare-and-delete script -> :1. N
 *                  connections, distinct keys. Counts pairs.
 *   redis-handoff  N connections on ONE key: SET NX PX; on nil retry at
 *                  once (spin), or after --sleep-ms. Counts acquisitions
 *                  and failed attempts.
 *                  The handoff modes (these two and the next two) also
 *                  measure each acquisition's wait, from its first try to
 *                  its grant (of the writes only, with --write-pct > 0).
 *                  dlock-handoff takes --shared (every LOCK mode=shared),
 *                  --limit N (a semaphore) or --write-pct P (each
 *                  acquisition exclusive with probability P%, else
 *                  shared; writes counted).
 *   redis-rw       the Redisson-style read/write lock the shared modes
 *                  replace: a hash {mode, <holder>: count} under one
 *                  PEXPIRE, taken and released by two Lua scripts; a
 *                  refused attempt is retried (after --sleep-ms), as
 *                  Redisson retries on its unlock message. --write-pct P
 *                  (0: readers only), as above.
 *   redis-sem      the expiring-permit semaphore (RPermitExpirableSemaphore,
 *                  the sorted-set recipe): a Lua script drops expired
 *                  permits and adds one if fewer than --limit are out;
 *                  ZREM releases. Retried as redis-rw.
 *   fill           one connection, HELLO owner=..., pipelined LOCKs of
 *                  --count distinct names (at most --window unanswered);
 *                  waits for every OK GRANTED.
 *   redis-fill     the same with SET NX PX on Redis.
 *   dlock-connects N connections, each in a loop: connect, PING -> OK PONG,
 *                  close. With --tls, a full TLS handshake each time (and
 *                  close_notify at the end): counts handshakes. Its
 *                  latency is of the whole cycle.
 *   waitport       poll a port until the server there answers PING; prints
 *                  the time since --since-ns (CLOCK_REALTIME) or since start.
 *   freeport       print --count free TCP ports of 127.0.0.1.
 *
 * Load modes run --warmup seconds, then measure --duration seconds, then
 * stop: connections finish the pair they are in (a holder releases) so no
 * lease is left behind, for at most 2 s. The result is one line of
 * key=value words on stdout; run.sh reads it. Counts are taken only inside
 * the measured window. With --stats, dlockd's STATS are read (on a side
 * connection) at both ends of the window and the deltas printed as
 * stat_<key>=. With --pid name:pid, that process's CPU time over the window
 * is printed as cpu_<name>= (1.0 = one core busy).
 *
 * --tls CAFILE: the dlock modes (and waitport) speak TLS, verifying the
 * server's certificate against CAFILE and its name against --host, with
 * OpenSSL on the same non-blocking sockets (SSL_set_fd; SIGPIPE ignored).
 * The handshake of the load modes is made before the window opens.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <unistd.h>

#include "proto/proto.h"

/* ---- small helpers ---------------------------------------------------- */

static void die(const char *fmt, ...)
	__attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "bench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t mono(void)
{
	return now_ns(CLOCK_MONOTONIC);
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (!p)
		die("out of memory");
	return p;
}

/* ---- options ---------------------------------------------------------- */

enum mode {
	M_DLOCK_PAIRS,
	M_DLOCK_HANDOFF,
	M_REDIS_PAIRS,
	M_REDIS_HANDOFF,
	M_REDIS_RW,
	M_REDIS_SEM,
	M_FILL,
	M_REDIS_FILL,
	M_WAITPORT,
	M_FREEPORT,
	M_DLOCK_CONNECTS,
};

static const char *const mode_names[] = {
	"dlock-pairs", "dlock-handoff", "redis-pairs",	  "redis-handoff",
	"redis-rw",    "redis-sem",	"fill",		  "redis-fill",
	"waitport",    "freeport",	"dlock-connects",
};

#define MAX_PIDS 4

static struct {
	enum mode mode;
	const char *host;
	int port;
	int conns;
	double warmup, duration;
	long count, window;
	int count_set;
	const char *tag;    /* makes names and keys unique per run */
	const char *owner;  /* fill: HELLO owner= */
	const char *ttl;    /* dlock: ttl= of LOCK */
	long px;	    /* redis: PX of SET */
	long sleep_ms;	    /* redis-handoff: pause between failed tries */
	int stats;	    /* read dlockd STATS around the window */
	int shared;	    /* dlock-handoff: mode=shared */
	long limit;	    /* dlock-handoff, redis-sem: permits (0: none) */
	int write_pct;	    /* -1: not mixed; else % of exclusive requests */
	const char *proto;  /* waitport: dlock or redis */
	const char *tls_ca; /* --tls: the CA file; NULL: plaintext */
	long timeout_ms;
	uint64_t since_ns;
	int npids;
	struct {
		char name[32];
		int pid;
		uint64_t t0;
	} pids[MAX_PIDS];
} opt = {
	.host = "127.0.0.1",
	.conns = 1,
	.warmup = 1.0,
	.duration = 4.0,
	.count = 1000,
	.window = 10000,
	.tag = NULL,
	.owner = "bench",
	.ttl = "10s",
	.px = 10000,
	.proto = "dlock",
	.timeout_ms = 10000,
	.write_pct = -1,
};

static const char usage[] =
	"usage: bench MODE [options]\n"
	"modes: dlock-pairs dlock-handoff redis-pairs redis-handoff redis-rw\n"
	"       redis-sem fill redis-fill waitport freeport dlock-connects\n"
	"  --host ADDR --port N    server (127.0.0.1)\n"
	"  --conns N               connections (1)\n"
	"  --warmup S --duration S seconds, fractions allowed (1, 4)\n"
	"  --count N --window N    fill: names, most unanswered (1000, 10000)\n"
	"  --tag T                 prefix of names and keys (default: pid)\n"
	"  --owner ID              fill: HELLO owner= (bench)\n"
	"  --ttl DUR               dlock lease ttl= (10s)\n"
	"  --px MS                 redis PX (10000)\n"
	"  --sleep-ms N            redis-handoff/rw/sem: pause after a refusal\n"
	"  --shared                dlock-handoff: LOCK mode=shared\n"
	"  --limit N               dlock-handoff, redis-sem: a semaphore of N\n"
	"  --write-pct P           dlock-handoff, redis-rw: P% writers\n"
	"  --stats                 dlock: STATS deltas over the window\n"
	"  --pid NAME:PID          CPU use of that process over the window\n"
	"  --proto dlock|redis --timeout-ms N --since-ns NS   waitport\n"
	"  --tls CAFILE            dlock modes, waitport: TLS, verified\n";

static void parse_args(int argc, char **argv)
{
	enum {
		O_HOST = 256,
		O_PORT,
		O_CONNS,
		O_WARMUP,
		O_DURATION,
		O_COUNT,
		O_WINDOW,
		O_TAG,
		O_OWNER,
		O_TTL,
		O_PX,
		O_SLEEP,
		O_STATS,
		O_PID,
		O_PROTO,
		O_TIMEOUT,
		O_SINCE,
		O_SHARED,
		O_LIMIT,
		O_WPCT,
		O_TLS,
	};
	static const struct option lo[] = {
		{"host", 1, NULL, O_HOST},
		{"port", 1, NULL, O_PORT},
		{"conns", 1, NULL, O_CONNS},
		{"warmup", 1, NULL, O_WARMUP},
		{"duration", 1, NULL, O_DURATION},
		{"count", 1, NULL, O_COUNT},
		{"window", 1, NULL, O_WINDOW},
		{"tag", 1, NULL, O_TAG},
		{"owner", 1, NULL, O_OWNER},
		{"ttl", 1, NULL, O_TTL},
		{"px", 1, NULL, O_PX},
		{"sleep-ms", 1, NULL, O_SLEEP},
		{"stats", 0, NULL, O_STATS},
		{"pid", 1, NULL, O_PID},
		{"proto", 1, NULL, O_PROTO},
		{"timeout-ms", 1, NULL, O_TIMEOUT},
		{"since-ns", 1, NULL, O_SINCE},
		{"shared", 0, NULL, O_SHARED},
		{"limit", 1, NULL, O_LIMIT},
		{"write-pct", 1, NULL, O_WPCT},
		{"tls", 1, NULL, O_TLS},
		{NULL, 0, NULL, 0},
	};
	static char deftag[32];
	const char *colon;
	size_t i;
	int o;

	if (argc < 2)
		die("%s", usage);
	for (i = 0; i < sizeof(mode_names) / sizeof(mode_names[0]); i++)
		if (strcmp(argv[1], mode_names[i]) == 0)
			break;
	if (i == sizeof(mode_names) / sizeof(mode_names[0]))
		die("unknown mode %s\n%s", argv[1], usage);
	opt.mode = (enum mode)i;
	optind = 2;
	while ((o = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (o) {
		case O_HOST:
			opt.host = optarg;
			break;
		case O_PORT:
			opt.port = atoi(optarg);
			break;
		case O_CONNS:
			opt.conns = atoi(optarg);
			break;
		case O_WARMUP:
			opt.warmup = atof(optarg);
			break;
		case O_DURATION:
			opt.duration = atof(optarg);
			break;
		case O_COUNT:
			opt.count = atol(optarg);
			opt.count_set = 1;
			break;
		case O_WINDOW:
			opt.window = atol(optarg);
			break;
		case O_TAG:
			opt.tag = optarg;
			break;
		case O_OWNER:
			opt.owner = optarg;
			break;
		case O_TTL:
			opt.ttl = optarg;
			break;
		case O_PX:
			opt.px = atol(optarg);
			break;
		case O_SLEEP:
			opt.sleep_ms = atol(optarg);
			break;
		case O_STATS:
			opt.stats = 1;
			break;
		case O_SHARED:
			opt.shared = 1;
			break;
		case O_LIMIT:
			opt.limit = atol(optarg);
			break;
		case O_WPCT:
			opt.write_pct = atoi(optarg);
			break;
		case O_TLS:
			opt.tls_ca = optarg;
			break;
		case O_PROTO:
			opt.proto = optarg;
			break;
		case O_TIMEOUT:
			opt.timeout_ms = atol(optarg);
			break;
		case O_SINCE:
			opt.since_ns = strtoull(optarg, NULL, 10);
			break;
		case O_PID:
			colon = strchr(optarg, ':');
			if (!colon || opt.npids == MAX_PIDS ||
			    (size_t)(colon - optarg) >=
				    sizeof(opt.pids[0].name))
				die("--pid NAME:PID (at most %d)", MAX_PIDS);
			memcpy(opt.pids[opt.npids].name, optarg,
			       (size_t)(colon - optarg));
			opt.pids[opt.npids].name[colon - optarg] = '\0';
			opt.pids[opt.npids++].pid = atoi(colon + 1);
			break;
		default:
			die("%s", usage);
		}
	}
	if (!opt.tag) {
		snprintf(deftag, sizeof(deftag), "b%d", (int)getpid());
		opt.tag = deftag;
	}
	if (opt.conns < 1 || opt.conns > 100000)
		die("--conns out of range");
	if (opt.window < 1)
		opt.window = 1;
	if (opt.write_pct > 100 || opt.limit < 0 || opt.limit > 1024 ||
	    (opt.shared && (opt.limit || opt.write_pct >= 0)) ||
	    (opt.limit && opt.write_pct >= 0))
		die("--shared, --limit, --write-pct: one of them, in range");
	if (opt.mode == M_REDIS_SEM && opt.limit < 1)
		die("redis-sem needs --limit");
}

/* ---- sockets ---------------------------------------------------------- */

static int tcp_connect(int nonblock)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	int fd, one = 1;

	a.sin_port = htons((uint16_t)opt.port);
	if (inet_pton(AF_INET, opt.host, &a.sin_addr) != 1)
		die("--host %s: not an IPv4 address", opt.host);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket: %s", strerror(errno));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		close(fd);
		return -1;
	}
	if (nonblock)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

static void write_all(int fd, const char *p, size_t n)
{
	ssize_t w;

	while (n) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write: %s", strerror(errno));
		p += w;
		n -= (size_t)w;
	}
}

/* ---- TLS (--tls) ------------------------------------------------------- */

static SSL_CTX *tls_ctx; /* NULL: plaintext */

static void tls_init(void)
{
	if (!opt.tls_ca)
		return;
	signal(SIGPIPE, SIG_IGN); /* OpenSSL writes to the socket itself */
	tls_ctx = SSL_CTX_new(TLS_client_method());
	if (!tls_ctx ||
	    SSL_CTX_load_verify_locations(tls_ctx, opt.tls_ca, NULL) != 1)
		die("--tls %s: cannot load it", opt.tls_ca);
	SSL_CTX_set_min_proto_version(tls_ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(tls_ctx, SSL_VERIFY_PEER, NULL);
	/* SSL_write may take part of a buffer that moves between tries */
	SSL_CTX_set_mode(tls_ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
					  SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}

static SSL *tls_new(int fd)
{
	SSL *ssl = SSL_new(tls_ctx);

	if (!ssl || SSL_set_fd(ssl, fd) != 1 ||
	    SSL_set1_host(ssl, opt.host) != 1)
		die("SSL_new failed");
	SSL_set_connect_state(ssl);
	return ssl;
}

/* A blocking handshake on a blocking socket: the SSL, or NULL. */
static SSL *tls_wrap(int fd)
{
	SSL *ssl = tls_new(fd);

	if (SSL_connect(ssl) != 1) {
		ERR_print_errors_fp(stderr);
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}

/* read(2) and write(2) over TLS: -1 with errno EAGAIN when OpenSSL needs
 * the socket to be ready again. */
static ssize_t ssl_io(SSL *ssl, int r, size_t n)
{
	switch (SSL_get_error(ssl, r)) {
	case SSL_ERROR_NONE:
		return (ssize_t)n;
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		errno = EAGAIN;
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		ERR_clear_error();
		errno = EPROTO;
		return -1;
	}
}

static ssize_t io_read(int fd, SSL *ssl, void *buf, size_t len)
{
	size_t n = 0;
	int r;

	if (!ssl)
		return read(fd, buf, len);
	r = SSL_read_ex(ssl, buf, len, &n);
	return ssl_io(ssl, r, n);
}

static ssize_t io_write(int fd, SSL *ssl, const void *buf, size_t len)
{
	size_t n = 0;
	int r;

	if (!ssl)
		return write(fd, buf, len);
	r = SSL_write_ex(ssl, buf, len, &n);
	return ssl_io(ssl, r, n);
}

/* ---- CPU use of other processes ------------------------------------------ */

/* utime + stime of pid in clock ticks (0 if unreadable). */
static uint64_t proc_ticks(int pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ut = 0, st = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (!(f = fopen(path, "r")))
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* the command name may hold spaces: fields count from its ')' */
	if (!(p = strrchr(buf, ')')))
		return 0;
	if (sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
		   &st) != 2)
		return 0;
	return ut + st;
}

/* CPU ticks of the whole machine (first line of /proc/stat): user and
 * system time of every process (*proc), interrupts (*irq), stolen by the
 * hypervisor (*steal). What else ran during the window tells how clean a
 * measurement was. */
static void sys_ticks(uint64_t *proc, uint64_t *irq, uint64_t *steal)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");

	*proc = *irq = *steal = 0;
	if (!f)
		return;
	if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0],
		   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
		/* user nice system idle iowait irq softirq steal */
		*proc = v[0] + v[1] + v[2];
		*irq = v[5] + v[6];
		*steal = v[7];
	}
	fclose(f);
}

/* CPU ticks of all kernel threads (jbd2 and kworkers doing the fsyncs of
 * an appendfsync-always Redis, ksoftirqd): work caused by what is
 * measured, not by other users of the machine. */
static uint64_t kthread_ticks(void)
{
	unsigned long long ut, st, flags;
	char path[300], buf[1024], *p;
	struct dirent *de;
	uint64_t sum = 0;
	DIR *d = opendir("/proc");
	FILE *f;
	size_t n;

	if (!d)
		return 0;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		if (!(f = fopen(path, "r")))
			continue;
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = '\0';
		if (!(p = strrchr(buf, ')')))
			continue;
		if (sscanf(p + 2,
			   "%*c %*d %*d %*d %*d %*d %llu %*u %*u %*u %*u %llu %llu",
			   &flags, &ut, &st) == 3 &&
		    (flags & 0x00200000)) /* PF_KTHREAD */
			sum += ut + st;
	}
	closedir(d);
	return sum;
}

static uint64_t self_cpu_us(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)ru.ru_utime.tv_sec * 1000000 +
	       (uint64_t)ru.ru_utime.tv_usec +
	       (uint64_t)ru.ru_stime.tv_sec * 1000000 +
	       (uint64_t)ru.ru_stime.tv_usec;
}

/* ---- dlockd STATS on a blocking side connection ---------------------------
 */

#define NSTATS 6
static const char *const stat_keys[NSTATS] = {
	"commands",	     "grants",	     "store_batches",
	"store_round_trips", "store_writes", "store_latency_us_avg",
};

struct blk {
	int fd;
	struct dl_linebuf lb;
};

/* Next line from a blocking connection (NUL-terminated, ending removed). */
static char *blk_line(struct blk *b, size_t *len)
{
	char *line, *sp;
	size_t avail;
	ssize_t n;

	for (;;) {
		switch (dl_linebuf_next(&b->lb, &line, len)) {
		case DL_LB_LINE:
			return line;
		case DL_LB_NONE:
			break;
		default:
			die("over-long line from the server");
		}
		sp = dl_linebuf_space(&b->lb, &avail);
		n = read(b->fd, sp, avail);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("side connection: %s",
			    n ? strerror(errno) : "closed by the server");
		dl_linebuf_commit(&b->lb, (size_t)n);
	}
}

static void read_stats(struct blk *b, uint64_t *vals)
{
	struct dl_reply r;
	uint64_t n, i, v;
	size_t len, k;
	char *line, *sp;

	write_all(b->fd, "STATS\r\n", 7);
	line = blk_line(b, &len);
	if (dl_parse_reply(line, len, &r) || r.kind != DL_REPLY_OK ||
	    dl_reply_u64(&r, 0, &n))
		die("STATS: unexpected reply: %s", line);
	for (k = 0; k < NSTATS; k++)
		vals[k] = 0;
	for (i = 0; i < n; i++) {
		line = blk_line(b, &len);
		if (!(sp = strchr(line, ' ')))
			continue;
		*sp = '\0';
		v = strtoull(sp + 1, NULL, 10);
		for (k = 0; k < NSTATS; k++)
			if (strcmp(line, stat_keys[k]) == 0)
				vals[k] = v;
	}
}

/* ---- RESP (the subset these commands get back) --------------------------- */

enum { R_STATUS, R_ERROR, R_INT, R_BULK, R_NIL };

struct resp {
	int type;
	long long i;
	const char *s; /* STATUS, ERROR, BULK: not NUL-terminated */
	size_t len;
};

/* One reply from p[0..n): bytes consumed, 0 if incomplete. */
static size_t resp_parse(const char *p, size_t n, struct resp *r)
{
	const char *eol = memchr(p, '\n', n);
	size_t hdr;
	long long bl;

	if (!eol)
		return 0;
	hdr = (size_t)(eol - p) + 1;
	if (hdr < 3 || eol[-1] != '\r')
		die("RESP: malformed reply");
	switch (p[0]) {
	case '+':
	case '-':
		r->type = p[0] == '+' ? R_STATUS : R_ERROR;
		r->s = p + 1;
		r->len = hdr - 3;
		return hdr;
	case ':':
		r->type = R_INT;
		r->i = strtoll(p + 1, NULL, 10);
		return hdr;
	case '$':
		bl = strtoll(p + 1, NULL, 10);
		if (bl < 0) {
			r->type = R_NIL;
			return hdr;
		}
		if (n < hdr + (size_t)bl + 2)
			return 0;
		r->type = R_BULK;
		r->s = p + hdr;
		r->len = (size_t)bl;
		return hdr + (size_t)bl + 2;
	default:
		die("RESP: unexpected reply type '%c'", p[0]);
	}
}

/* Append a RESP command (argc strings) to a growable buffer. */
struct obuf {
	char *p;
	size_t len, cap, off; /* off: bytes already written */
};

static void ob_add(struct obuf *o, const char *s, size_t n)
{
	if (o->len + n > o->cap) {
		o->cap = (o->len + n) * 2 + 256;
		o->p = xrealloc(o->p, o->cap);
	}
	memcpy(o->p + o->len, s, n);
	o->len += n;
}

static void resp_cmd(struct obuf *o, int argc, const char **argv,
		     const size_t *lens)
{
	char h[32];
	int i, n;

	n = snprintf(h, sizeof(h), "*%d\r\n", argc);
	ob_add(o, h, (size_t)n);
	for (i = 0; i < argc; i++) {
		n = snprintf(h, sizeof(h), "$%zu\r\n", lens[i]);
		ob_add(o, h, (size_t)n);
		ob_add(o, argv[i], lens[i]);
		ob_add(o, "\r\n", 2);
	}
}

static const char cad_script[] =
	"if redis.call(\"get\",KEYS[1]) == ARGV[1] then "
	"return redis.call(\"del\",KEYS[1]) else return 0 end";

/* redis-rw: Redisson's RReadWriteLock reduced to its core (a hash of
 * holders and their counts, its mode in the field "mode", one PEXPIRE for
 * all). ARGV: holder, px, "read"|"write". Like Redisson's, a read is
 * granted whenever the lock is read-held, even with a writer retrying. */
static const char rw_acquire_script[] =
	"local m = redis.call('hget', KEYS[1], 'mode') "
	"if m == false then "
	"redis.call('hset', KEYS[1], 'mode', ARGV[3], ARGV[1], 1) "
	"redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end "
	"if m == 'read' and ARGV[3] == 'read' then "
	"redis.call('hincrby', KEYS[1], ARGV[1], 1) "
	"redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end "
	"return 0";
static const char rw_release_script[] =
	"if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end "
	"if redis.call('hincrby', KEYS[1], ARGV[1], -1) <= 0 then "
	"redis.call('hdel', KEYS[1], ARGV[1]) end "
	"if redis.call('hlen', KEYS[1]) <= 1 then redis.call('del', KEYS[1]) end "
	"return 1";
/* redis-sem: permits in a sorted set scored by their deadline (what
 * RPermitExpirableSemaphore keeps); ARGV: permit id, limit, px. ZREM
 * releases. */
static const char sem_acquire_script[] =
	"local t = redis.call('time') "
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
	"redis.call('zremrangebyscore', KEYS[1], '-inf', now) "
	"if redis.call('zcard', KEYS[1]) < tonumber(ARGV[2]) then "
	"redis.call('zadd', KEYS[1], now + tonumber(ARGV[3]), ARGV[1]) "
	"return 1 end return 0";

/* ---- connections ------------------------------------------------------- */

enum st {
	S_IDLE,
	S_HELLO,     /* fill: HELLO sent */
	S_LOCK,	     /* LOCK (or SET NX) sent */
	S_QUEUED,    /* dlock-handoff: OK QUEUED, waiting for * GRANTED */
	S_UNLOCK,    /* UNLOCK (or EVALSHA) sent */
	S_SLEEP,     /* redis-handoff: pausing before the next SET */
	S_HANDSHAKE, /* dlock-connects: TLS handshake in progress */
	S_PING,	     /* dlock-connects: PING sent */
	S_DONE,
};

struct conn {
	int fd;
	SSL *ssl; /* --tls; NULL: plaintext */
	int idx;
	enum st st;
	int want_out; /* EPOLLOUT registered */
	uint64_t token;
	uint64_t seq;
	uint64_t t_start; /* pair start (or this attempt's), ns */
	uint64_t t_first; /* handoff modes: this acquisition's first try */
	int is_write;	  /* --write-pct: this acquisition is exclusive */
	uint64_t wake;	  /* S_SLEEP: when to try again */
	uint64_t grants;  /* in the window (fairness) */
	struct obuf out;
	struct dl_linebuf lb; /* dlock */
	char *rin;	      /* redis input */
	size_t rlen, rcap;
	char name[96];
	size_t nlen;
	char val[32];
	size_t vlen;
};

static struct {
	int ep;
	struct conn *c;
	int n;
	int measuring, stopping;
	uint64_t ops, fails, lost, events_expired;
	uint64_t ops0, fails0;
	uint64_t attempts, attempts0; /* handoff: LOCK / SET NX sent */
	uint64_t writes, writes0;     /* --write-pct: exclusive grants */
	uint64_t wait_max;	      /* handoff: longest wait, ns */
	uint64_t rnd;		      /* xorshift state: who writes */
	char sha[48], sha_acq[48], sha_rel[48];
	size_t shalen, shalen_acq, shalen_rel;
	/* latency histogram of pairs, in the window: 1 us buckets below
	 * 1 ms, then 10 us up to 100 ms, beyond that one bucket */
	uint64_t lat_fine[1000], lat_coarse[10000], lat_over, lat_n;
	/* fill */
	long sent, recvd;
} g;

static void lat_add(uint64_t ns)
{
	uint64_t us = ns / 1000;

	if (us < 1000)
		g.lat_fine[us]++;
	else if (us < 100000)
		g.lat_coarse[us / 10]++;
	else
		g.lat_over++;
	g.lat_n++;
}

/* Latency quantile in microseconds (upper edge of its bucket). */
static double lat_q(double q)
{
	uint64_t want = (uint64_t)(q * (double)g.lat_n), seen = 0;
	size_t i;

	if (g.lat_n == 0)
		return 0;
	for (i = 0; i < 1000; i++)
		if ((seen += g.lat_fine[i]) > want)
			return (double)i + 1;
	for (i = 100; i < 10000; i++)
		if ((seen += g.lat_coarse[i]) > want)
			return (double)(i + 1) * 10;
	return 100000;
}

static void ep_mod(struct conn *c, int out)
{
	struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0),
				 .data.ptr = c};

	if (epoll_ctl(g.ep, EPOLL_CTL_MOD, c->fd, &ev) != 0)
		die("epoll_ctl: %s", strerror(errno));
	c->want_out = out;
}

/* Write what is queued; what does not fit waits for EPOLLOUT. */
static void flush(struct conn *c)
{
	ssize_t w;

	while (c->out.off < c->out.len) {
		w = io_write(c->fd, c->ssl, c->out.p + c->out.off,
			     c->out.len - c->out.off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN)
			break;
		if (w <= 0)
			die("conn %d: write: %s", c->idx, strerror(errno));
		c->out.off += (size_t)w;
	}
	if (c->out.off == c->out.len)
		c->out.off = c->out.len = 0;
	if ((c->out.len != 0) != c->want_out)
		ep_mod(c, c->out.len != 0);
}

static void conn_close(struct conn *c)
{
	SSL_free(c->ssl);
	c->ssl = NULL;
	if (c->fd >= 0) {
		epoll_ctl(g.ep, EPOLL_CTL_DEL, c->fd, NULL);
		close(c->fd);
		c->fd = -1;
	}
	c->st = S_DONE;
}

static void sendf(struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void sendf(struct conn *c, const char *fmt, ...)
{
	char line[DL_REPLY_MAX];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(line))
		die("request too long");
	ob_add(&c->out, line, (size_t)n);
}

/* ---- dlockd ---------------------------------------------------------------
 */

/* --write-pct: is the next acquisition a write? (xorshift64, seeded the
 * same in every run) */
static int pick_write(void)
{
	if (opt.write_pct < 0)
		return 1;
	if (!g.rnd)
		g.rnd = 0x9e3779b97f4a7c15ull;
	g.rnd ^= g.rnd << 13;
	g.rnd ^= g.rnd >> 7;
	g.rnd ^= g.rnd << 17;
	return (int)(g.rnd % 100) < opt.write_pct;
}

/* A handoff mode's grant: count it, its wait, and the writes. */
static void handoff_granted(struct conn *c)
{
	uint64_t w = mono() - c->t_first;

	g.ops++;
	if (c->is_write && opt.write_pct >= 0)
		g.writes++;
	if (!g.measuring)
		return;
	c->grants++;
	if (opt.write_pct <= 0 || c->is_write) { /* 0%: the reads */
		lat_add(w);
		if (w > g.wait_max)
			g.wait_max = w;
	}
}

static void d_lock(struct conn *c)
{
	char lim[32] = "";

	c->t_start = c->t_first = mono();
	g.attempts++;
	if (opt.mode == M_DLOCK_HANDOFF) {
		c->is_write = !opt.shared && pick_write();
		if (opt.limit)
			snprintf(lim, sizeof(lim), " limit=%ld", opt.limit);
		sendf(c, "LOCK %s ttl=%s wait=inf%s%s\r\n", c->name, opt.ttl,
		      c->is_write ? "" : " mode=shared", lim);
	} else {
		sendf(c, "LOCK %s ttl=%s\r\n", c->name, opt.ttl);
	}
	c->st = S_LOCK;
}

static void d_granted(struct conn *c, const struct dl_reply *r)
{
	if (dl_reply_u64(r, 1, &c->token))
		die("conn %d: GRANTED without a token", c->idx);
	if (opt.mode == M_DLOCK_HANDOFF)
		handoff_granted(c);
	sendf(c, "UNLOCK %s %llu\r\n", c->name, (unsigned long long)c->token);
	c->st = S_UNLOCK;
}

static void d_fill_next(struct conn *c)
{
	while (g.sent < opt.count && g.sent - g.recvd < opt.window) {
		sendf(c, "LOCK %s:%07ld ttl=%s\r\n", opt.tag, g.sent, opt.ttl);
		g.sent++;
	}
}

/* ---- dlock-connects ------------------------------------------------------ */

static void cx_ping(struct conn *c)
{
	sendf(c, "PING\r\n");
	c->st = S_PING;
	flush(c);
}

/* Advance the TLS handshake; PING once it is done. */
static void cx_handshake(struct conn *c)
{
	int r = SSL_connect(c->ssl);

	if (r == 1) {
		cx_ping(c);
		return;
	}
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		if (c->want_out)
			ep_mod(c, 0);
		return;
	case SSL_ERROR_WANT_WRITE:
		if (!c->want_out)
			ep_mod(c, 1);
		return;
	default:
		ERR_print_errors_fp(stderr);
		die("conn %d: TLS handshake failed", c->idx);
	}
}

/* A new connection for the next cycle. */
static void cx_open(struct conn *c)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};

	c->t_start = mono();
	c->fd = tcp_connect(1);
	if (c->fd < 0)
		die("cannot connect to %s:%d: %s", opt.host, opt.port,
		    strerror(errno));
	dl_linebuf_init(&c->lb);
	c->out.off = c->out.len = 0;
	c->want_out = 0;
	if (epoll_ctl(g.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
		die("epoll_ctl: %s", strerror(errno));
	if (!tls_ctx) {
		cx_ping(c);
		return;
	}
	c->ssl = tls_new(c->fd);
	c->st = S_HANDSHAKE;
	cx_handshake(c);
}

/* OK PONG: one cycle done; close (TLS: with close_notify, not waiting
 * for the server's) and start the next one. */
static void cx_done(struct conn *c)
{
	g.ops++;
	if (g.measuring)
		lat_add(mono() - c->t_start);
	if (c->ssl)
		SSL_shutdown(c->ssl);
	conn_close(c);
	if (!g.stopping)
		cx_open(c);
}

static void d_line(struct conn *c, const char *line, size_t len)
{
	struct dl_reply r;

	if (dl_parse_reply(line, len, &r))
		die("conn %d: not a reply: %s", c->idx, line);
	if (r.kind == DL_REPLY_EVENT) {
		if (r.word.len == 7 && memcmp(r.word.p, "GRANTED", 7) == 0 &&
		    c->st == S_QUEUED) {
			d_granted(c, &r);
			return;
		}
		if (r.word.len == 7 && memcmp(r.word.p, "EXPIRED", 7) == 0) {
			g.events_expired++;
			return;
		}
		die("conn %d: unexpected event: %s", c->idx, line);
	}
	if (r.kind != DL_REPLY_OK)
		die("conn %d: refused: %s", c->idx, line);
	if (c->st == S_PING) {
		cx_done(c);
		return;
	}
	switch (c->st) {
	case S_HELLO:
		c->st = S_LOCK;
		return;
	case S_LOCK:
		if (opt.mode == M_FILL) {
			if (r.word.len != 7 || memcmp(r.word.p, "GRANTED", 7))
				die("fill: %s", line);
			g.recvd++;
			d_fill_next(c);
			if (g.recvd == opt.count)
				c->st = S_DONE;
			return;
		}
		if (r.word.len == 7 && memcmp(r.word.p, "GRANTED", 7) == 0) {
			d_granted(c, &r);
			return;
		}
		if (opt.mode == M_DLOCK_HANDOFF && r.word.len == 6 &&
		    memcmp(r.word.p, "QUEUED", 6) == 0) {
			if (g.stopping)
				conn_close(c); /* leaves the queue */
			else
				c->st = S_QUEUED;
			return;
		}
		break;
	case S_UNLOCK:
		if (r.word.len != 8 || memcmp(r.word.p, "RELEASED", 8))
			break;
		if (opt.mode == M_DLOCK_PAIRS) {
			g.ops++;
			if (g.measuring)
				lat_add(mono() - c->t_start);
		}
		if (g.stopping)
			conn_close(c);
		else
			d_lock(c);
		return;
	default:
		break;
	}
	die("conn %d: unexpected reply: %s", c->idx, line);
}

static void d_read(struct conn *c)
{
	char *sp, *line;
	size_t avail, len;
	ssize_t n;

	for (;;) {
		sp = dl_linebuf_space(&c->lb, &avail);
		n = io_read(c->fd, c->ssl, sp, avail);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			die("conn %d: %s", c->idx,
			    n ? strerror(errno) : "closed by the server");
		dl_linebuf_commit(&c->lb, (size_t)n);
		for (;;) {
			enum dl_lb_result lr =
				dl_linebuf_next(&c->lb, &line, &len);
			if (lr == DL_LB_NONE)
				break;
			if (lr != DL_LB_LINE)
				die("conn %d: over-long line", c->idx);
			d_line(c, line, len);
			if (c->fd < 0 || c->st == S_HANDSHAKE)
				return; /* closed, or a new connection */
		}
		if ((size_t)n < avail && !c->ssl)
			break; /* drained the socket (TLS may hold more) */
	}
}

/* ---- Redis ------------------------------------------------------------------
 */

/* A handoff mode of the recipe: a refusal is retried. */
static int r_handoff(void)
{
	return opt.mode == M_REDIS_HANDOFF || opt.mode == M_REDIS_RW ||
	       opt.mode == M_REDIS_SEM;
}

/* EVALSHA <sha> 1 <c's key> <c's value> [extra args] */
static void r_evalsha(struct conn *c, const char *sha, size_t shalen,
		      int nextra, const char *const *extra)
{
	const char *argv[8] = {"EVALSHA", sha, "1", c->name, c->val};
	size_t lens[8] = {7, shalen, 1, c->nlen, c->vlen};
	int i;

	for (i = 0; i < nextra && i < 3; i++) {
		argv[5 + i] = extra[i];
		lens[5 + i] = strlen(extra[i]);
	}
	resp_cmd(&c->out, 5 + i, argv, lens);
}

/* Try to acquire: SET NX PX, or the rw / semaphore script. */
static void r_set(struct conn *c)
{
	char px[24], lim[24];

	if (c->st != S_LOCK && c->st != S_SLEEP) { /* not a retry */
		c->seq++;
		c->vlen =
			(size_t)snprintf(c->val, sizeof(c->val), "%08x%012llx",
					 (unsigned)(getpid() * 100003 + c->idx),
					 (unsigned long long)c->seq);
		c->t_first = mono();
		c->is_write = opt.mode != M_REDIS_RW || pick_write();
	}
	snprintf(px, sizeof(px), "%ld", opt.px);
	c->t_start = mono();
	g.attempts++;
	if (opt.mode == M_REDIS_RW) {
		const char *x[2] = {px, c->is_write ? "write" : "read"};

		r_evalsha(c, g.sha_acq, g.shalen_acq, 2, x);
	} else if (opt.mode == M_REDIS_SEM) {
		const char *x[2] = {lim, px};

		snprintf(lim, sizeof(lim), "%ld", opt.limit);
		r_evalsha(c, g.sha_acq, g.shalen_acq, 2, x);
	} else {
		const char *argv[6] = {"SET", c->name, c->val, "NX", "PX", px};
		size_t lens[6] = {3, c->nlen, c->vlen, 2, 2, strlen(px)};

		resp_cmd(&c->out, 6, argv, lens);
	}
	c->st = S_LOCK;
}

/* Release: the compare-and-delete script, the rw release script, ZREM. */
static void r_del(struct conn *c)
{
	if (opt.mode == M_REDIS_SEM) {
		const char *argv[3] = {"ZREM", c->name, c->val};
		size_t lens[3] = {4, c->nlen, c->vlen};

		resp_cmd(&c->out, 3, argv, lens);
	} else if (opt.mode == M_REDIS_RW) {
		r_evalsha(c, g.sha_rel, g.shalen_rel, 0, NULL);
	} else {
		r_evalsha(c, g.sha, g.shalen, 0, NULL);
	}
	c->st = S_UNLOCK;
}

static void r_fill_next(struct conn *c)
{
	while (g.sent < opt.count && g.sent - g.recvd < opt.window) {
		c->nlen = (size_t)snprintf(c->name, sizeof(c->name), "%s:%07ld",
					   opt.tag, g.sent);
		r_set(c);
		g.sent++;
	}
}

static void r_reply(struct conn *c, const struct resp *r)
{
	if (r->type == R_ERROR)
		die("conn %d: redis error: %.*s", c->idx, (int)r->len, r->s);
	switch (c->st) {
	case S_LOCK:
		if (opt.mode == M_REDIS_FILL) {
			if (r->type != R_STATUS)
				die("redis-fill: SET NX failed (key exists?)");
			g.recvd++;
			r_fill_next(c);
			if (g.recvd == opt.count)
				c->st = S_DONE;
			return;
		}
		if (r->type == R_STATUS || (r->type == R_INT && r->i == 1)) {
			if (r_handoff())
				handoff_granted(c);
			r_del(c);
			return;
		}
		if ((r->type == R_NIL || (r->type == R_INT && r->i == 0)) &&
		    r_handoff()) {
			g.fails++;
			if (g.stopping) {
				conn_close(c);
			} else if (opt.sleep_ms) {
				c->st = S_SLEEP;
				c->wake = mono() +
					  (uint64_t)opt.sleep_ms * 1000000;
			} else {
				r_set(c);
			}
			return;
		}
		die("conn %d: SET NX: unexpected reply (type %d)", c->idx,
		    r->type);
	case S_UNLOCK:
		if (r->type != R_INT)
			die("conn %d: EVALSHA: unexpected reply", c->idx);
		if (r->i != 1)
			g.lost++; /* our key was gone: lease lost */
		if (opt.mode == M_REDIS_PAIRS) {
			g.ops++;
			if (g.measuring)
				lat_add(mono() - c->t_start);
		}
		if (g.stopping)
			conn_close(c);
		else
			r_set(c);
		return;
	default:
		die("conn %d: reply in state %d", c->idx, (int)c->st);
	}
}

static void r_read(struct conn *c)
{
	struct resp r;
	size_t off, used, avail;
	ssize_t n;

	for (;;) {
		if (c->rcap - c->rlen < 4096) {
			c->rcap = c->rcap * 2 + 8192;
			c->rin = xrealloc(c->rin, c->rcap);
		}
		avail = c->rcap - c->rlen;
		n = read(c->fd, c->rin + c->rlen, avail);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			break;
		if (n <= 0)
			die("conn %d: %s", c->idx,
			    n ? strerror(errno) : "closed by redis");
		c->rlen += (size_t)n;
		off = 0;
		while (off < c->rlen &&
		       (used = resp_parse(c->rin + off, c->rlen - off, &r))) {
			off += used;
			r_reply(c, &r);
			if (c->fd < 0)
				return;
		}
		memmove(c->rin, c->rin + off, c->rlen - off);
		c->rlen -= off;
		if ((size_t)n < avail)
			break; /* drained the socket */
	}
}

/* SCRIPT LOAD on a blocking connection; the SHA1 goes to sha. */
static void r_script_load1(const char *script, char *sha, size_t *shalen)
{
	const char *argv[3] = {"SCRIPT", "LOAD", script};
	size_t lens[3] = {6, 4, strlen(script)};
	struct obuf o = {0};
	char buf[256];
	size_t len = 0;
	struct resp r;
	ssize_t n;
	int fd = tcp_connect(0);

	if (fd < 0)
		die("cannot connect to redis at %s:%d", opt.host, opt.port);
	resp_cmd(&o, 3, argv, lens);
	write_all(fd, o.p, o.len);
	free(o.p);
	for (;;) {
		n = read(fd, buf + len, sizeof(buf) - len);
		if (n <= 0)
			die("SCRIPT LOAD: no reply");
		len += (size_t)n;
		if (resp_parse(buf, len, &r))
			break;
	}
	if (r.type != R_BULK || r.len >= sizeof(g.sha))
		die("SCRIPT LOAD failed");
	memcpy(sha, r.s, r.len);
	*shalen = r.len;
	sha[r.len] = '\0';
	close(fd);
}

static void r_script_load(void)
{
	r_script_load1(cad_script, g.sha, &g.shalen);
	if (opt.mode == M_REDIS_RW) {
		r_script_load1(rw_acquire_script, g.sha_acq, &g.shalen_acq);
		r_script_load1(rw_release_script, g.sha_rel, &g.shalen_rel);
	}
	if (opt.mode == M_REDIS_SEM)
		r_script_load1(sem_acquire_script, g.sha_acq, &g.shalen_acq);
}

/* ---- the load loop ---------------------------------------------------------
 */

static int is_redis(void)
{
	return opt.mode == M_REDIS_PAIRS || r_handoff() ||
	       opt.mode == M_REDIS_FILL;
}

static void open_conns(int n)
{
	struct epoll_event ev;
	int i;

	g.c = calloc((size_t)n, sizeof(*g.c));
	if (!g.c)
		die("out of memory");
	g.n = n;
	for (i = 0; i < n; i++) {
		struct conn *c = &g.c[i];

		c->idx = i;
		c->fd = -1;
		if (opt.mode == M_DLOCK_CONNECTS)
			continue; /* cx_open() connects, again and again */
		c->fd = tcp_connect(!tls_ctx);
		if (c->fd < 0)
			die("cannot connect to %s:%d: %s", opt.host, opt.port,
			    strerror(errno));
		if (tls_ctx && !is_redis()) {
			if (!(c->ssl = tls_wrap(c->fd)))
				die("conn %d: TLS handshake failed", i);
			fcntl(c->fd, F_SETFL,
			      fcntl(c->fd, F_GETFL) | O_NONBLOCK);
		}
		dl_linebuf_init(&c->lb);
		ev.events = EPOLLIN;
		ev.data.ptr = c;
		if (epoll_ctl(g.ep, EPOLL_CTL_ADD, c->fd, &ev) != 0)
			die("epoll_ctl: %s", strerror(errno));
		switch (opt.mode) {
		case M_DLOCK_PAIRS:
			c->nlen = (size_t)snprintf(c->name, sizeof(c->name),
						   "%s:p%d", opt.tag, i);
			break;
		case M_REDIS_PAIRS:
			c->nlen = (size_t)snprintf(c->name, sizeof(c->name),
						   "%s:k%d", opt.tag, i);
			break;
		default: /* one lock for all */
			c->nlen = (size_t)snprintf(c->name, sizeof(c->name),
						   "%s:one", opt.tag);
			break;
		}
	}
}

/* One pass of the event loop; timeout in ms (-1: forever). */
static void poll_once(int timeout)
{
	struct epoll_event evs[256];
	int n, i;

	n = epoll_wait(g.ep, evs, 256, timeout);
	if (n < 0 && errno != EINTR)
		die("epoll_wait: %s", strerror(errno));
	for (i = 0; i < n; i++) {
		struct conn *c = evs[i].data.ptr;

		if (c->fd < 0)
			continue;
		if (c->st == S_HANDSHAKE) {
			cx_handshake(c);
			continue;
		}
		if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
			if (is_redis())
				r_read(c);
			else
				d_read(c);
		}
		if (c->fd >= 0)
			flush(c);
	}
}

static void print_pct(const char *key, uint64_t part, uint64_t whole)
{
	if (whole)
		printf(" %s=%.3f", key, (double)part / (double)whole);
}

static void run_load(void)
{
	uint64_t t0, t_warm, t_end, t_w = 0, t_e = 0, t_quit;
	uint64_t cpu0 = 0, cpu1 = 0, sv0[NSTATS] = {0}, sv1[NSTATS] = {0};
	uint64_t ops1 = 0, fails1 = 0, att1 = 0, wr1 = 0, gmin = UINT64_MAX,
		 gmax = 0, now;
	uint64_t proc0 = 0, proc1 = 0, irq0 = 0, irq1 = 0, steal0 = 0;
	uint64_t steal1 = 0, kt0 = 0, kt1 = 0;
	double ours, cores;
	struct blk side = {.fd = -1};
	int i, timeout, live, k;
	long hz = sysconf(_SC_CLK_TCK);
	double secs;

	if (is_redis())
		r_script_load();
	if (opt.stats) {
		side.fd = tcp_connect(0);
		if (side.fd < 0)
			die("cannot connect for STATS");
		dl_linebuf_init(&side.lb);
	}
	open_conns(opt.conns);
	for (i = 0; i < g.n; i++) {
		if (opt.mode == M_DLOCK_CONNECTS) {
			cx_open(&g.c[i]);
			continue;
		}
		if (is_redis())
			r_set(&g.c[i]);
		else
			d_lock(&g.c[i]);
		flush(&g.c[i]);
	}
	t0 = mono();
	t_warm = t0 + (uint64_t)(opt.warmup * 1e9);
	t_end = t_warm + (uint64_t)(opt.duration * 1e9);
	t_quit = UINT64_MAX;
	for (;;) {
		now = mono();
		if (!g.measuring && !g.stopping && now >= t_warm) {
			if (opt.stats)
				read_stats(&side, sv0);
			for (k = 0; k < opt.npids; k++)
				opt.pids[k].t0 = proc_ticks(opt.pids[k].pid);
			cpu0 = self_cpu_us();
			sys_ticks(&proc0, &irq0, &steal0);
			kt0 = kthread_ticks();
			g.ops0 = g.ops;
			g.fails0 = g.fails;
			g.attempts0 = g.attempts;
			g.writes0 = g.writes;
			t_w = mono();
			g.measuring = 1;
		}
		if (g.measuring && now >= t_end) {
			t_e = mono();
			ops1 = g.ops;
			fails1 = g.fails;
			att1 = g.attempts;
			wr1 = g.writes;
			cpu1 = self_cpu_us();
			sys_ticks(&proc1, &irq1, &steal1);
			kt1 = kthread_ticks();
			for (k = 0; k < opt.npids; k++)
				opt.pids[k].t0 = proc_ticks(opt.pids[k].pid) -
						 opt.pids[k].t0;
			if (opt.stats)
				read_stats(&side, sv1);
			g.measuring = 0;
			g.stopping = 1;
			t_quit = mono() + 2000000000ull;
			/* nothing in flight: leave now (waiters leave the
			 * queue by closing) */
			for (i = 0; i < g.n; i++)
				if (g.c[i].st == S_QUEUED ||
				    g.c[i].st == S_SLEEP)
					conn_close(&g.c[i]);
		}
		if (g.stopping) {
			for (live = 0, i = 0; i < g.n; i++)
				live += g.c[i].fd >= 0;
			if (!live || now >= t_quit)
				break;
		}
		/* redis-handoff with --sleep-ms: wake the sleepers */
		timeout = g.stopping ? 50 : 100;
		if (opt.sleep_ms) {
			for (i = 0; i < g.n; i++) {
				struct conn *c = &g.c[i];

				if (c->st != S_SLEEP)
					continue;
				if (c->wake <= now) {
					r_set(c);
					flush(c);
				} else if ((c->wake - now + 999999) / 1000000 <
					   (uint64_t)timeout) {
					/* rounded up: never a busy loop */
					timeout =
						(int)((c->wake - now + 999999) /
						      1000000);
				}
			}
		}
		poll_once(timeout);
	}
	secs = (double)(t_e - t_w) / 1e9;
	printf("mode=%s conns=%d secs=%.3f ops=%llu rate=%.1f",
	       mode_names[opt.mode], opt.conns, secs,
	       (unsigned long long)(ops1 - g.ops0),
	       (double)(ops1 - g.ops0) / secs);
	if (r_handoff())
		printf(" fails=%llu fail_rate=%.1f",
		       (unsigned long long)(fails1 - g.fails0),
		       (double)(fails1 - g.fails0) / secs);
	if (opt.mode == M_DLOCK_PAIRS || opt.mode == M_REDIS_PAIRS ||
	    opt.mode == M_DLOCK_CONNECTS)
		printf(" p50_us=%.0f p99_us=%.0f p999_us=%.0f", lat_q(0.50),
		       lat_q(0.99), lat_q(0.999));
	if (opt.mode == M_DLOCK_HANDOFF || r_handoff()) {
		for (i = 0; i < g.n; i++) {
			if (g.c[i].grants < gmin)
				gmin = g.c[i].grants;
			if (g.c[i].grants > gmax)
				gmax = g.c[i].grants;
		}
		printf(" grants_per_conn_min=%llu grants_per_conn_max=%llu",
		       (unsigned long long)gmin, (unsigned long long)gmax);
		/* requests that tried to take the lock, per grant: 1 when
		 * waiters queue, 1 + failures when they poll */
		if (ops1 > g.ops0)
			printf(" attempts_per_grant=%.2f",
			       (double)(att1 - g.attempts0) /
				       (double)(ops1 - g.ops0));
		/* how long an acquisition (a write, with --write-pct >
		 * 0) waited from its first try to its grant */
		printf(" wait_p50_us=%.0f wait_p99_us=%.0f wait_max_us=%.0f",
		       lat_q(0.50), lat_q(0.99), (double)g.wait_max / 1e3);
		if (opt.write_pct >= 0)
			printf(" writes=%llu write_rate=%.1f",
			       (unsigned long long)(wr1 - g.writes0),
			       (double)(wr1 - g.writes0) / secs);
	}
	printf(" lost=%llu expired_events=%llu", (unsigned long long)g.lost,
	       (unsigned long long)g.events_expired);
	ours = (double)(cpu1 - cpu0) / 1e6 / secs;
	printf(" cpu_bench=%.3f", ours);
	for (k = 0; k < opt.npids; k++) {
		cores = (double)opt.pids[k].t0 / (double)hz / secs;
		ours += cores;
		printf(" cpu_%s=%.3f", opt.pids[k].name, cores);
	}
	/* what other processes used meanwhile (other users of the
	 * machine); kernel threads and interrupts apart: they mostly work
	 * for what is measured (fsyncs, loopback TCP) */
	cores = (double)(proc1 - proc0 - (kt1 - kt0)) / (double)hz / secs;
	printf(" cpu_machine=%.3f cpu_other=%.3f cpu_kernel=%.3f"
	       " cpu_steal=%.3f",
	       (double)(proc1 - proc0 + irq1 - irq0) / (double)hz / secs,
	       cores - ours > 0 ? cores - ours : 0.0,
	       (double)(kt1 - kt0 + irq1 - irq0) / (double)hz / secs,
	       (double)(steal1 - steal0) / (double)hz / secs);
	if (opt.stats) {
		for (k = 0; k < NSTATS; k++)
			printf(" stat_%s=%llu", stat_keys[k],
			       (unsigned long long)(k == NSTATS - 1
							    ? sv1[k]
							    : sv1[k] - sv0[k]));
		print_pct("commands_per_batch", sv1[0] - sv0[0],
			  sv1[2] - sv0[2]);
		print_pct("round_trips_per_batch", sv1[3] - sv0[3],
			  sv1[2] - sv0[2]);
		print_pct("writes_per_batch", sv1[4] - sv0[4], sv1[2] - sv0[2]);
	}
	printf("\n");
	if (side.fd >= 0)
		close(side.fd);
}

static void run_fill(void)
{
	struct conn *c;
	uint64_t t0, t1;

	if (opt.mode == M_REDIS_FILL)
		r_script_load(); /* also checks that Redis is there */
	open_conns(1);
	c = &g.c[0];
	t0 = mono();
	if (opt.mode == M_FILL) {
		sendf(c, "HELLO owner=%s\r\n", opt.owner);
		c->st = S_HELLO;
		d_fill_next(c);
	} else {
		r_fill_next(c);
	}
	flush(c);
	while (c->st != S_DONE)
		poll_once(1000);
	t1 = mono();
	printf("mode=%s count=%ld name_len=%zu secs=%.3f rate=%.1f\n",
	       mode_names[opt.mode], opt.count, strlen(opt.tag) + 8,
	       (double)(t1 - t0) / 1e9,
	       (double)opt.count / ((double)(t1 - t0) / 1e9));
	close(c->fd);
}

/* ---- waitport, freeport
 * ------------------------------------------------------ */

static void run_waitport(void)
{
	uint64_t start = opt.since_ns ? opt.since_ns : now_ns(CLOCK_REALTIME);
	uint64_t end = mono() + (uint64_t)opt.timeout_ms * 1000000;
	int redis = strcmp(opt.proto, "redis") == 0;
	struct timeval tv = {0, 200000};
	char buf[512];
	ssize_t n;
	int fd;

	for (;;) {
		fd = tcp_connect(0);
		if (fd >= 0) {
			SSL *ssl = NULL;

			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
				   sizeof(tv));
			n = -1;
			if (!tls_ctx || (ssl = tls_wrap(fd)) != NULL) {
				if (io_write(fd, ssl, "PING\r\n", 6) == 6)
					n = io_read(fd, ssl, buf,
						    sizeof(buf) - 1);
			}
			SSL_free(ssl);
			close(fd);
			if (n > 0) {
				buf[n] = '\0';
				if (strncmp(buf, redis ? "+PONG" : "OK PONG",
					    redis ? 5 : 7) == 0)
					break;
			}
		}
		if (mono() > end)
			die("nothing answers PING on %s:%d after %ld ms",
			    opt.host, opt.port, opt.timeout_ms);
		usleep(1000);
	}
	printf("ready_ms=%.1f\n",
	       (double)(now_ns(CLOCK_REALTIME) - start) / 1e6);
}

static void run_freeport(void)
{
	int fds[64], i,
		n = !opt.count_set   ? 1
		    : opt.count > 64 ? 64
				     : (int)opt.count;
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al;

	for (i = 0; i < n; i++) {
		fds[i] = socket(AF_INET, SOCK_STREAM, 0);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		a.sin_port = 0;
		al = sizeof(a);
		if (fds[i] < 0 ||
		    bind(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0 ||
		    getsockname(fds[i], (struct sockaddr *)&a, &al) != 0)
			die("freeport: %s", strerror(errno));
		printf("%d\n", ntohs(a.sin_port));
	}
	for (i = 0; i < n; i++)
		close(fds[i]);
}

int main(int argc, char **argv)
{
	struct rlimit rl;

	parse_args(argc, argv);
	setvbuf(stdout, NULL, _IOLBF, 0);
	tls_init();
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	switch (opt.mode) {
	case M_WAITPORT:
		run_waitport();
		return 0;
	case M_FREEPORT:
		run_freeport();
		return 0;
	default:
		break;
	}
	if (!opt.port)
		die("--port is required");
	g.ep = epoll_create1(EPOLL_CLOEXEC);
	if (g.ep < 0)
		die("epoll_create1: %s", strerror(errno));
	if (opt.mode == M_FILL || opt.mode == M_REDIS_FILL)
		run_fill();
	else
		run_load();
	return 0;
}
