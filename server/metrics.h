/* SPDX-License-Identifier: MIT */
/*
 * metrics.h -- a Prometheus text endpoint (GET /metrics) on its own address.
 *
 * Off unless [metrics] listen is set. Served by libuv on the daemon's loop:
 * one request per connection, answered from dl_stats_collect() and the
 * lock table's histograms, then closed. Over TLS when the daemon has a
 * certificate ([tls], tls.h); otherwise only a loopback address may serve
 * it, unless allow_remote_without_tls (config.c checks). At most
 * DL_METRICS_CONNS_MAX connections at once, each given
 * DL_METRICS_TIMEOUT_MS to be answered, so a scraper can never cost the
 * lock service more than that; a new connection that finds every slot
 * taken closes the oldest one still waiting for its request, so sockets
 * left idle never block a scrape.
 */
#ifndef DL_SERVER_METRICS_H
#define DL_SERVER_METRICS_H

struct dl_server;
struct dl_metrics;

/* Start listening on srv->cfg.metrics (a no-op when it is empty). Returns
 * 0, or a libuv error code. */
int dl_metrics_start(struct dl_server *srv, struct dl_metrics **out);
/* Close the listener and open connections; frees m when they are closed.
 * NULL is a no-op. */
void dl_metrics_stop(struct dl_metrics *m);

#endif /* DL_SERVER_METRICS_H */
