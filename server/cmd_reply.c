/* SPDX-License-Identifier: MIT */
/*
 * cmd_reply.c -- the words every reply of cmd.c and cmd_info.c is made
 * of: its buffer begun and sent, an owner's key and a holder's
 * description as the wire shows them (cmd_private.h). Both files use
 * this one, which uses neither.
 */
#include <string.h>

#include "server/cmd_private.h"
#include "server/log.h"

struct dl_fmt *dl__cmd_reply_begin(struct reply *r, const char *head)
{
	dl_fmt_init(&r->f, r->buf, sizeof(r->buf));
	dl_fmt_word(&r->f, head);
	return &r->f;
}

void dl__cmd_reply_send(struct dl_conn *c, struct reply *r, struct dl_str tag,
			const struct dl_line *line)
{
	size_t tag_at = r->f.len + 4; /* after " id=" (dl_fmt_end) */
	struct dl_line with_tag;
	int n = dl_fmt_end(&r->f, tag);

	if (n < 0) {
		/* Cannot happen with the wire limits; say so rather than
		 * send half a line. */
		dl_error("reply did not fit in %d bytes", DL_REPLY_MAX);
		dl_conn_error(c, DL_EINTERNAL, "reply too long", tag);
		return;
	}
	if (line && tag.len) {
		/* where the tag is, for a line that may be withdrawn
		 * (break_line) */
		with_tag = *line;
		with_tag.tag_off = (uint16_t)tag_at;
		with_tag.tag_len = (uint8_t)tag.len;
		line = &with_tag;
	}
	dl_conn_send(c, r->buf, (size_t)n, line);
}

/* An owner's key as the wire shows it: owner=<id>, then user=<name> when
 * the owner is a user's of the users file (the default user's owners,
 * and the quarantine's, are shown as they are). */
void dl__cmd_fmt_owner(struct dl_fmt *f, int kv, struct dl_str key)
{
	struct dl_str user = dl_owner_key_account(key), id = key;

	if (key.len == 0)
		key = id = DL_STR_LIT("-");
	else if (user.len && !(key.len == sizeof(DL_QUARANTINE_OWNER) - 1 &&
			       !memcmp(key.p, DL_QUARANTINE_OWNER, key.len)))
		id = dl_owner_key_id(key);
	else
		user.len = 0;
	if (kv)
		dl_fmt_kv_str(f, "owner", id);
	else
		dl_fmt_str(f, id);
	if (user.len)
		dl_fmt_kv_str(f, "user", user);
}

/* What a holder said of itself (HELLO host= pid= cmd=), each part only
 * when said: the text as it came, checked printable without space
 * (proto/desc.h), so it needs no quoting here. */
void dl__cmd_fmt_desc(struct dl_fmt *f, const struct dl_desc *d)
{
	if (!d)
		return;
	if (d->host_len)
		dl_fmt_kv_str(f, "host", dl_desc_host(d));
	if (d->pid)
		dl_fmt_kv_u64(f, "pid", d->pid);
	if (d->cmd_len)
		dl_fmt_kv_str(f, "cmd", dl_desc_cmd(d));
}
