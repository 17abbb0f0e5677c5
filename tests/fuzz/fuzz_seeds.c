/* fuzz_seeds.c: writes the fuzz corpus seeds: one file per request kind and
 * session state (first byte), each a valid packed Request.
 *   fuzz_seeds DIR */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "moonbright.pb-c.h"

static int write_seed(const char *dir, const char *name, int state, const Mb__Request *req)
{
    uint8_t buf[4096];
    buf[0] = (uint8_t)state;
    size_t len = mb__request__pack(req, buf + 1);
    char path[512];
    snprintf(path, sizeof(path), "%s/%s-%d", dir, name, state);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len + 1, f) != len + 1) {
        fprintf(stderr, "failed to write %s\n", path);
        if (f)
            fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

/* A ZMTP 3.0 stream from a DEALER: greeting, READY, then the request in
 * one frame (or split in two parts when multipart). */
static int write_stream(const char *dir, const char *name, int state, const Mb__Request *req,
                        bool multipart)
{
    static const uint8_t hs[] = {
        0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 1, 'N', 'U', 'L', 'L', 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0x04, 41, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o', 'c', 'k', 'e', 't', '-', 'T', 'y',
        'p', 'e', 0, 0, 0, 6, 'D', 'E', 'A', 'L', 'E', 'R', 8, 'I', 'd', 'e', 'n', 't', 'i',
        't', 'y', 0, 0, 0, 0,
    };
    uint8_t buf[4096];
    buf[0] = (uint8_t)state;
    memcpy(buf + 1, hs, sizeof(hs));
    size_t pos = 1 + sizeof(hs);
    size_t len = mb__request__get_packed_size(req);
    if (len > 200)
        return 1;
    if (multipart) {
        buf[pos++] = 1;   /* MORE */
        buf[pos++] = 1;
        buf[pos++] = 'x';
    }
    buf[pos++] = 0;
    buf[pos++] = (uint8_t)len;
    mb__request__pack(req, buf + pos);
    pos += len;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, pos, f) != pos) {
        fprintf(stderr, "failed to write %s\n", path);
        if (f)
            fclose(f);
        return 1;
    }
    return fclose(f) != 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    int bad = 0;
    Mb__Request r = MB__REQUEST__INIT;
    uint8_t tok[16] = { 7 };
    Mb__Hello h = MB__HELLO__INIT;
    h.token.data = tok;
    h.token.len = sizeof(tok);
    h.tenant = "fuzz";
    h.version = 1;
    Mb__Grant g = MB__GRANT__INIT;
    g.bytes = 3 * 4096;
    uint32_t ids[] = { 48, 49, 1 };
    Mb__Return ret = MB__RETURN__INIT;
    ret.ids = ids;
    ret.n_ids = 3;
    Mb__Cache c = MB__CACHE__INIT;
    c.bytes = 8192;
    Mb__Status st = MB__STATUS__INIT;
    Mb__Tenants tn = MB__TENANTS__INIT;
    Mb__Frames fr = MB__FRAMES__INIT;
    fr.start = 2;
    fr.limit = 5;
    Mb__Quota q = MB__QUOTA__INIT;
    q.tenant = "capped";
    q.max = 1 << 20;
    Mb__Reclaim rc = MB__RECLAIM__INIT;
    rc.tenant = "kept";
    Mb__Drain dr = MB__DRAIN__INIT;
    Mb__Kill k = MB__KILL__INIT;
    k.session = 1;
    Mb__Metrics m = MB__METRICS__INIT;
    Mb__Share sh = MB__SHARE__INIT;
    sh.ids = ids;
    sh.n_ids = 2;
    Mb__Import im = MB__IMPORT__INIT;
    uint8_t share_tok[32] = { 7, 7, 7 };
    im.token.data = share_tok;
    im.token.len = sizeof(share_tok);
    Mb__Reattach ra = MB__REATTACH__INIT;
    Mb__Frame raf = MB__FRAME__INIT, *rafp = &raf;
    raf.id = 3;
    raf.bytes = 4096;
    ra.frames = &rafp;
    ra.n_frames = 1;
    for (int state = 0; state < 4; state++) {
        r.id = 1 + (uint64_t)state;
        r.body_case = MB__REQUEST__BODY_HELLO; r.hello = &h; bad |= write_seed(dir, "hello", state, &r);
        r.body_case = MB__REQUEST__BODY_GRANT; r.grant = &g; bad |= write_seed(dir, "grant", state, &r);
        r.body_case = MB__REQUEST__BODY_RET; r.ret = &ret; bad |= write_seed(dir, "ret", state, &r);
        r.body_case = MB__REQUEST__BODY_CACHE; r.cache = &c; bad |= write_seed(dir, "cache", state, &r);
        r.body_case = MB__REQUEST__BODY_STATUS; r.status = &st; bad |= write_seed(dir, "status", state, &r);
        r.body_case = MB__REQUEST__BODY_TENANTS; r.tenants = &tn; bad |= write_seed(dir, "tenants", state, &r);
        r.body_case = MB__REQUEST__BODY_FRAMES; r.frames = &fr; bad |= write_seed(dir, "frames", state, &r);
        r.body_case = MB__REQUEST__BODY_QUOTA; r.quota = &q; bad |= write_seed(dir, "quota", state, &r);
        r.body_case = MB__REQUEST__BODY_RECLAIM; r.reclaim = &rc; bad |= write_seed(dir, "reclaim", state, &r);
        r.body_case = MB__REQUEST__BODY_DRAIN; r.drain = &dr; bad |= write_seed(dir, "drain", state, &r);
        r.body_case = MB__REQUEST__BODY_KILL; r.kill = &k; bad |= write_seed(dir, "kill", state, &r);
        r.body_case = MB__REQUEST__BODY_METRICS; r.metrics = &m; bad |= write_seed(dir, "metrics", state, &r);
        r.body_case = MB__REQUEST__BODY_SHARE; r.share = &sh; bad |= write_seed(dir, "share", state, &r);
        r.body_case = MB__REQUEST__BODY_IMPORT; r.import = &im; bad |= write_seed(dir, "import", state, &r);
        r.body_case = MB__REQUEST__BODY_REATTACH; r.reattach = &ra; bad |= write_seed(dir, "reattach", state, &r);
    }
    /* Hello as a tenant bound to other uids (the waiting session is uid 1001). */
    h.tenant = "capped";
    r.body_case = MB__REQUEST__BODY_HELLO;
    r.hello = &h;
    bad |= write_seed(dir, "hello-bound", 0, &r);
    h.tenant = "fuzz";
    /* Control-socket streams (first byte bit 7): greeting, READY, requests. */
    r.body_case = MB__REQUEST__BODY_STATUS;
    r.status = &st;
    bad |= write_stream(dir, "stream-status", 0x80, &r, false);
    r.body_case = MB__REQUEST__BODY_GRANT;
    r.grant = &g;
    bad |= write_stream(dir, "stream-grant", 0x81, &r, false);
    bad |= write_stream(dir, "stream-multipart", 0x81, &r, true);
    r.body_case = MB__REQUEST__BODY_HELLO;
    r.hello = &h;
    bad |= write_stream(dir, "stream-hello", 0x80, &r, false);
    /* Share naming one frame twice; Reattach of another uid's frame, of an
     * import the journal names, and of a frame of the wrong size. */
    uint32_t dup[] = { 48, 49, 48 };
    sh.ids = dup;
    sh.n_ids = 3;
    r.body_case = MB__REQUEST__BODY_SHARE;
    r.share = &sh;
    bad |= write_seed(dir, "share-dup", 1, &r);
    Mb__Frame rf[3] = { MB__FRAME__INIT, MB__FRAME__INIT, MB__FRAME__INIT };
    Mb__Frame *rfp[3] = { &rf[0], &rf[1], &rf[2] };
    rf[0].id = 4;                /* uid 1001's */
    rf[0].bytes = 4096;
    rf[1].id = 6;                /* uid 1001's, imported by uid 1000 */
    rf[1].bytes = 4096;
    rf[1].imported = 1;
    rf[2].id = 7;
    rf[2].bytes = 8192;          /* not the size it had */
    ra.frames = rfp;
    ra.n_frames = 3;
    r.body_case = MB__REQUEST__BODY_REATTACH;
    r.reattach = &ra;
    bad |= write_seed(dir, "reattach-proof", 1, &r);
    /* A grant that needs reclaim (more than the free frames). */
    g.bytes = 60 * 4096;
    r.body_case = MB__REQUEST__BODY_GRANT;
    r.grant = &g;
    bad |= write_seed(dir, "grant-big", 1, &r);
    return bad;
}
