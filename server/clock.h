/* SPDX-License-Identifier: MIT */
/*
 * clock.h -- the daemon's two clocks, read at the moment of use.
 *
 * dl_mono_ms(): CLOCK_MONOTONIC milliseconds (uv_hrtime(), libuv's clock),
 * the clock of every lease and wait deadline. It is read when a request is
 * executed, never taken from uv_now(): that is the time the loop iteration
 * started, which can be before the request was even sent, and a lease
 * counted from it would end sooner than the countdown its holder started
 * when it sent the request (docs/design.md, "Clocks and the timer
 * wheel"). uv_now() has the same origin, so timers armed with
 * uv_timer_start() agree with these deadlines (at worst they fire a
 * little early and are re-armed). The monotonic
 * clock stops while the machine is suspended; deadlines then end later in
 * real time, never sooner, which is the safe side for holders.
 *
 * dl_wall_ms(): unix milliseconds, only for what outlives the process and
 * what people read: the deadlines written in Redis records (informative)
 * and the time part of the fencing-token floor. Nothing that decides
 * whether a lease is valid depends on it.
 */
#ifndef DL_SERVER_CLOCK_H
#define DL_SERVER_CLOCK_H

#include <stdint.h>
#include <sys/time.h>
#include <uv.h>

static inline uint64_t dl_mono_ms(void)
{
	return uv_hrtime() / 1000000;
}

static inline uint64_t dl_mono_us(void)
{
	return uv_hrtime() / 1000;
}

static inline uint64_t dl_wall_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (uint64_t)tv.tv_sec * 1000 + (uint64_t)tv.tv_usec / 1000;
}

#endif /* DL_SERVER_CLOCK_H */
