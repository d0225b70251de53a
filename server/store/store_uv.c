/* SPDX-License-Identifier: MIT */
/*
 * store_uv.c -- hiredis async contexts on the libuv loop (store_uv.h).
 *
 * One struct uvctx per context, hung on ac->ev.data: the poll handle on
 * the context's fd and the interest it was last given. hiredis calls the
 * hooks below; libuv calls on_poll. The struct outlives the context by
 * one loop iteration: hiredis's cleanup hook closes the handle and clears
 * ac, and the struct is freed in the handle's close callback.
 */
#include "server/store/store_uv.h"

#include <stdlib.h>

#include "proto/proto.h"

struct uvctx {
	redisAsyncContext *ac; /* NULL once hiredis let go of it */
	uv_poll_t poll;
	int events;    /* UV_READABLE | UV_WRITABLE as last started */
	int lazy;      /* write interest only when a write falls short */
	int write_due; /* lazy: hiredis has bytes to write */
};

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct uvctx *u = h->data;

	if (status != 0) {
		/* An error on the fd (a refused connect, a reset): libuv has
		 * stopped the handle and reports no events. hiredis finds the
		 * error in the read or write it was waiting for, and fails
		 * the context now. Returning here (as hiredis 0.14's own
		 * adapter does) left each try made while Redis was down to
		 * the link's timeout: a Redis restarted in 1 s was reached
		 * 2 s later, past a 2 s leadership lease (found from
		 * outside). */
		events = u->events;
		u->events = 0;
	}
	if (u->ac && (events & UV_READABLE))
		redisAsyncHandleRead(u->ac);
	if (u->ac && (events & UV_WRITABLE))
		redisAsyncHandleWrite(u->ac);
}

static void set_events(struct uvctx *u, int events)
{
	if (events == u->events)
		return;
	u->events = events;
	if (events)
		uv_poll_start(&u->poll, events, on_poll);
	else
		uv_poll_stop(&u->poll);
}

static void add_read(void *arg)
{
	struct uvctx *u = arg;

	set_events(u, u->events | UV_READABLE);
}

static void del_read(void *arg)
{
	struct uvctx *u = arg;

	set_events(u, u->events & ~UV_READABLE);
}

static void add_write(void *arg)
{
	struct uvctx *u = arg;

	if (u->lazy && !(u->events & UV_WRITABLE) &&
	    (u->ac->c.flags & REDIS_CONNECTED))
		u->write_due = 1;
	else
		set_events(u, u->events | UV_WRITABLE);
}

static void del_write(void *arg)
{
	struct uvctx *u = arg;

	set_events(u, u->events & ~UV_WRITABLE);
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

static void cleanup(void *arg)
{
	struct uvctx *u = arg;

	u->ac = NULL; /* hiredis is freeing it */
	uv_close((uv_handle_t *)&u->poll, on_closed);
}

int dl__uv_attach(redisAsyncContext *ac, uv_loop_t *loop, int lazy)
{
	struct uvctx *u;

	if (ac->ev.data)
		return DL_EUNAVAILABLE; /* attached already */
	if (!(u = calloc(1, sizeof(*u))))
		return DL_ENOMEM;
	if (uv_poll_init(loop, &u->poll, ac->c.fd) != 0) {
		free(u);
		return DL_EUNAVAILABLE;
	}
	u->poll.data = u;
	u->ac = ac;
	u->lazy = lazy != 0;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = u;
	return 0;
}

void dl__uv_push(redisAsyncContext *ac)
{
	struct uvctx *u = ac->ev.data;

	if (!u || !u->write_due)
		return;
	u->write_due = 0;
	redisAsyncHandleWrite(ac);
	/* Not all written: hiredis asked again (add_write). The context may
	 * also have been freed in there (u stays until its close callback,
	 * with ac cleared). */
	if (u->ac && u->write_due) {
		u->write_due = 0;
		set_events(u, u->events | UV_WRITABLE);
	}
}
