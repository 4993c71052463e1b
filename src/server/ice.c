/* ICE servers for both ends of a session (--stun, --turn, $TURN_SECRET).
 *
 * Why here. webrtcbin takes one STUN and one TURN URL (media/live.h); a browser behind a
 * firewall that blocks UDP needs the same TURN server, and the page cannot know it. So the
 * server describes what the operator configured to its clients: GET /api/ice-servers answers
 * an RTCConfiguration ({"iceServers":[...]}, passed to new RTCPeerConnection as it is), and a
 * WHEP answer (201) or OPTIONS /whep carries the same as Link headers (RFC 9725 §4.4), which
 * WHEP players read before they create their peer connection.
 *
 * Credentials. A static TURN user (turn://user:pass@host:port) is handed to every client that
 * may open a session (the route is a control route: with --api-keys, a key holder): anyone
 * with it can relay through the TURN server. With $TURN_SECRET (coturn's use-auth-secret /
 * static-auth-secret) each answer carries time-limited credentials instead, coturn's REST API
 * scheme: username = "EXPIRY:facecast" (EXPIRY in Unix seconds), password =
 * base64(HMAC-SHA1(secret, username)); coturn recomputes the password from its copy of the
 * secret and refuses expired names. The secret never leaves the process, and each session's
 * own webrtcbin gets a fresh pair too (percent-escaped in the URL: the name holds a ':').
 * turns:// is for browsers only: libnice cannot do TURN over TLS (fc_ice_session_turn).
 *
 * Browsers get the TURN server both over UDP and over TCP (coturn listens on both on its port)
 * unless the operator's URL names a transport: TURN over TCP is what reaches a client whose
 * network lets no UDP out. turns:// is TLS, over TCP only. */
#include "facecast/error.h"
#include "server/internal.h"

#include <stdio.h>
#include <string.h>

/* How long time-limited TURN credentials stay valid. A browser fetches them just before it
 * connects; TURN refreshes its allocation with the same name, so this bounds the length of a
 * relayed session too. */
#define TURN_TTL_S (24 * 3600)

typedef struct turn_url {
  char *scheme;   /* "turn" or "turns" */
  char *user, *pass; /* decoded; NULL when the URL has none */
  char *hostport; /* "host:port" (IPv6 in brackets), as the URL had it */
  char *query;    /* "transport=tcp" or NULL */
} turn_url;

static void turn_url_clear(turn_url *t) {
  g_free(t->scheme);
  g_free(t->user);
  g_free(t->pass);
  g_free(t->hostport);
  g_free(t->query);
  memset(t, 0, sizeof *t);
}

static int parse_turn(const char *url, turn_url *t) {
  char *scheme = NULL, *user = NULL, *pass = NULL, *host = NULL, *path = NULL, *query = NULL;
  int port = -1;
  GError *e = NULL;
  memset(t, 0, sizeof *t);
  if (!g_uri_split_with_user(url, G_URI_FLAGS_HAS_PASSWORD, &scheme, &user, &pass, NULL, &host,
                             &port, &path, &query, NULL, &e)) {
    int rc = fc_error_set(FC_EINVAL, "--turn: %s", e->message);
    g_error_free(e);
    return rc;
  }
  int rc = FC_OK;
  if (!scheme || (strcmp(scheme, "turn") && strcmp(scheme, "turns")) || !host || !*host ||
      port <= 0 || (path && *path)) {
    rc = fc_error_set(FC_EINVAL, "--turn: expected turn://[USER:PASS@]HOST:PORT or turns://...");
  } else if (query && strcmp(query, "transport=udp") && strcmp(query, "transport=tcp")) {
    rc = fc_error_set(FC_EINVAL, "--turn: the only query is ?transport=udp|tcp");
  } else {
    t->scheme = g_steal_pointer(&scheme);
    t->user = g_steal_pointer(&user);
    t->pass = g_steal_pointer(&pass);
    t->hostport = strchr(host, ':') ? g_strdup_printf("[%s]:%d", host, port)
                                    : g_strdup_printf("%s:%d", host, port);
    t->query = g_steal_pointer(&query);
  }
  g_free(scheme);
  g_free(user);
  g_free(pass);
  g_free(host);
  g_free(path);
  g_free(query);
  return rc;
}

int fc_ice_check(const fc_server_params *p) {
  const char *secret = p->turn_secret;
  if (p->stun_server) {
    const char *h = g_str_has_prefix(p->stun_server, "stun://") ? p->stun_server + 7 : NULL;
    if (!h || !*h || strpbrk(h, "\"<>\\ @/?"))
      return fc_error_set(FC_EINVAL, "--stun '%s': expected stun://HOST:PORT", p->stun_server);
  }
  if ((p->ice_port_min || p->ice_port_max) &&
      (p->ice_port_min < FC_LIVE_ICE_PORT_LO || p->ice_port_max > 65535 ||
       p->ice_port_min > p->ice_port_max))
    return fc_error_set(FC_EINVAL, "ICE ports %d-%d: expected MIN-MAX, %d <= MIN <= MAX <= 65535",
                        p->ice_port_min, p->ice_port_max, FC_LIVE_ICE_PORT_LO);
  if (secret && !*secret) secret = NULL;
  if (!p->turn_server)
    return secret ? fc_error_set(FC_EINVAL, "$TURN_SECRET is set but --turn is not") : FC_OK;
  turn_url t;
  int rc = parse_turn(p->turn_server, &t);
  if (rc) return rc;
  if (!strcmp(t.scheme, "turns"))
    g_message("--turn turns://: browsers get it; the server's own ICE agent (libnice) cannot "
              "speak TLS to a TURN server and gathers no relay candidate of its own");
  if (secret && (t.user || t.pass))
    rc = fc_error_set(FC_EINVAL, "--turn: with $TURN_SECRET, give turn://HOST:PORT (the "
                                 "credentials are made per client)");
  else if (!secret && (!t.user || !*t.user || !t.pass))
    rc = fc_error_set(FC_EINVAL, "--turn: expected turn://USER:PASS@HOST:PORT (or set "
                                 "$TURN_SECRET for time-limited credentials)");
  turn_url_clear(&t);
  return rc;
}

/* The TURN credentials a client gets now: the operator's, or time-limited ones. */
static void credentials(const fc_server *srv, const turn_url *t, char **user, char **pass) {
  const char *secret = srv->p.turn_secret;
  if (!secret || !*secret) {
    *user = g_strdup(t->user ? t->user : "");
    *pass = g_strdup(t->pass ? t->pass : "");
    return;
  }
  const long long expiry = g_get_real_time() / G_USEC_PER_SEC + TURN_TTL_S;
  *user = g_strdup_printf("%lld:facecast", expiry);
  guint8 digest[20];
  gsize len = sizeof digest;
  GHmac *h = g_hmac_new(G_CHECKSUM_SHA1, (const guchar *)secret, strlen(secret));
  g_hmac_update(h, (const guchar *)*user, (gssize)strlen(*user));
  g_hmac_get_digest(h, digest, &len);
  g_hmac_unref(h);
  *pass = g_base64_encode(digest, len);
}

const char *fc_ice_session_turn(const fc_server *srv, char **owned) {
  *owned = NULL;
  if (!srv->p.turn_server) return NULL;
  turn_url t;
  if (parse_turn(srv->p.turn_server, &t)) return NULL; /* checked at start */
  /* libnice (0.1.21, and still upstream) speaks TLS to a TURN server only in Google's and
   * Microsoft's old dialects: given turns:// it sends plain TURN into the TLS port and waits
   * its 2 s for nothing. Only browsers get it. */
  if (!strcmp(t.scheme, "turns")) {
    turn_url_clear(&t);
    return NULL;
  }
  if (!srv->p.turn_secret || !*srv->p.turn_secret) {
    turn_url_clear(&t);
    return srv->p.turn_server;
  }
  char *user, *pass;
  credentials(srv, &t, &user, &pass);
  char *eu = g_uri_escape_string(user, NULL, FALSE), *ep = g_uri_escape_string(pass, NULL, FALSE);
  char *url = g_strdup_printf("%s://%s:%s@%s%s%s", t.scheme, eu, ep, t.hostport,
                              t.query ? "?" : "", t.query ? t.query : "");
  g_free(eu);
  g_free(ep);
  g_free(user);
  g_free(pass);
  turn_url_clear(&t);
  return *owned = url;
}

/* The servers as (url, username, credential) triples, username NULL for STUN; *n of them. */
typedef struct ice_entry {
  char *url, *user, *pass;
} ice_entry;

static int ice_entries(const fc_server *srv, ice_entry out[3]) {
  int n = 0;
  if (srv->p.stun_server) /* stun://HOST:PORT (checked at start) */
    out[n++] = (ice_entry){.url = g_strdup_printf("stun:%s", srv->p.stun_server + 7)};
  turn_url t;
  if (srv->p.turn_server && !parse_turn(srv->p.turn_server, &t)) {
    char *user, *pass;
    credentials(srv, &t, &user, &pass);
    if (t.query || !strcmp(t.scheme, "turns")) {
      out[n++] = (ice_entry){g_strdup_printf("%s:%s%s%s", t.scheme, t.hostport, t.query ? "?" : "",
                                             t.query ? t.query : ""),
                             g_strdup(user), g_strdup(pass)};
    } else {
      out[n++] = (ice_entry){g_strdup_printf("turn:%s?transport=udp", t.hostport), g_strdup(user),
                             g_strdup(pass)};
      out[n++] = (ice_entry){g_strdup_printf("turn:%s?transport=tcp", t.hostport), g_strdup(user),
                             g_strdup(pass)};
    }
    g_free(user);
    g_free(pass);
    turn_url_clear(&t);
  }
  return n;
}

static void ice_entries_free(ice_entry *e, int n) {
  for (int i = 0; i < n; i++) {
    g_free(e[i].url);
    g_free(e[i].user);
    g_free(e[i].pass);
  }
}

char *fc_ice_servers_json(const fc_server *srv) {
  ice_entry e[3];
  int n = ice_entries(srv, e);
  GString *o = g_string_new("{\"iceServers\":[");
  for (int i = 0; i < n; i++) {
    char *u = fc_http_json_quote(e[i].url);
    g_string_append_printf(o, "%s{\"urls\":[%s]", i ? "," : "", u);
    g_free(u);
    if (e[i].user) {
      char *qu = fc_http_json_quote(e[i].user), *qp = fc_http_json_quote(e[i].pass);
      g_string_append_printf(o, ",\"username\":%s,\"credential\":%s", qu, qp);
      g_free(qu);
      g_free(qp);
    }
    g_string_append_c(o, '}');
  }
  g_string_append(o, "]}");
  ice_entries_free(e, n);
  return g_string_free(o, FALSE);
}

/* A quoted-string of RFC 9110 (the Link header's parameter values). */
static void append_quoted(GString *o, const char *s) {
  g_string_append_c(o, '"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') g_string_append_c(o, '\\');
    g_string_append_c(o, *s);
  }
  g_string_append_c(o, '"');
}

void fc_ice_link_headers(const fc_server *srv, SoupMessageHeaders *h) {
  ice_entry e[3];
  int n = ice_entries(srv, e);
  for (int i = 0; i < n; i++) {
    GString *v = g_string_new(NULL);
    g_string_append_printf(v, "<%s>; rel=\"ice-server\"", e[i].url);
    if (e[i].user) {
      g_string_append(v, "; username=");
      append_quoted(v, e[i].user);
      g_string_append(v, "; credential=");
      append_quoted(v, e[i].pass);
      g_string_append(v, "; credential-type=\"password\"");
    }
    soup_message_headers_append(h, "Link", v->str);
    g_string_free(v, TRUE);
  }
  ice_entries_free(e, n);
}

FC_ROUTE(ice_servers) {
  fc_server *srv = user;
  if (!fc_http_require_method(msg, "GET")) return;
  char *body = fc_ice_servers_json(srv);
  soup_server_message_set_status(msg, 200, NULL);
  /* fresh credentials each time: nobody may keep the answer */
  soup_message_headers_replace(soup_server_message_get_response_headers(msg), "Cache-Control",
                               "no-store");
  soup_server_message_set_response(msg, "application/json", SOUP_MEMORY_TAKE, body, strlen(body));
}
