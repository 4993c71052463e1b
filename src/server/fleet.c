/* The fleet's registry thread (fleet.h says what the fleet is): this node's record and its
 * sessions' keys kept fresh in Redis, the other nodes' records read back, and the main loop's
 * "which node holds this session?" answered — all on one thread of its own with one blocking
 * client (jobs/redis.h), so that Redis being slow or gone never stalls the main loop.
 *
 * Why keys with TTLs rather than a list the nodes clean up: a node killed with -9 cleans up
 * nothing. Its record (PX 5000, refreshed every second) expires by itself and the others stop
 * routing to it within the TTL; its sessions' keys (PX 30000) outlive it a while, so that a
 * request for one of its sessions is told that the node holding it is gone (502) rather than
 * that the session never existed (404). The set of node ids is only an index: ids whose
 * record expired are removed from it by whichever node reads them first. */
#include "server/fleet.h"

#include "core/jsonin.h"
#include "core/tsan.h"
#include "facecast/error.h"
#include "jobs/redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define KEY_PREFIX "facecast:fleet:"
#define NODE_TTL_MS 5000     /* a node not heard of for this long is gone */
#define BEAT_MS 1000         /* how often a node says it lives */
#define SESSION_TTL_MS 30000 /* a session key outlives its node this long (502, not 404) */
#define SESSION_REFRESH_US (10 * G_USEC_PER_SEC)
#define MAX_NODES 1024 /* records read per beat: a registry this large is someone else's */

/* Markers on the thread's queue besides lookups. */
static char op_kick, op_stop;

void fc_fleet_node_free(gpointer p) {
  fc_fleet_node *n = p;
  if (!n) return;
  g_free(n->id);
  g_free(n->url);
  g_free(n);
}

void fc_fleet_kick(fc_fleet *f) {
  if (f && f->thread && g_atomic_int_compare_and_exchange(&f->kick_queued, 0, 1))
    g_async_queue_push(f->ops, &op_kick);
}

void fc_fleet_lookup_queue(fc_fleet *f, fc_fleet_lookup *l) {
  FC_TSAN_RELEASE(l); /* GAsyncQueue's hand-off is invisible to ThreadSanitizer */
  g_async_queue_push(f->ops, l);
}

/* ---- the registry thread ----------------------------------------------------------------- */

typedef struct reg {
  fc_fleet *f;
  fc_redis *r;
  GHashTable *published; /* sid → gint64* (when its key was last written) */
  int up;                /* the last command was answered (logged on change only) */
  char *node_key;
} reg;

/* One command; notes whether Redis answered (a refusal is an answer). */
static int cmd(reg *g, fc_resp **rep, int argc, const char *const *argv) {
  int err = fc_redis_command(g->r, argc, argv, NULL, rep);
  int up = err == FC_OK || err == FC_EREMOTE;
  if (up != g->up) {
    if (up) {
      g_message("fleet: Redis answers again; routing to other nodes resumes");
      /* it may have restarted empty: every session's key is written again at once */
      g_hash_table_remove_all(g->published);
    } else {
      g_warning("fleet: Redis does not answer (%s); this node serves its own sessions, routing "
                "to other nodes pauses until it is back",
                fc_error_detail(err));
    }
    g->up = up;
    g_mutex_lock(&g->f->lock);
    g->f->redis_up = up;
    if (!up) g_ptr_array_set_size(g->f->nodes, 0); /* no routing on stale knowledge */
    g_mutex_unlock(&g->f->lock);
  }
  if (err) {
    g_mutex_lock(&g->f->lock);
    g->f->redis_errors++;
    g_mutex_unlock(&g->f->lock);
  }
  return err;
}

static int cmd_simple(reg *g, int argc, const char *const *argv) {
  fc_resp *rep = NULL;
  int err = cmd(g, &rep, argc, argv);
  fc_resp_free(rep);
  return err;
}

/* A count member within 0..10,000,000, else -1. */
static gint64 count_member(JsonObject *o, const char *name) {
  JsonNode *m = json_object_get_member(o, name);
  if (!m || !JSON_NODE_HOLDS_VALUE(m) || json_node_get_value_type(m) != G_TYPE_INT64) return -1;
  gint64 v = json_node_get_int(m);
  return v >= 0 && v <= 10000000 ? v : -1;
}

int fc_fleet_node_parse(const char *s, size_t n, fc_fleet_node **out) {
  *out = NULL;
  if (n > FC_FLEET_MAX_RECORD)
    return fc_error_set(FC_EFORMAT, "fleet: a node record of %zu bytes (at most %d)", n,
                        FC_FLEET_MAX_RECORD);
  JsonObject *o = NULL;
  char why[160];
  JsonParser *p = fc_json_parse_object(s, n, 4, &o, why, sizeof why);
  if (!p) return fc_error_set(FC_EFORMAT, "fleet: a node record %s", why);
  const char *id = fc_json_str_member(o, "id"), *url = fc_json_str_member(o, "url");
  gint64 max = count_member(o, "max_sessions"), open = count_member(o, "sessions"),
         room = count_member(o, "free");
  int err = FC_OK;
  if (!id || !*id || strlen(id) >= sizeof(((fc_fleet *)0)->node_id) ||
      strspn(id, "0123456789abcdef") != strlen(id))
    err = fc_error_set(FC_EFORMAT, "fleet: a node record without a hex 'id'");
  else if (!url || strlen(url) > 512 ||
           !(g_str_has_prefix(url, "http://") || g_str_has_prefix(url, "https://")) ||
           strpbrk(url, " \r\n\t"))
    err = fc_error_set(FC_EFORMAT, "fleet: node %s's record has no http(s) 'url'", id);
  else if (max < 0 || open < 0 || room < 0 || room > max)
    err = fc_error_set(FC_EFORMAT, "fleet: node %s's record has bad place counts", id);
  if (!err) {
    fc_fleet_node *node = g_new0(fc_fleet_node, 1);
    node->id = g_strdup(id);
    node->url = g_strdup(url);
    node->max_sessions = (int)max;
    node->sessions = (int)open;
    node->free_places = (int)room;
    *out = node;
  }
  g_object_unref(p);
  return err;
}

/* This node's places and the ids of its sessions. Push sessions' ids ("0", "1"..) are the same
 * on every node: they are never published, and always answered where they are asked. They are
 * told by their short ids (their `push` flag is set after they enter the table). */
static GPtrArray *local_sessions(fc_server *srv, int *open) {
  GPtrArray *ids = g_ptr_array_new_with_free_func(g_free);
  g_mutex_lock(&srv->lock);
  *open = (int)g_hash_table_size(srv->sessions);
  GHashTableIter it;
  gpointer k;
  g_hash_table_iter_init(&it, srv->sessions);
  while (g_hash_table_iter_next(&it, &k, NULL))
    if (strlen(k) >= 16) g_ptr_array_add(ids, g_strdup(k)); /* a random UUID */
  g_mutex_unlock(&srv->lock);
  return ids;
}

static void beat(reg *g) {
  fc_fleet *f = g->f;
  int open;
  GPtrArray *ids = local_sessions(f->srv, &open);
  int max = f->srv->p.max_sessions, room = max - open > 0 ? max - open : 0;
  char *url_q = fc_http_json_quote(f->node_url);
  char *rec =
      g_strdup_printf("{\"id\":\"%s\",\"url\":%s,\"max_sessions\":%d,\"sessions\":%d,"
                      "\"free\":%d,\"ts\":%lld}",
                      f->node_id, url_q, max, open, room, (long long)(g_get_real_time() / 1000));
  g_free(url_q);
  char ttl[16];
  snprintf(ttl, sizeof ttl, "%d", NODE_TTL_MS);
  const char *set[] = {"SET", g->node_key, rec, "PX", ttl};
  const char *sadd[] = {"SADD", KEY_PREFIX "nodes", f->node_id};
  if (cmd_simple(g, 5, set) || cmd_simple(g, 3, sadd)) goto out;

  /* the sessions' keys: new ones now, the others every SESSION_REFRESH_US, gone ones deleted */
  gint64 now = g_get_monotonic_time();
  snprintf(ttl, sizeof ttl, "%d", SESSION_TTL_MS);
  GHashTable *live = g_hash_table_new(g_str_hash, g_str_equal);
  for (guint i = 0; i < ids->len; i++) g_hash_table_add(live, ids->pdata[i]);
  for (guint i = 0; i < ids->len && g->up; i++) {
    const char *sid = ids->pdata[i];
    gint64 *when = g_hash_table_lookup(g->published, sid);
    if (when && now - *when < SESSION_REFRESH_US) continue;
    char *key = g_strconcat(KEY_PREFIX "session:", sid, NULL);
    const char *sset[] = {"SET", key, f->node_id, "PX", ttl};
    int err = cmd_simple(g, 5, sset);
    g_free(key);
    if (err) break;
    if (!when) {
      when = g_new(gint64, 1);
      g_hash_table_insert(g->published, g_strdup(sid), when);
    }
    *when = now;
  }
  GHashTableIter it;
  gpointer k;
  g_hash_table_iter_init(&it, g->published);
  while (g->up && g_hash_table_iter_next(&it, &k, NULL)) {
    if (g_hash_table_contains(live, k)) continue;
    char *key = g_strconcat(KEY_PREFIX "session:", (const char *)k, NULL);
    const char *del[] = {"DEL", key};
    int err = cmd_simple(g, 2, del);
    g_free(key);
    if (err) break;
    g_hash_table_iter_remove(&it);
  }
  g_hash_table_destroy(live);

  /* the fleet as it stands: every registered node's record, in one MGET */
  fc_resp *members = NULL, *recs = NULL;
  const char *smembers[] = {"SMEMBERS", KEY_PREFIX "nodes"};
  if (cmd(g, &members, 2, smembers)) goto out;
  GPtrArray *nodes = g_ptr_array_new_with_free_func(fc_fleet_node_free);
  GPtrArray *ids_of = g_ptr_array_new(); /* members' ids, borrowed from the reply */
  GPtrArray *argv = g_ptr_array_new_with_free_func(g_free);
  g_ptr_array_add(argv, g_strdup("MGET"));
  if (members->type == FC_RESP_ARRAY || members->type == FC_RESP_SET)
    for (size_t i = 0; i < members->n && ids_of->len < MAX_NODES; i++) {
      const fc_resp *m = &members->elem[i];
      if ((m->type != FC_RESP_BULK && m->type != FC_RESP_STRING) || memchr(m->str, 0, m->len))
        continue;
      g_ptr_array_add(ids_of, (gpointer)m->str);
      g_ptr_array_add(argv, g_strconcat(KEY_PREFIX "node:", m->str, NULL));
    }
  int failed = 0;
  if (ids_of->len) {
    failed = cmd(g, &recs, (int)argv->len, (const char *const *)argv->pdata) != FC_OK;
    if (!failed && (recs->type != FC_RESP_ARRAY || recs->n != ids_of->len)) failed = 1;
    /* ids whose record expired (a node that died without a word) leave the index, in one SREM */
    GPtrArray *srem = g_ptr_array_new();
    g_ptr_array_add(srem, (gpointer) "SREM");
    g_ptr_array_add(srem, (gpointer)(KEY_PREFIX "nodes"));
    for (guint i = 0; !failed && i < ids_of->len; i++) {
      const fc_resp *v = &recs->elem[i];
      fc_fleet_node *n = NULL;
      if (v->type == FC_RESP_NIL)
        g_ptr_array_add(srem, ids_of->pdata[i]);
      else if (v->type == FC_RESP_BULK && !fc_fleet_node_parse(v->str, v->len, &n))
        g_ptr_array_add(nodes, n);
      /* else not a record of ours: not a node to route to */
    }
    if (!failed && srem->len > 2)
      failed = cmd_simple(g, (int)srem->len, (const char *const *)srem->pdata) != FC_OK;
    g_ptr_array_free(srem, TRUE);
  }
  fc_resp_free(recs);
  g_ptr_array_free(ids_of, TRUE);
  g_ptr_array_unref(argv);
  fc_resp_free(members);
  if (!failed) {
    g_mutex_lock(&f->lock);
    GPtrArray *old = f->nodes;
    f->nodes = nodes;
    g_mutex_unlock(&f->lock);
    g_ptr_array_unref(old);
  } else {
    g_ptr_array_unref(nodes);
  }
out:
  g_free(rec);
  g_ptr_array_unref(ids);
}

static gboolean lookup_done_cb(gpointer data) {
  fc_fleet_lookup_done(data);
  return G_SOURCE_REMOVE;
}

static void lookup(reg *g, fc_fleet_lookup *l) {
  char *key = g_strconcat(KEY_PREFIX "session:", l->sid, NULL);
  const char *get[] = {"GET", key};
  fc_resp *v = NULL;
  int err = cmd(g, &v, 2, get);
  l->redis_ok = err == FC_OK;
  if (!err && v->type == FC_RESP_BULK && v->len && v->len < 64) l->owner = g_strdup(v->str);
  fc_resp_free(v);
  g_free(key);
  GSource *src = g_idle_source_new();
  g_source_set_callback(src, lookup_done_cb, l, NULL);
  g_source_attach(src, g->f->srv->ctx);
  g_source_unref(src);
}

/* On the way out: this node's record, its index entry and its sessions' keys go, so that the
 * others stop routing here at once (a node killed -9 waits for its TTLs instead). */
static void deregister(reg *g) {
  if (!g->up) return;
  const char *del[] = {"DEL", g->node_key};
  const char *srem[] = {"SREM", KEY_PREFIX "nodes", g->f->node_id};
  if (cmd_simple(g, 2, del) || cmd_simple(g, 3, srem)) return;
  GHashTableIter it;
  gpointer k;
  g_hash_table_iter_init(&it, g->published);
  while (g_hash_table_iter_next(&it, &k, NULL)) {
    char *key = g_strconcat(KEY_PREFIX "session:", (const char *)k, NULL);
    const char *sdel[] = {"DEL", key};
    int err = cmd_simple(g, 2, sdel);
    g_free(key);
    if (err) return;
  }
  g_message("fleet: node %s deregistered", g->f->node_id);
}

static gpointer registry_main(gpointer data) {
  fc_fleet *f = data;
  int err;
  /* Short timeouts: a lookup waits behind whatever the thread is doing, and a node whose
   * Redis hangs should find out within a beat or two. */
  fc_redis_params rp = {.url = f->redis_url, .connect_timeout_ms = 1000, .io_timeout_ms = 1500};
  reg g = {.f = f, .up = 1};
  g.r = fc_redis_create(&rp, &err); /* the URL was checked by fc_fleet_create */
  g.published = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
  g.node_key = g_strconcat(KEY_PREFIX "node:", f->node_id, NULL);
  gint64 next = 0;
  for (;;) {
    gint64 now = g_get_monotonic_time();
    gpointer op = now >= next ? NULL : g_async_queue_timeout_pop(f->ops, (guint64)(next - now));
    if (op == &op_stop) break;
    if (op && op != &op_kick) {
      FC_TSAN_ACQUIRE(op);
      lookup(&g, op);
      continue;
    }
    if (op == &op_kick) g_atomic_int_set(&f->kick_queued, 0);
    if (g.r) beat(&g);
    next = g_get_monotonic_time() + BEAT_MS * 1000;
  }
  /* lookups queued behind the stop are answered as "Redis unknown" */
  for (gpointer op; (op = g_async_queue_try_pop(f->ops));)
    if (op != &op_kick && op != &op_stop) {
      FC_TSAN_ACQUIRE(op);
      GSource *src = g_idle_source_new();
      g_source_set_callback(src, lookup_done_cb, op, NULL);
      g_source_attach(src, f->srv->ctx);
      g_source_unref(src);
    }
  if (g.r) deregister(&g);
  fc_redis_destroy(g.r);
  g_hash_table_destroy(g.published);
  g_free(g.node_key);
  return NULL;
}

/* ---- lifetime ---------------------------------------------------------------------------- */

static int check_node_url(const char *url) {
  GUri *u = g_uri_parse(url, G_URI_FLAGS_NONE, NULL);
  int ok = u &&
           (!g_strcmp0(g_uri_get_scheme(u), "http") || !g_strcmp0(g_uri_get_scheme(u), "https")) &&
           g_uri_get_host(u) && *g_uri_get_host(u) &&
           (!*g_uri_get_path(u) || !strcmp(g_uri_get_path(u), "/")) && !g_uri_get_query(u) &&
           !g_uri_get_userinfo(u);
  if (u) g_uri_unref(u);
  return ok ? FC_OK
            : fc_error_set(FC_EINVAL,
                           "--node-url '%s': expected http(s)://HOST:PORT, the address "
                           "other nodes and clients reach this node at",
                           url);
}

fc_fleet *fc_fleet_create(fc_server *srv, int *err) {
  const fc_server_params *p = &srv->p;
  *err = FC_OK;
  if (p->worker) return NULL; /* `facecast worker` renders bulk work only: no live sessions */
  if (!p->redis_url || !*p->redis_url) {
    if (p->node_url || p->fleet_redirect)
      *err = fc_error_set(FC_EINVAL, "--node-url and --fleet-redirect need --redis URL");
    return NULL;
  }
  if (p->node_url && (*err = check_node_url(p->node_url))) return NULL;
  /* the URL's check, before anything starts */
  fc_redis_params rp = {.url = p->redis_url};
  fc_redis *r = fc_redis_create(&rp, err);
  if (!r) return NULL;
  fc_redis_destroy(r);
  fc_fleet *f = g_new0(fc_fleet, 1);
  f->srv = srv;
  f->redis_url = g_strdup(p->redis_url);
  f->redirect = p->fleet_redirect;
  f->ops = g_async_queue_new();
  g_mutex_init(&f->lock);
  f->nodes = g_ptr_array_new_with_free_func(fc_fleet_node_free);
  f->redis_up = 1;
  uint8_t rnd[8];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    *err = fc_error_set(FC_EIO, "no random bytes for the node id");
    fc_fleet_destroy(f);
    return NULL;
  }
  snprintf(f->node_id, sizeof f->node_id, "%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1],
           rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
  if ((*err = fc_fleet_proxy_init(f))) {
    fc_fleet_destroy(f);
    return NULL;
  }
  return f;
}

int fc_fleet_start(fc_fleet *f) {
  if (!f) return FC_OK;
  fc_server *srv = f->srv;
  size_t n;
  if (srv->p.node_url) {
    f->node_url = g_strdup(srv->p.node_url);
  } else { /* the listen address, or this machine's name where it listens on every address */
    const char *h = srv->p.host;
    if (!h || !*h || !strcmp(h, "0.0.0.0") || !strcmp(h, "::")) h = g_get_host_name();
    f->node_url = g_strdup_printf(strchr(h, ':') ? "%s://[%s]:%d" : "%s://%s:%d",
                                  srv->p.tls_cert ? "https" : "http", h, srv->port);
  }
  if ((n = strlen(f->node_url)) && f->node_url[n - 1] == '/') f->node_url[n - 1] = 0;
  f->thread = g_thread_new("fleet", registry_main, f);
  g_message("fleet: node %s at %s, registering in Redis", f->node_id, f->node_url);
  return FC_OK;
}

void fc_fleet_destroy(fc_fleet *f) {
  if (!f) return;
  if (f->thread) {
    g_async_queue_push(f->ops, &op_stop);
    g_thread_join(f->thread);
    f->thread = NULL;
  }
  fc_fleet_proxy_stop(f); /* after the thread: its last answers are on the main loop now */
  g_async_queue_unref(f->ops);
  g_ptr_array_unref(f->nodes);
  g_mutex_clear(&f->lock);
  g_free(f->redis_url);
  g_free(f->node_url);
  g_free(f);
}

/* ---- the snapshot, for the main loop ------------------------------------------------------ */

static gint by_room(gconstpointer a, gconstpointer b) {
  const fc_fleet_node *x = *(fc_fleet_node *const *)a, *y = *(fc_fleet_node *const *)b;
  return y->free_places - x->free_places;
}

GPtrArray *fc_fleet_nodes_with_room(fc_fleet *f) {
  GPtrArray *out = g_ptr_array_new_with_free_func(fc_fleet_node_free);
  g_mutex_lock(&f->lock);
  for (guint i = 0; f->redis_up && i < f->nodes->len; i++) {
    const fc_fleet_node *n = f->nodes->pdata[i];
    if (strcmp(n->id, f->node_id) == 0 || n->free_places <= 0) continue;
    fc_fleet_node *c = g_new0(fc_fleet_node, 1);
    *c = *n;
    c->id = g_strdup(n->id);
    c->url = g_strdup(n->url);
    g_ptr_array_add(out, c);
  }
  g_mutex_unlock(&f->lock);
  g_ptr_array_sort(out, by_room);
  return out;
}

char *fc_fleet_node_url(fc_fleet *f, const char *id) {
  char *url = NULL;
  g_mutex_lock(&f->lock);
  for (guint i = 0; i < f->nodes->len && !url; i++) {
    const fc_fleet_node *n = f->nodes->pdata[i];
    if (strcmp(n->id, id) == 0) url = g_strdup(n->url);
  }
  g_mutex_unlock(&f->lock);
  return url;
}
