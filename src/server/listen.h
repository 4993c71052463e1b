/* Ears: microphone audio in, transcripts out, for a session's voice chat (/ws/audio?mode=chat
 * or echo) and for LiveTalking's ASR page (/api/asr, funasr.c).
 *
 * An ear runs the VAD (converse/vad.h) on the main loop as audio arrives and keeps the last
 * 300 ms before speech (the VAD declares speech onset_ms in, and the word's start must not be
 * lost). Each speech segment goes, as it comes, to the server's ASR (converse/asr.h) through
 * a queue that one job at a time empties on the listening workers (pocketsphinx decodes there;
 * a remote service is asked at the segment's end). Callbacks run on the main loop, in order:
 * speech (a segment began: barge-in happens there), end, final (the transcript, or an error).
 * After fc_ear_close nothing more is called, and the owner's reference (`user`, released with
 * `free_user`) goes once the last job has let go. */
#ifndef FC_SERVER_LISTEN_H
#define FC_SERVER_LISTEN_H

#include "server/internal.h"

typedef struct fc_ear fc_ear;

typedef struct fc_ear_cbs {
  void (*speech)(void *user, uint32_t seg);
  void (*end)(void *user, uint32_t seg, double speech_s);
  /* text: the transcript ("" when nothing was understood) or NULL with err/detail; t_end: when
   * the segment ended (µs, monotonic), t_final: when the transcript came. */
  void (*final)(void *user, uint32_t seg, const char *text, int err, const char *detail,
                gint64 t_end, gint64 t_final);
} fc_ear_cbs;

fc_ear *fc_ear_new(fc_server *srv, const fc_ear_cbs *cbs, void *user, GDestroyNotify free_user);
/* 16 kHz mono PCM (main loop). */
void fc_ear_audio(fc_ear *e, const int16_t *pcm, size_t n);
/* Ends the segment under way now (the client says it stopped talking); with none under way and
 * `always`, a final with "" follows all the same. */
void fc_ear_flush(fc_ear *e, int always);
void fc_ear_close(fc_ear *e);
/* The number of the segment under way, or of the last one (a flush's answer carries it). */
uint32_t fc_ear_segment(const fc_ear *e);

/* The server's ASR, made on first use (a worker: pocketsphinx loads its model then); NULL with
 * *err when it cannot be made or --asr none. Thread-safe. */
struct fc_asr *fc_server_asr(fc_server *srv, int *err);
int fc_server_asr_start(fc_server *srv, int *err);
/* 0 with FC_EUNSUPPORTED when --asr none. */
int fc_server_asr_enabled(fc_server *srv, int *err);
/* WS /api/asr (funasr.c). */
void fc_route_asr(SoupServer *server, SoupServerMessage *msg, const char *path,
                  SoupWebsocketConnection *c, gpointer user);
void fc_server_asr_stop(fc_server *srv);

/* A session's voice chat (main loop): mode LISTEN_CHAT (the transcript is a chat turn) or
 * LISTEN_ECHO (the avatar says it). */
enum { FC_LISTEN_CHAT = 1, FC_LISTEN_ECHO = 2 };
void fc_session_listen_audio(fc_session *s, int mode, const int16_t *pcm, size_t n);
/* The microphone went away: a segment under way ends (and is answered). */
void fc_session_listen_flush(fc_session *s);
/* At close: the ear stops (a transcript still coming is dropped). */
void fc_session_listen_free(fc_session *s);

#endif
