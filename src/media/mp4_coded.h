/* The MP4 writer (facecast/mp4.h) fed with H.264 that is already encoded: bulk shards are
 * joined by muxing their pictures as they are, with the audio encoded once (AAC, its priming
 * trimmed by the edit list as for any file of the writer). Internal to src/media and its
 * callers in bulk. */
#ifndef FC_MEDIA_MP4_CODED_H
#define FC_MEDIA_MP4_CODED_H

#include "facecast/mp4.h"

/* A writer whose video is H.264 access units in AVC form (4-byte lengths) described by avcc
 * (an avcC record, see fc_h264_avcc). p's encoder fields are unused. Pictures in decode order
 * = presentation order (no B-frames). */
fc_mp4_writer *fc_mp4_writer_create_coded(const char *path, const fc_mp4_params *p,
                                          const uint8_t *avcc, size_t avcc_len, int *err);
/* Frame `index`'s access unit (copied); key: an IDR picture. Audio goes through
 * fc_mp4_writer_push_audio as usual; fc_mp4_writer_finish completes the file. */
int fc_mp4_writer_push_coded(fc_mp4_writer *w, const uint8_t *au, size_t n, int key,
                             int64_t index);

#endif
