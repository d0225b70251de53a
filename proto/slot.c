/* SPDX-License-Identifier: MIT */
/*
 * slot.c -- Redis Cluster's hash slot (slot.h). CRC16/XMODEM is computed
 * bit by bit, without a table: a slot is asked once per link and once
 * per routed name, never per write.
 */
#include <stdint.h>
#include <string.h>

#include "proto/slot.h"

static uint16_t crc16(const char *p, size_t n)
{
	uint16_t crc = 0;
	size_t i;
	int b;

	for (i = 0; i < n; i++) {
		crc ^= (uint16_t)((unsigned char)p[i] << 8);
		for (b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)((crc << 1) ^ 0x1021)
					   : (uint16_t)(crc << 1);
	}
	return crc;
}

int dl_hash_tag(const char *key, size_t len, size_t *off, size_t *taglen)
{
	const char *open = memchr(key, '{', len), *close;

	if (!open)
		return 0;
	close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
	if (!close || close == open + 1)
		return 0;
	*off = (size_t)(open + 1 - key);
	*taglen = (size_t)(close - open - 1);
	return 1;
}

unsigned dl_key_slot(const char *key, size_t len)
{
	size_t off, n;

	if (dl_hash_tag(key, len, &off, &n))
		return crc16(key + off, n) % DL_SLOTS;
	return crc16(key, len) % DL_SLOTS;
}
