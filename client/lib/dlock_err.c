/* SPDX-License-Identifier: MIT */
/*
 * dlock_err.c -- the text of the calling thread's last failure
 * (dlock_last_error, dlock.h): one buffer per thread, cleared by every
 * public call as it starts and set by whatever part of libdlock failed
 * (a request's ERR line, the transport, a connection attempt). A leaf:
 * it calls nothing of the library.
 */
#include <stdio.h>

#include "client/lib/dlock_private.h"

static _Thread_local char last_error[DLOCK__ERR_MAX];

const char *dlock_last_error(void)
{
	return last_error;
}

/* Every public call starts with it: the text belongs to this thread's
 * last call, never to an earlier one that happened to get an ERR. */
void dlock__last_error_clear(void)
{
	last_error[0] = '\0';
}

void dlock__last_error_set(const char *text)
{
	snprintf(last_error, sizeof(last_error), "%s", text);
}
