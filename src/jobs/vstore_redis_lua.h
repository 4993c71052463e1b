/* Private to the Redis video job store (vstore_redis.c): its Lua scripts, one per change that
 * touches more than one key (vstore_redis_lua.c says what each takes and answers). */
#ifndef FC_JOBS_VSTORE_REDIS_LUA_H
#define FC_JOBS_VSTORE_REDIS_LUA_H

/* The consumer group every worker reads the work stream through. */
#define FC_VSTORE_REDIS_GROUP "render"

/* The scripts (ARGV[1] of each is the key prefix). */
enum { VLUA_SUBMIT, VLUA_TAKEN, VLUA_TOUCH, VLUA_PROGRESS, VLUA_SHARD_DONE, VLUA_COMPLETE,
       VLUA_FAIL, VLUA_DELETE, VLUA_EXPIRE, VLUA_WEBHOOK, VLUA_COUNT };

/* Each script's text, and its SHA-1 in hex (for EVALSHA), filled once by
 * fc_vstore_redis_lua_init (thread-safe, idempotent). */
extern const char *const fc_vstore_redis_lua[VLUA_COUNT];
extern char fc_vstore_redis_lua_sha[VLUA_COUNT][41];
void fc_vstore_redis_lua_init(void);

#endif
