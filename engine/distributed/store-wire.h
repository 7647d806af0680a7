/* The rendezvous store's wire format, shared by its server (store-server.c) and client
 * (store.c). Internal to engine/distributed.
 *
 * Integers are big-endian:
 *   hello    client → "CHST" u32 version u32 token_len token
 *   request  client → u8 op, 3 × u8 0, u32 key_len, u64 value_len, key, value
 *   response server → u8 status, 3 × u8 0, u32 0, u64 length, payload
 * The hello is answered with a response: ok (no payload), refused, or other-job (refused
 * because the token's job half differs: the store serves another job, and waiting for it
 * cannot help). Status ok = the value (get, add) or nothing; missing = no such key; refused
 * and other-job = the payload is the reason, and the server closes the connection after it.
 * Version 2: tokens have a job half and an attempt half (cohort_dist_job_token). */
#pragma once

#include <glib.h>
#include <string.h>

#define STORE_MAGIC     "CHST"
#define STORE_VERSION   2u
#define STORE_HELLO_LEN 12
#define STORE_HDR_LEN   16
/* A refusal's reason is short text; a client reads no more of it than this. */
#define STORE_MAX_REASON 4096
/* The longest decimal text of an add delta ("-9223372036854775808" is 20 bytes). */
#define STORE_MAX_DELTA 32

enum { OP_SET = 1, OP_GET = 2, OP_ADD = 3, OP_CHECK = 4, OP_DELETE = 5 };
enum { ST_OK = 0, ST_MISSING = 1, ST_REFUSED = 2, ST_OTHER_JOB = 3 };

static inline void store_put_u32(guint8 *p, guint32 v)
{
  v = GUINT32_TO_BE(v);
  memcpy(p, &v, 4);
}

static inline void store_put_u64(guint8 *p, guint64 v)
{
  v = GUINT64_TO_BE(v);
  memcpy(p, &v, 8);
}

static inline guint32 store_get_u32(const guint8 *p)
{
  guint32 v;
  memcpy(&v, p, 4);
  return GUINT32_FROM_BE(v);
}

static inline guint64 store_get_u64(const guint8 *p)
{
  guint64 v;
  memcpy(&v, p, 8);
  return GUINT64_FROM_BE(v);
}

/* A frame header: request (code = op, a = key length, b = value length) or response
 * (code = status, a = 0, b = payload length). */
static inline void store_put_header(guint8 hdr[STORE_HDR_LEN], guint8 code, guint32 a, guint64 b)
{
  memset(hdr, 0, STORE_HDR_LEN);
  hdr[0] = code;
  store_put_u32(hdr + 4, a);
  store_put_u64(hdr + 8, b);
}
