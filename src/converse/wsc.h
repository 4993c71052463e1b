/* A WebSocket client for one exchange with a remote service, run synchronously in the calling
 * thread (Edge's TTS, a FunASR server): connect, send, then read messages until the service's
 * answer is complete. libsoup's WebSocket API is asynchronous, so a call runs a GMainContext of
 * its own, pushed as the thread's default from connect to close; nothing else may run on that
 * thread in between.
 *
 * Every wait is bounded: the connect, and each gap between two messages, by timeout_s; `cancel`
 * (from any thread) ends a wait at once with FC_ECANCELED. Failures are FC_EREMOTE with a
 * one-line detail that starts with `who` ("edge TTS at wss://…"). */
#ifndef FC_WSC_H
#define FC_WSC_H

#include <libsoup/soup.h>
#include <stddef.h>
#include <stdint.h>

typedef struct fc_wsc fc_wsc;

/* msg: the upgrade request with any headers the service wants (the call takes a reference).
 * protocols: NULL-terminated subprotocols to offer, or NULL. NULL and *err on failure. */
fc_wsc *fc_wsc_connect(SoupMessage *msg, const char *origin, const char *const *protocols,
                       int timeout_s, GCancellable *cancel, const char *who, int *err);
void fc_wsc_send_text(fc_wsc *w, const char *text);
void fc_wsc_send_binary(fc_wsc *w, const void *data, size_t n);
/* Writes what was sent without waiting for anything (a stream of sends: a microphone). */
void fc_wsc_pump(fc_wsc *w);

/* A message: 0 to go on, 1 when the exchange is complete, or a negative error (FC_E*, with a
 * detail set) to end it with. */
typedef int (*fc_wsc_msg_fn)(void *user, int binary, const uint8_t *data, size_t n);

/* Reads messages until on_msg says done (0) or fails (its error), the service closes the
 * connection first, a gap passes the timeout, or the cancel (FC_EREMOTE / FC_ECANCELED). */
int fc_wsc_run(fc_wsc *w, fc_wsc_msg_fn on_msg, void *user);

/* Closes the connection (without waiting for the service) and frees. */
void fc_wsc_close(fc_wsc *w);

#endif
