/* SPDX-License-Identifier: MIT */
/*
 * stock.c -- libdlock by example: many buyers, a few items, one lock.
 *
 *   stock [-h host] [-p port] [-b buyers] [-i items] [-P processes]
 *         [-f file]
 *
 * The stock is a file shared by every process: one line, "<count>
 * <token>", the number of items left and the fencing token of the last
 * write. The parent puts <items> in it (default 10; in a temporary file
 * unless -f names one), forks <processes> children (default 4), and each
 * child runs its share of <buyers> threads (default 1000 in all). A buyer:
 *
 *     dlock_lock("stock", ttl 10 s, wait forever)
 *     read the file; if an item is left, write count - 1 with our token
 *     dlock_unlock()
 *
 * Fencing: the file remembers the token of its last writer, and a write
 * with a smaller token is refused. A buyer whose lease ran out while it was
 * paused (and whose lock went to someone else, with a larger token) cannot
 * overwrite the newer state. With a real resource -- a database row, an
 * object store -- the check lives in the resource, next to the data.
 *
 * One client per process, shared by its threads: a dlock_client is
 * thread-safe, and its threads exclude each other on a name (the library
 * queues them locally, as a mutex would). One connection per process
 * instead of one per buyer keeps the daemon's connections and the demo's
 * threads few; between processes, the daemon's FIFO queue decides.
 *
 * Each child reports its sales on a pipe; the parent adds them up, prints
 * "sold N of M items", and exits 0 only if exactly M were sold and the
 * file ends at 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dlock.h> /* pkg-config --cflags --libs dlock */

#define LOCK_NAME    "stock"
#define LOCK_TTL_MS  10000
#define RECORD_LEN   32 /* "%010ld %020" PRIu64 "\n", rewritten in place */
#define PROCS_MAX    64
#define THREAD_STACK (256 * 1024)

struct stock_file {
	int fd;
	long count;
	uint64_t token; /* of the last write */
};

static int stock_read(struct stock_file *f)
{
	char rec[RECORD_LEN + 1];
	ssize_t n = pread(f->fd, rec, RECORD_LEN, 0);

	if (n != RECORD_LEN)
		return -1;
	rec[RECORD_LEN] = '\0';
	return sscanf(rec, "%ld %" SCNu64, &f->count, &f->token) == 2 ? 0 : -1;
}

/* The fenced write: refused (-1) if the file saw a larger token. */
static int stock_write(struct stock_file *f, long count, uint64_t token)
{
	char rec[64];

	if (stock_read(f) < 0 || token < f->token)
		return -1;
	if (snprintf(rec, sizeof(rec), "%010ld %020" PRIu64 "\n", count,
		     token) != RECORD_LEN)
		return -1;
	return pwrite(f->fd, rec, RECORD_LEN, 0) == RECORD_LEN ? 0 : -1;
}

/* ---- a child process: buyers sharing one client -------------------------- */

struct shop {
	dlock_client *c;
	struct stock_file file;
	pthread_mutex_t mu; /* guards the counters below */
	long sold, errors;
};

static void *buyer(void *arg)
{
	struct shop *s = arg;
	dlock_lease *l;
	int sold = 0, err;

	err = dlock_lock(s->c, LOCK_NAME, LOCK_TTL_MS, DLOCK_WAIT_FOREVER, &l);
	if (err) {
		fprintf(stderr, "stock: lock: %s\n", dlock_strerror(err));
		goto out;
	}
	/* the critical section: read, decide, write with our token */
	if (stock_read(&s->file) < 0) {
		err = -1;
	} else if (s->file.count > 0) {
		if (stock_write(&s->file, s->file.count - 1,
				dlock_lease_token(l)) == 0)
			sold = 1;
		else
			fprintf(stderr,
				"stock: write refused (token %" PRIu64
				" is stale)\n",
				dlock_lease_token(l));
	}
	if (dlock_unlock(s->c, l) != 0)
		err = -1;
out:
	pthread_mutex_lock(&s->mu);
	s->sold += sold;
	s->errors += err != 0;
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

static int run_child(const struct dlock_options *o, const char *path,
		     int nbuyers, int out_fd)
{
	struct shop s = {.mu = PTHREAD_MUTEX_INITIALIZER};
	pthread_t *t = calloc((size_t)nbuyers, sizeof(*t));
	pthread_attr_t attr;
	char msg[32];
	int i, n = 0, err;

	if (!t || (s.file.fd = open(path, O_RDWR)) < 0) {
		perror("stock: child");
		return 1;
	}
	if ((err = dlock_connect(o, &s.c)) != 0) {
		fprintf(stderr, "stock: connect: %s\n", dlock_strerror(err));
		return 1;
	}
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, THREAD_STACK);
	for (i = 0; i < nbuyers; i++, n++)
		if (pthread_create(&t[i], &attr, buyer, &s) != 0)
			break;
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	dlock_close(s.c);
	snprintf(msg, sizeof(msg), "%ld\n", s.sold);
	if (write(out_fd, msg, strlen(msg)) < 0)
		return 1;
	return s.errors == 0 && n == nbuyers ? 0 : 1;
}

/* ---- the parent ---------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr, "usage: stock [-h host] [-p port] [-b buyers] "
			"[-i items] [-P processes] [-f file]\n");
	exit(2);
}

static int positive(const char *s)
{
	char *end;
	long v = strtol(s, &end, 10);

	if (*s == '\0' || *end != '\0' || v <= 0 || v > 1000000)
		usage();
	return (int)v;
}

int main(int argc, char **argv)
{
	struct dlock_options o;
	struct stock_file f;
	char path[256] = "", rec[64], buf[32];
	int buyers = 1000, items = 10, procs = 4, opt, i, ok = 1, temp = 0;
	int pipes[PROCS_MAX];
	pid_t pids[PROCS_MAX];
	long sold = 0;

	dlock_options_init(&o);
	while ((opt = getopt(argc, argv, "h:p:b:i:P:f:")) != -1) {
		switch (opt) {
		case 'h':
			o.host = optarg;
			break;
		case 'p':
			o.port = positive(optarg);
			break;
		case 'b':
			buyers = positive(optarg);
			break;
		case 'i':
			items = positive(optarg);
			break;
		case 'P':
			procs = positive(optarg);
			break;
		case 'f':
			snprintf(path, sizeof(path), "%s", optarg);
			break;
		default:
			usage();
		}
	}
	if (procs > PROCS_MAX || procs > buyers)
		usage();

	/* the stock: <items> left, written by nobody yet (token 0) */
	if (path[0]) {
		f.fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
	} else {
		snprintf(path, sizeof(path), "%s/dlock-stock-XXXXXX",
			 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
		f.fd = mkstemp(path);
		temp = 1;
	}
	if (f.fd < 0) {
		perror(path);
		return 1;
	}
	snprintf(rec, sizeof(rec), "%010d %020d\n", items, 0);
	if (pwrite(f.fd, rec, RECORD_LEN, 0) != RECORD_LEN) {
		perror(path);
		return 1;
	}
	fflush(stdout);

	for (i = 0; i < procs; i++) {
		int p[2], share = buyers / procs + (i < buyers % procs);

		if (pipe(p) < 0 || (pids[i] = fork()) < 0) {
			perror("stock");
			return 1;
		}
		if (pids[i] == 0) {
			close(p[0]);
			_exit(run_child(&o, path, share, p[1]));
		}
		close(p[1]);
		pipes[i] = p[0];
	}
	for (i = 0; i < procs; i++) {
		ssize_t n = read(pipes[i], buf, sizeof(buf) - 1);
		int st;

		buf[n > 0 ? n : 0] = '\0';
		sold += strtol(buf, NULL, 10);
		close(pipes[i]);
		if (waitpid(pids[i], &st, 0) != pids[i] || !WIFEXITED(st) ||
		    WEXITSTATUS(st) != 0) {
			fprintf(stderr, "stock: buyer process %d failed\n", i);
			ok = 0;
		}
	}
	if (stock_read(&f) < 0 || f.count != 0)
		ok = 0;
	printf("sold %ld of %d items (%d buyers in %d processes; stock file "
	       "at %ld, last token %" PRIu64 ")\n",
	       sold, items, buyers, procs, f.count, f.token);
	close(f.fd);
	if (temp)
		unlink(path);
	return ok && sold == items ? 0 : 1;
}
