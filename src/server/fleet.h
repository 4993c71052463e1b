/* Live sessions across machines (serve --redis URL): nodes register their capacity in Redis
 * with a heartbeat, a full node's /offer (and WHEP POST) goes to the node with the most free
 * places — proxied, or answered 307 with --fleet-redirect — and every request that names a
 * session another node holds is proxied to that node, so one URL serves the fleet.
 *
 * Two halves, one per thread:
 *  - fleet.c, the registry thread: the only code that talks to Redis (jobs/redis.h, blocking),
 *    so the main loop never waits for it. Every second it refreshes this node's record
 *    (SET facecast:fleet:node:ID JSON PX 5000, SADD facecast:fleet:nodes ID), the keys of the
 *    sessions it holds (facecast:fleet:session:SID = node id, PX 30000, rewritten every 10 s
 *    while the session lives, deleted when it closes), and reads the other nodes' records
 *    into a snapshot the main loop routes by. It also answers the main loop's lookups (which
 *    node holds session SID?) in order, posting each answer back to the main loop.
 *  - fleet_proxy.c, on the main loop: the route wrappers that decide (local, proxy, redirect,
 *    502/503/404) and the asynchronous HTTP proxy (libsoup), SSE streamed through.
 *
 * Redis down: this node's own sessions are served as always (a request for a session held
 * here never consults Redis); offers are answered here (503 when full), requests for sessions
 * held elsewhere get 503; the outage and the recovery are logged once each. */
#ifndef FC_SERVER_FLEET_H
#define FC_SERVER_FLEET_H

#include "server/internal.h"

#include <libsoup/soup.h>

typedef struct fc_fleet fc_fleet;

/* The fleet of srv (srv->p.redis_url set; NULL with *err 0 when it is not): checks the
 * options; starts nothing yet. NULL with FC_EINVAL (bad --node-url, a bad Redis URL) or
 * FC_ENOMEM in *err. */
fc_fleet *fc_fleet_create(fc_server *srv, int *err);
/* Once the port is bound: the node's URL (--node-url, or derived from the listen address) and
 * the registry thread (which registers the node at once). 0 or an FC_E* code. */
int fc_fleet_start(fc_fleet *f);
/* Main loop, before the HTTP server goes: stops the registry thread (which deregisters the
 * node and deletes its sessions' keys), cancels the proxies in flight and answers them.
 * NULL is fine. */
void fc_fleet_destroy(fc_fleet *f);

/* Registers cb at path on srv's HTTP server: as is, or (with a fleet, for the routes that make
 * or name sessions) behind the wrapper that sends a request where its session is. */
void fc_fleet_add_handler(fc_server *srv, const char *path, SoupServerCallback cb);
/* GET /api/fleet: this node, whether Redis answers, the nodes it sees (and their places). */
void fc_fleet_register(fc_server *srv);
/* Any thread: the session table changed (a session opened or closed), so the registry thread
 * should publish now rather than at its next beat. NULL is fine. */
void fc_fleet_kick(fc_fleet *f);
/* Main loop: the fleet's series for /metrics (nothing without a fleet). */
void fc_fleet_metrics(fc_fleet *f, GString *out);

/* ---- shared by fleet.c and fleet_proxy.c only ------------------------------------------- */

#define FC_FLEET_HOP_HEADER "X-Facecast-Fleet-Hop" /* a proxied request: never proxied again */

typedef struct fc_fleet_node {
  char *id, *url;
  int max_sessions, sessions, free_places;
} fc_fleet_node;

/* What the registry thread answers the main loop: the node holding a session. */
typedef struct fc_fleet_lookup {
  fc_fleet *f;
  char *sid;
  SoupServerMessage *msg; /* paused until the answer (a reference) */
  int kind;               /* the route's kind (fleet_proxy.c) */
  int redis_ok;           /* the GET got an answer */
  char *owner;            /* the node id the key names, NULL when there is none */
} fc_fleet_lookup;

struct fc_fleet {
  fc_server *srv;
  char *redis_url, *node_url;
  char node_id[40];
  int redirect;
  GThread *thread;
  GAsyncQueue *ops; /* fc_fleet_lookup* for the thread, or the KICK/STOP markers */
  gint kick_queued;

  GMutex lock;          /* the fields below, shared by the two threads */
  GPtrArray *nodes;     /* fc_fleet_node*: the live nodes (this one too), as last read */
  int redis_up;         /* the last command got an answer */
  uint64_t redis_errors;

  /* main loop only */
  GHashTable *owners;   /* sid → struct owner_hint*: sessions this node saw placed elsewhere */
  SoupSession *http;    /* proxied requests (I/O timeout) */
  SoupSession *stream;  /* proxied event streams (no I/O timeout: they may be quiet long) */
  GList *proxies;       /* in flight */
  int lookups_waiting;  /* lookups posted but not yet answered on the main loop */
  uint64_t proxied_offers, proxied_requests, redirects, proxy_failures, not_routed;
};

/* A node's record as Redis holds it ({"id","url","max_sessions","sessions","free",...}): 0 with
 * the node in *out (fc_fleet_node_free it), or FC_EFORMAT with a detail. Pure; fuzzed
 * (tests/fuzz/fuzz_fleet.c). */
#define FC_FLEET_MAX_RECORD 4096
int fc_fleet_node_parse(const char *s, size_t n, fc_fleet_node **out);
/* fleet.c → fleet_proxy.c: the lookup's answer, on the main loop (frees l). */
void fc_fleet_lookup_done(fc_fleet_lookup *l);
/* Copies the live nodes other than this one with a free place, most free places first
 * (g_ptr_array_unref it); empty while Redis does not answer. */
GPtrArray *fc_fleet_nodes_with_room(fc_fleet *f);
/* The URL of live node id (g_free it), or NULL when it is not registered (any more). */
char *fc_fleet_node_url(fc_fleet *f, const char *id);
/* Queues a lookup of l->sid on the registry thread. */
void fc_fleet_lookup_queue(fc_fleet *f, fc_fleet_lookup *l);
void fc_fleet_node_free(gpointer n);
/* fleet_proxy.c: its half of create/destroy. */
int fc_fleet_proxy_init(fc_fleet *f);
void fc_fleet_proxy_stop(fc_fleet *f);

#endif
