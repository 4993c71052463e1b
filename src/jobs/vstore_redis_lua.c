/* The Redis video job store's scripts (vstore_redis_lua.h). Why scripts: see vstore_redis.c.
 * ARGV[1] is always the key prefix; key names are built from it inside the scripts, which is
 * why the store wants one standalone Redis (a cluster would need every key declared). */
#include "jobs/vstore_redis_lua.h"

#include <glib.h>

#define GROUP FC_VSTORE_REDIS_GROUP

/* Shared Lua: progress in percent from the shards' per-mille: 99 when every shard is rendered
 * (100 is for the joined file), and never less than it was (a shard taken over starts again). */
#define LUA_PROGRESS                                                                         \
  "local function progress(P, id, shards)\n"                                                \
  "  local sum = 0\n"                                                                       \
  "  for _, v in ipairs(redis.call('HVALS', P..'vprog:'..id)) do sum = sum + tonumber(v) end\n" \
  "  if shards <= 0 then return 0 end\n"                                                    \
  "  local p = math.floor(99 * sum / (shards * 1000))\n"                                   \
  "  if p > 99 then p = 99 end\n"                                                           \
  "  local was = tonumber(redis.call('HGET', P..'vjob:'..id, 'progress')) or 0\n"           \
  "  if was > p then p = was end\n"                                                         \
  "  return p\n"                                                                            \
  "end\n"

/* Shared Lua: a job finishes (status, error, expiry) unless it already has. */
#define LUA_FINISH                                                                           \
  "local function finish(P, id, status, err, now, ret)\n"                                   \
  "  local jk = P..'vjob:'..id\n"                                                           \
  "  local st = redis.call('HGET', jk, 'status')\n"                                         \
  "  if st ~= 'pending' and st ~= 'processing' then return false end\n"                     \
  "  local exp = tonumber(now) + tonumber(ret)\n"                                           \
  "  redis.call('HSET', jk, 'status', status, 'error', err, 'finished_ms', now,\n"          \
  "             'expires_ms', exp)\n"                                                       \
  "  redis.call('SREM', P..'vactive', id)\n"                                                \
  "  redis.call('ZADD', P..'vexpire', exp, id)\n"                                           \
  "  redis.call('DEL', P..'vdone:'..id, P..'vprog:'..id)\n"                                 \
  "  return true\n"                                                                         \
  "end\n"

#define LUA_ACK                                                                              \
  "local function ack(P, entry)\n"                                                          \
  "  if entry ~= '' then\n"                                                                 \
  "    redis.call('XACK', P..'vwork', '" GROUP "', entry)\n"                                \
  "    redis.call('XDEL', P..'vwork', entry)\n"                                             \
  "  end\n"                                                                                 \
  "end\n"

/* Shared Lua: a job and everything that names it goes. */
#define LUA_REMOVE                                                                           \
  "local function remove(P, id)\n"                                                          \
  "  local jk = P..'vjob:'..id\n"                                                           \
  "  local f = redis.call('HMGET', jk, 'owner', 'idem')\n"                                  \
  "  redis.call('DEL', jk, P..'vdone:'..id, P..'vprog:'..id)\n"                             \
  "  redis.call('ZREM', P..'vjobs', id)\n"                                                  \
  "  if f[1] then redis.call('ZREM', P..'vjobs:owner:'..f[1], id) end\n"                    \
  "  redis.call('ZREM', P..'vexpire', id)\n"                                                \
  "  redis.call('SREM', P..'vactive', id)\n"                                                \
  "  if f[2] and f[2] ~= '' then\n"                                                         \
  "    local v = redis.call('GET', f[2])\n"                                                 \
  "    if v and string.sub(v, 1, #id + 1) == id..' ' then redis.call('DEL', f[2]) end\n"    \
  "  end\n"                                                                                 \
  "end\n"

const char *const fc_vstore_redis_lua[VLUA_COUNT] = {
    /* submit: id, idem key name (""), sha, owner, request id, created, shards, spec, plan,
     * webhook, max unfinished. → {"ok", id} | {"exists", id} | {"conflict", id} |
     * {"taken", id} (the id is another job's) | {"busy", n} */
    [VLUA_SUBMIT] =
        "local P, id, ik = ARGV[1], ARGV[2], ARGV[3]\n"
        "if ik ~= '' then\n"
        "  local v = redis.call('GET', ik)\n"
        "  if v then\n"
        "    local sp = string.find(v, ' ', 1, true)\n"
        "    local oid, osha = string.sub(v, 1, sp - 1), string.sub(v, sp + 1)\n"
        "    if redis.call('EXISTS', P..'vjob:'..oid) == 1 then\n"
        "      if osha == ARGV[4] then return {'exists', oid} end\n"
        "      return {'conflict', oid}\n"
        "    end\n"
        "  end\n"
        "end\n"
        "local jk = P..'vjob:'..id\n"
        "if redis.call('EXISTS', jk) == 1 then return {'taken', id} end\n"
        "local busy = redis.call('SCARD', P..'vactive')\n"
        "if busy >= tonumber(ARGV[12]) then return {'busy', tostring(busy)} end\n"
        "if ik ~= '' then redis.call('SET', ik, id..' '..ARGV[4]) end\n"
        "redis.call('HSET', jk, 'id', id, 'owner', ARGV[5], 'request_id', ARGV[6],\n"
        "  'status', 'pending', 'progress', '0', 'error', '', 'shards', ARGV[8],\n"
        "  'shards_done', '0', 'created_ms', ARGV[7], 'started_ms', '0', 'finished_ms', '0',\n"
        "  'expires_ms', '0', 'seconds', '0', 'frames', '0', 'spec', ARGV[9], 'plan', ARGV[10],\n"
        "  'webhook', ARGV[11], 'idem', ik)\n"
        /* listed in submission order: a counter, not the clock (jobs of one millisecond, or
         * from nodes whose clocks differ, keep the order they were stored in) */
        "local seq = redis.call('INCR', P..'vseq')\n"
        "redis.call('ZADD', P..'vjobs', seq, id)\n"
        "redis.call('ZADD', P..'vjobs:owner:'..ARGV[5], seq, id)\n"
        "redis.call('SADD', P..'vactive', id)\n"
        "local n = tonumber(ARGV[8])\n"
        "if n <= 0 then\n"
        "  redis.call('HSET', jk, 'join', '1')\n"
        "  redis.call('XADD', P..'vwork', '*', 'job', id, 'shard', '-1')\n"
        "end\n"
        "for k = 0, n - 1 do redis.call('XADD', P..'vwork', '*', 'job', id, 'shard', tostring(k)) end\n"
        "return {'ok', id}\n",
    /* taken: id, shard, now → "processing" (work on it) or why not ("gone", "canceled",
     * "completed", "failed", "done") */
    [VLUA_TAKEN] =
        "local P, id = ARGV[1], ARGV[2]\n"
        "local jk = P..'vjob:'..id\n"
        "local st = redis.call('HGET', jk, 'status')\n"
        "if not st then return 'gone' end\n"
        "if st ~= 'pending' and st ~= 'processing' then return st end\n"
        "if tonumber(ARGV[3]) >= 0 and redis.call('SISMEMBER', P..'vdone:'..id, ARGV[3]) == 1 then\n"
        "  return 'done'\n"
        "end\n"
        "if st == 'pending' then redis.call('HSET', jk, 'status', 'processing', 'started_ms', ARGV[4]) end\n"
        "return 'processing'\n",
    /* touch: entry, consumer, id → "ok" | "lost" (another consumer has it) | "canceled" */
    [VLUA_TOUCH] =
        "local P, entry, me, id = ARGV[1], ARGV[2], ARGV[3], ARGV[4]\n"
        "local p = redis.call('XPENDING', P..'vwork', '" GROUP "', entry, entry, 1)\n"
        "if #p == 0 or p[1][2] ~= me then return 'lost' end\n"
        "redis.call('XCLAIM', P..'vwork', '" GROUP "', me, 0, entry, 'JUSTID')\n"
        "local st = redis.call('HGET', P..'vjob:'..id, 'status')\n"
        "if st ~= 'pending' and st ~= 'processing' then return 'canceled' end\n"
        "return 'ok'\n",
    /* progress: id, shard, done, total, now → the job's progress; -1: no such job, -2: no such
     * shard, -3: finished (nothing changes) */
    [VLUA_PROGRESS] = LUA_PROGRESS
        "local P, id, shard = ARGV[1], ARGV[2], ARGV[3]\n"
        "local jk = P..'vjob:'..id\n"
        "local st = redis.call('HGET', jk, 'status')\n"
        "if not st then return -1 end\n"
        "local shards = tonumber(redis.call('HGET', jk, 'shards'))\n"
        "if tonumber(shard) < 0 or tonumber(shard) >= shards then return -2 end\n"
        "if st ~= 'pending' and st ~= 'processing' then return -3 end\n"
        "if st == 'pending' then redis.call('HSET', jk, 'status', 'processing', 'started_ms', ARGV[6]) end\n"
        "local done, total = tonumber(ARGV[4]), tonumber(ARGV[5])\n"
        "local pm = 0\n"
        "if total > 0 then pm = math.floor(done * 1000 / total) end\n"
        "if pm < 0 then pm = 0 end\n"
        "if pm > 999 then pm = 999 end\n"
        "if tonumber(shard) >= 0 and redis.call('SISMEMBER', P..'vdone:'..id, shard) == 0 then\n"
        "  redis.call('HSET', P..'vprog:'..id, shard, pm)\n"
        "end\n"
        "local p = progress(P, id, shards)\n"
        "redis.call('HSET', jk, 'progress', p)\n"
        "return p\n",
    /* shard done: id, shard, entry → 0 (job finished or gone), 1 (counted), 2 (join queued),
     * 3 (counted before), -1 (no such shard) */
    [VLUA_SHARD_DONE] = LUA_PROGRESS LUA_ACK
        "local P, id, shard, entry = ARGV[1], ARGV[2], ARGV[3], ARGV[4]\n"
        "local jk = P..'vjob:'..id\n"
        "local st = redis.call('HGET', jk, 'status')\n"
        "if st and tonumber(shard) >= tonumber(redis.call('HGET', jk, 'shards')) then return -1 end\n"
        "ack(P, entry)\n"
        "if st ~= 'pending' and st ~= 'processing' then return 0 end\n"
        "if redis.call('SADD', P..'vdone:'..id, shard) == 0 then return 3 end\n"
        "redis.call('HSET', P..'vprog:'..id, shard, '1000')\n"
        "local n = redis.call('SCARD', P..'vdone:'..id)\n"
        "local shards = tonumber(redis.call('HGET', jk, 'shards'))\n"
        "redis.call('HSET', jk, 'shards_done', n, 'progress', progress(P, id, shards))\n"
        "if n >= shards and redis.call('HSETNX', jk, 'join', '1') == 1 then\n"
        "  redis.call('XADD', P..'vwork', '*', 'job', id, 'shard', '-1')\n"
        "  return 2\n"
        "end\n"
        "return 1\n",
    /* complete: id, entry, now, retention ms, frames, seconds → 1, or 0 (finished before) */
    [VLUA_COMPLETE] = LUA_FINISH LUA_ACK
        "local P, id = ARGV[1], ARGV[2]\n"
        "ack(P, ARGV[3])\n"
        "if not finish(P, id, 'completed', '', ARGV[4], ARGV[5]) then return 0 end\n"
        "redis.call('HSET', P..'vjob:'..id, 'progress', '100', 'frames', ARGV[6],\n"
        "           'seconds', ARGV[7], 'shards_done', redis.call('HGET', P..'vjob:'..id, 'shards'))\n"
        "return 1\n",
    /* fail: id, entry, now, retention ms, error → 1, or 0 (finished before) */
    [VLUA_FAIL] = LUA_FINISH LUA_ACK
        "local P, id = ARGV[1], ARGV[2]\n"
        "ack(P, ARGV[3])\n"
        "if not finish(P, id, 'failed', ARGV[6], ARGV[4], ARGV[5]) then return 0 end\n"
        "return 1\n",
    /* delete: id, now, retention ms → "notfound" | "canceled" | "removed" */
    [VLUA_DELETE] = LUA_FINISH LUA_REMOVE
        "local P, id = ARGV[1], ARGV[2]\n"
        "if redis.call('EXISTS', P..'vjob:'..id) == 0 then return 'notfound' end\n"
        "if finish(P, id, 'canceled', 'canceled by the client', ARGV[3], ARGV[4]) then\n"
        "  return 'canceled'\n"
        "end\n"
        "remove(P, id)\n"
        "return 'removed'\n",
    /* expire: id, now → 1 when this call removed it */
    [VLUA_EXPIRE] = LUA_REMOVE
        "local P, id = ARGV[1], ARGV[2]\n"
        "local t = redis.call('ZSCORE', P..'vexpire', id)\n"
        "if not t or tonumber(t) > tonumber(ARGV[3]) then return 0 end\n"
        "remove(P, id)\n"
        "return 1\n",
    /* webhook: id, attempts json → 1, or 0 (no such job) */
    [VLUA_WEBHOOK] =
        "local jk = ARGV[1]..'vjob:'..ARGV[2]\n"
        "if redis.call('EXISTS', jk) == 0 then return 0 end\n"
        "redis.call('HSET', jk, 'webhook', ARGV[3])\n"
        "return 1\n",
};

char fc_vstore_redis_lua_sha[VLUA_COUNT][41];

static void *compute_shas(void *unused) {
  for (int i = 0; i < VLUA_COUNT; i++) {
    gchar *h = g_compute_checksum_for_string(G_CHECKSUM_SHA1, fc_vstore_redis_lua[i], -1);
    g_strlcpy(fc_vstore_redis_lua_sha[i], h, sizeof fc_vstore_redis_lua_sha[i]);
    g_free(h);
  }
  return NULL;
}

void fc_vstore_redis_lua_init(void) {
  static GOnce once = G_ONCE_INIT;
  g_once(&once, compute_shas, NULL);
}
