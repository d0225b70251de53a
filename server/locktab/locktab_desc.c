/* SPDX-License-Identifier: MIT */
/*
 * locktab_desc.c -- descriptions of holders (see locktab_desc.h): one
 * allocation each, the counted header and the text after it.
 */
#include "server/locktab/locktab_desc.h"

#include <stdlib.h>
#include <string.h>

#include "proto/desc.h"

_Static_assert(DL_DESC_HOST_MAX <= UINT8_MAX && DL_DESC_CMD_MAX <= UINT8_MAX,
	       "the lengths of a description fit its uint8_t fields");

int dl_desc_new(struct dl_str host, uint64_t pid, struct dl_str cmd,
		struct dl_desc **out)
{
	struct dl_desc *d;

	*out = NULL;
	if ((host.len && dl_desc_check(host.p, host.len, DL_DESC_HOST_MAX)) ||
	    (cmd.len && dl_desc_check(cmd.p, cmd.len, DL_DESC_CMD_MAX)) ||
	    pid > DL_DESC_PID_MAX)
		return DL_EBADARG;
	if (!host.len && !cmd.len && !pid)
		return 0;
	if (!(d = malloc(sizeof(*d) + host.len + cmd.len)))
		return DL_ENOMEM;
	d->refs = 1;
	d->pid = (uint32_t)pid;
	d->host_len = (uint8_t)host.len;
	d->cmd_len = (uint8_t)cmd.len;
	if (host.len)
		memcpy(d->text, host.p, host.len);
	if (cmd.len)
		memcpy(d->text + host.len, cmd.p, cmd.len);
	*out = d;
	return 0;
}

struct dl_desc *dl_desc_ref(struct dl_desc *d)
{
	if (d)
		d->refs++;
	return d;
}

void dl_desc_unref(struct dl_desc *d)
{
	if (d && --d->refs == 0)
		free(d);
}

struct dl_str dl_desc_host(const struct dl_desc *d)
{
	return (struct dl_str){d->text, d->host_len};
}

struct dl_str dl_desc_cmd(const struct dl_desc *d)
{
	return (struct dl_str){d->text + d->host_len, d->cmd_len};
}
