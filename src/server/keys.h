/* API keys (keys.c): a keys file names each client and holds the SHA-256 of its key, never the
 * key itself, one "NAME HEX" line per key ('#' starts a comment). `facecast keys add NAME`
 * makes a key, prints it once and appends its line; `serve --api-keys FILE` then wants
 * "Authorization: Bearer KEY" on its control routes. */
#ifndef FC_SERVER_KEYS_H
#define FC_SERVER_KEYS_H

#include <stddef.h>

typedef struct fc_keys fc_keys;

#define FC_KEY_NAME_MAX 63

/* Reads a keys file. FC_ENOTFOUND, FC_EFORMAT (with the line) or FC_EINVAL (no keys). */
fc_keys *fc_keys_load(const char *path, int *err);
void fc_keys_free(fc_keys *k);
int fc_keys_count(const fc_keys *k);
/* The name a key belongs to, or NULL; key as presented (any length). The returned name lives as
 * long as k. */
const char *fc_keys_check(const fc_keys *k, const char *key, size_t len);

/* A new key for name (letters, digits, '_', '-', '.'; not already in the file): writes the key
 * ("fck_" + 43 base64url characters, 256 random bits) into key_out (at least 64 bytes) and
 * appends its line to path (created 0600 if missing). */
int fc_keys_add(const char *path, const char *name, char *key_out, size_t out_size);
/* Removes name's line(s) from path; FC_ENOTFOUND when there is none. */
int fc_keys_remove(const char *path, const char *name);
/* Valid key names. */
int fc_keys_name_valid(const char *name);

#endif
