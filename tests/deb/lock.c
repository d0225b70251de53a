/* SPDX-License-Identifier: MIT */
/*
 * lock.c -- a program of an operator's, built against the installed
 * libdlock-dev (tests/deb/install_test.sh): it connects to the daemon
 * named by DLOCK_PORT with the password of the file DLOCK_PASSWORD_FILE,
 * takes a lock, prints its fencing token and releases it.
 *
 *   lock <name>      exit 0 and the token on stdout, else 1 and why
 */
#include <dlock.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PASSWORD_MAX 256 /* longer than any password the test writes */

static int fail(const char *what, int err)
{
	fprintf(stderr, "lock: %s: %s (%s)\n", what, dlock_strerror(err),
		dlock_last_error() ? dlock_last_error() : "");
	return 1;
}

int main(int argc, char **argv)
{
	char password[PASSWORD_MAX] = "";
	const char *port = getenv("DLOCK_PORT");
	const char *pwfile = getenv("DLOCK_PASSWORD_FILE");
	struct dlock_options o;
	dlock_client *c;
	dlock_lease *l;
	uint64_t token;
	FILE *f;
	int err;

	if (argc != 2 || !port || !pwfile) {
		fprintf(stderr, "usage: DLOCK_PORT=P DLOCK_PASSWORD_FILE=F "
				"lock <name>\n");
		return 1;
	}
	f = fopen(pwfile, "r");
	if (!f || !fgets(password, sizeof password, f)) {
		fprintf(stderr, "lock: cannot read %s\n", pwfile);
		return 1;
	}
	fclose(f);
	password[strcspn(password, "\n")] = '\0';

	dlock_options_init(&o);
	o.port = atoi(port);
	o.password = password;
	if ((err = dlock_connect(&o, &c)) < 0)
		return fail("connect", err);
	if ((err = dlock_lock(c, argv[1], 10000, 5000, &l)) < 0)
		return fail("lock", err);
	token = dlock_lease_token(l);
	if ((err = dlock_unlock(c, l)) < 0)
		return fail("unlock", err);
	dlock_close(c);
	printf("%" PRIu64 "\n", token);
	return 0;
}
