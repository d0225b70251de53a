/* SPDX-License-Identifier: MIT */
/*
 * proof.c -- a grant's proof (proof.h): HMAC-SHA256 with OpenSSL.
 */
#include "server/proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

static const char hexd[] = "0123456789abcdef";

/* The MAC's input: each field ended by a NUL (none can hold one: names,
 * owners and users are checked words, ids hex), numbers in decimal,
 * behind a version string that a later form would change. */
static size_t input(const struct dl_proof_in *in, unsigned char *buf,
		    size_t cap)
{
	const struct dl_str parts[] = {in->cluster, in->name, in->owner,
				       in->bind};
	char nums[96];
	size_t n = 0, i, l;

	memcpy(buf, "dlock-proof-1", 14);
	n = 14;
	for (i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		l = parts[i].len;
		if (n + l + 1 > cap)
			l = cap - n - 1;
		memcpy(buf + n, parts[i].p, l);
		n += l;
		buf[n++] = '\0';
	}
	l = (size_t)snprintf(nums, sizeof(nums), "%llu%c%c%c%u%c%llu",
			     (unsigned long long)in->token, '\0',
			     in->shared ? 's' : 'x', '\0', (unsigned)in->limit,
			     '\0', (unsigned long long)in->until);
	if (n + l <= cap) {
		memcpy(buf + n, nums, l);
		n += l;
	}
	return n;
}

static void mac(const unsigned char key[DL_PROOF_KEY_LEN],
		const struct dl_proof_in *in, unsigned char out[32])
{
	unsigned char buf[4 * DL_NAME_MAX + 128];
	unsigned int len = 32;
	size_t n = input(in, buf, sizeof(buf));

	if (!HMAC(EVP_sha256(), key, DL_PROOF_KEY_LEN, buf, n, out, &len))
		memset(out, 0, 32);
}

void dl_proof_make(const unsigned char key[DL_PROOF_KEY_LEN],
		   const struct dl_proof_in *in, char *out)
{
	unsigned char m[32];
	int i;

	mac(key, in, m);
	for (i = 0; i < DL_PROOF_HEX / 2; i++) {
		out[2 * i] = hexd[m[i] >> 4];
		out[2 * i + 1] = hexd[m[i] & 15];
	}
	out[DL_PROOF_HEX] = '\0';
}

int dl_proof_check(const unsigned char key[DL_PROOF_KEY_LEN],
		   const struct dl_proof_in *in, struct dl_str proof)
{
	char want[DL_PROOF_HEX + 1];

	if (proof.len != DL_PROOF_HEX)
		return 0;
	dl_proof_make(key, in, want);
	return CRYPTO_memcmp(want, proof.p, DL_PROOF_HEX) == 0;
}

int dl_proof_key_parse(const char *hex, unsigned char key[DL_PROOF_KEY_LEN])
{
	const char *a, *b;
	int i;

	if (strlen(hex) != DL_PROOF_KEY_HEX)
		return -1;
	for (i = 0; i < DL_PROOF_KEY_LEN; i++) {
		if (!(a = strchr(hexd, hex[2 * i])) || !hex[2 * i] ||
		    !(b = strchr(hexd, hex[2 * i + 1])) || !hex[2 * i + 1])
			return -1;
		key[i] = (unsigned char)((a - hexd) << 4 | (b - hexd));
	}
	return 0;
}

int dl_proof_key_new(char *hex)
{
	unsigned char k[DL_PROOF_KEY_LEN];
	int i;

	if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k))
		return -1;
	for (i = 0; i < DL_PROOF_KEY_LEN; i++) {
		hex[2 * i] = hexd[k[i] >> 4];
		hex[2 * i + 1] = hexd[k[i] & 15];
	}
	hex[DL_PROOF_KEY_HEX] = '\0';
	return 0;
}
