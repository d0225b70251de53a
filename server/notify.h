/* SPDX-License-Identifier: MIT */
/*
 * notify.h -- the systemd readiness protocol, without libsystemd.
 *
 * sd_notify(3) is one datagram ("READY=1", "STOPPING=1", "WATCHDOG=1",
 * "STATUS=...") sent to the AF_UNIX socket named by $NOTIFY_SOCKET (a path,
 * or an abstract name starting with '@'). Without NOTIFY_SOCKET every call
 * is a no-op, so the daemon behaves the same outside systemd.
 */
#ifndef DL_SERVER_NOTIFY_H
#define DL_SERVER_NOTIFY_H

#include <stdint.h>

/* 0 when sent or not under systemd; a negative errno otherwise. */
int dl_notify(const char *state);

/* Watchdog interval asked by systemd (WATCHDOG_USEC, for this pid when
 * WATCHDOG_PID is set), in microseconds; 0 when none. */
uint64_t dl_notify_watchdog_usec(void);

#endif /* DL_SERVER_NOTIFY_H */
