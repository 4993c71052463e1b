/* A facecast server in the fuzzer's own process (harness.c), for the targets that go through
 * real routes: HTTP bodies of every route, multipart uploads, WebSocket audio. The server runs
 * on this thread's main context, which the harness turns while it waits for answers; a request
 * that gets no answer within 30 s traps (a hang is a bug too). */
#ifndef FC_FUZZ_HARNESS_H
#define FC_FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Starts the server once (127.0.0.1, any port, 8 sessions, the default avatar), its data,
 * temporary and media folders private to this process. */
void fc_fuzz_server_start(void);
/* The id of a live session to aim requests at (a new one now and then). */
const char *fc_fuzz_session(void);
/* One request on the kept-alive connection; the answer's status, or -1 when the server closed
 * the connection without one (allowed: refusals close it). Traps when the server does not
 * answer or its answer to a 4xx/5xx is not {"code":-1,"msg":...}. */
int fc_fuzz_request(const char *method, const char *path, const char *ctype, const uint8_t *body,
                    size_t n);
/* A new TCP connection to the server (blocking fd), and turning the server's loop for ms. */
int fc_fuzz_connect(void);
/* Closes a connection with a reset (the client side keeps no TIME_WAIT). */
void fc_fuzz_close_reset(int fd);
void fc_fuzz_pump(int ms);
/* Replaces every "SID" in body with the current session id and every "MEDIA" with the media
 * folder (a malloc'd copy in *out). */
size_t fc_fuzz_with_session(const uint8_t *body, size_t n, uint8_t **out);
/* The server's --media-dir: a private folder holding a FIFO (fifo.mp4) and a link out of it
 * (out.png), both of which a path check must refuse. */
const char *fc_fuzz_media_dir(void);

#endif
