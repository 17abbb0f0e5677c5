/* protocol.h: the limits and version both ends of the control protocol
 * agree on. The daemon refuses what exceeds them and the client batches
 * to stay within them, so each lives here once. */
#ifndef MB_PROTOCOL_H
#define MB_PROTOCOL_H

/* Hello.version: a client of another version is refused with both named. */
#define MB_PROTOCOL_VERSION 2u

/* Most frames one grant hands out (and one Grant reply lists). */
#define MB_GRANT_MAX_FRAMES 256u
/* Most bytes one grant may ask for: that many frames of the largest order
 * it allows (frame_bytes << max_order each). */
#define MB_GRANT_MAX_BYTES(frame_bytes, max_order) \
    ((unsigned long long)MB_GRANT_MAX_FRAMES * ((unsigned long long)(frame_bytes) << (max_order)))
/* Most ids one Return may name (the daemon refuses more); a client sends
 * more in several. */
#define MB_RETURN_MAX_IDS 4096u
/* Bytes of a share token (mb_share_token in moonbright/mbclient.h). */
#define MB_SHARE_TOKEN_BYTES 32u
/* Most frames one share token covers. */
#define MB_SHARE_MAX_FRAMES 65536u
/* Most frames one Frames reply lists (mbctl frames pages through them). */
#define MB_FRAMES_PAGE_MAX 1024u
/* Fields of ClientCounters: a session's counters travel and are kept as
 * an array in field order. */
#define MB_CLIENT_COUNTERS 10u

#endif
