/* SPDX-License-Identifier: MIT */
/*
 * store_uv.h -- hiredis async contexts on the libuv loop: the store's own
 * adapter (store_uv.c), used for the link (store.c) and the Sentinel
 * connections (store_find.c).
 *
 * hiredis ships a header-only libuv adapter. The store used to attach it
 * and then replace three of its hooks with functions that read its
 * private struct: a struct whose layout is that version's alone. Owning
 * the adapter (about a hundred lines over hiredis's public ev hooks)
 * removes that, and lets the link do what the stock adapter cannot:
 *
 * Lazy write interest. The stock adapter calls uv_poll_start() each time
 * hiredis wants or stops wanting to write, and libuv answers each call by
 * taking the fd out of epoll and putting it back: a batch cost three
 * epoll_ctl (measured with perf: one per lock+unlock pair under load, a
 * tenth of the daemon's system calls). With `lazy`, a connected context's
 * wish to write only marks it due, and dl__uv_push() -- the store calls it
 * once per loop iteration, in the flush phase -- writes what is buffered
 * with a plain write(); only what the kernel does not take waits for the
 * fd to become writable, with real write interest. While the context
 * connects, write interest is real: that is how the connect's completion
 * is seen. Interest that does not change calls libuv not at all (read
 * interest is set once and kept).
 */
#ifndef DL_SERVER_STORE_UV_H
#define DL_SERVER_STORE_UV_H

#include <hiredis/async.h>
#include <uv.h>

/* Attach ac to the loop. 0, DL_ENOMEM, or DL_EUNAVAILABLE (libuv refused
 * its fd); on failure nothing is attached and ac is the caller's to
 * free. The attachment is released by hiredis when it frees ac. */
int dl__uv_attach(redisAsyncContext *ac, uv_loop_t *loop, int lazy);
/* A lazy context's due write: write what hiredis buffered now. ac may be
 * freed in there (a write error ends the link). */
void dl__uv_push(redisAsyncContext *ac);

#endif /* DL_SERVER_STORE_UV_H */
