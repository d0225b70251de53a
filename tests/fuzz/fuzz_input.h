/* SPDX-License-Identifier: MIT */
/*
 * fuzz_input.h -- a fuzz input read as a program: one byte at a time,
 * zeros once it is used up (fuzz_engine.c, fuzz_client.c).
 */
#ifndef DL_TESTS_FUZZ_INPUT_H
#define DL_TESTS_FUZZ_INPUT_H

#include <stddef.h>
#include <stdint.h>

struct input {
	const uint8_t *p;
	size_t n; /* bytes left */
};

static inline unsigned next(struct input *in)
{
	if (in->n == 0)
		return 0;
	in->n--;
	return *in->p++;
}

#endif /* DL_TESTS_FUZZ_INPUT_H */
