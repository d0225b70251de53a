/* SPDX-License-Identifier: MIT */
/*
 * desc.h -- the text of a client's description of itself: who holds a
 * lock, for the people who find it busy.
 *
 *   HELLO owner=deploy-7 host=web3 pid=4242 cmd=make%20deploy
 *
 * host= and cmd= are text values, pid= a number (1..DL_DESC_PID_MAX).
 * The protocol has no quoting (a word ends at a space), so a text value
 * is one word: bytes 0x21..0x7e, where '%' starts an escape of two hex
 * digits naming a byte 0x20..0x7e -- %20 is a space, %25 a '%'. Nothing
 * else is accepted: no control byte, no line break, no byte above 0x7e,
 * not even escaped, so that a description can go into a reply, a Redis
 * record or a log line exactly as it came, and be shown to a person
 * decoded without any further care. Lengths are counted as sent,
 * escapes included (DL_DESC_HOST_MAX, DL_DESC_CMD_MAX).
 *
 * The server refuses a value that breaks the rule (ERR BAD_ARG); a client
 * never sends one: dl_desc_encode() turns any bytes into a valid value,
 * replacing what cannot be said with '?' and cutting what is too long.
 * No I/O, no allocation.
 */
#ifndef DL_PROTO_DESC_H
#define DL_PROTO_DESC_H

#include <stddef.h>

#include "proto/limits.h"

/* 0 if s[0..len) is a valid text value of 1..max bytes; DL_EBADARG for a
 * byte or an escape the rule refuses (or len 0), DL_ERANGE for a valid
 * value longer than max. */
int dl_desc_check(const char *s, size_t len, size_t max);

/*
 * The value that says s[0..len) (any bytes): printable ASCII is kept,
 * ' ' and '%' are escaped, anything else (a control byte, a line break, a
 * byte of UTF-8) becomes '?'. Cut to at most `max` bytes, never inside an
 * escape. Writes into out (room for max bytes, no NUL added) and returns
 * the length: 0 when nothing is left to say (s empty), a valid value
 * otherwise.
 */
size_t dl_desc_encode(const char *s, size_t len, char *out, size_t max);

/* The text a value says, for people: escapes decoded, and any byte that
 * is not printable ASCII (a value that broke the rule) shown as '?'.
 * Writes at most cap - 1 bytes and a NUL into out (cap > 0); returns the
 * length. */
size_t dl_desc_decode(const char *s, size_t len, char *out, size_t cap);

#endif /* DL_PROTO_DESC_H */
