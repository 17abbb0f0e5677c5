/* gpu_importer.c: the other process of test_backend_cuda. Started before its
 * parent touches CUDA, it receives frames as fds over an inherited AF_UNIX
 * socket, maps them side by side in one range and writes a pattern across them.
 *
 * usage: gpu_importer SOCKET_FD. Exits 0 at end of file on the socket. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <moonbright/mbclient.h>

#include "backend.h"
#include "gpu_chan.h"
#include "log.h"
#include "mbkernels.h"

/* Import m->count frames, map them at consecutive addresses of one range,
 * fill the whole range with the pattern of m->seed, read it back. */
static int import_and_fill(mb_backend *b, const struct gpu_msg *m, int *fds, uint64_t *mismatches)
{
    struct mb_mem mems[GPU_CHAN_MAX_FDS];
    int n = 0, mapped = 0, rc = 0;
    size_t total = 0;
    void *va = NULL;
    for (; n < (int)m->count; n++) {
        struct mb_mem init = MB_MEM_INIT;
        mems[n] = init;
        rc = b->ops->import_fd(b, fds[n], (size_t)m->bytes[n], &mems[n]);
        fds[n] = -1;
        if (rc)
            goto out;
        total += (size_t)m->bytes[n];
    }
    rc = b->ops->reserve(b, total, &va);
    if (rc)
        goto out;
    size_t off = 0;
    for (; mapped < n; mapped++) {
        rc = b->ops->map(b, (char *)va + off, &mems[mapped]);
        if (rc)
            goto out;
        off += mems[mapped].bytes;
    }
    rc = b->ops->set_access(b, va, total);
    if (rc == 0)
        rc = mbk_fill_pattern(va, total, m->seed, NULL);
    if (rc == 0)
        rc = b->ops->stream_sync(b, NULL);
    unsigned long long bad = 0;
    if (rc == 0)
        rc = mbk_check_pattern(va, total, 0, m->seed, NULL, &bad, NULL);
    *mismatches = bad;
out:
    off = 0;
    for (int i = 0; i < mapped; i++) {
        b->ops->unmap(b, (char *)va + off, mems[i].bytes);
        off += mems[i].bytes;
    }
    if (va)
        b->ops->free_va(b, va, total);
    for (int i = 0; i < n; i++)
        b->ops->release(b, &mems[i]);
    for (int i = n; i < (int)m->count; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SOCKET_FD\n", argv[0]);
        return 2;
    }
    mb_log_set_ident("gpu_importer");
    int sock = atoi(argv[1]);
    mb_backend *b = NULL;
    int exit_code = 0;
    for (;;) {
        struct gpu_msg m;
        int fds[GPU_CHAN_MAX_FDS];
        int nfds = gpu_chan_recv(sock, &m, fds, 120000);
        if (nfds == -2)
            break;
        if (nfds < 0) {
            fprintf(stderr, "gpu_importer: failed to receive a request\n");
            exit_code = 1;
            break;
        }
        struct gpu_msg reply = { .op = GPU_OP_RESULT };
        if (m.op != GPU_OP_IMPORT || m.count == 0 || (int)m.count != nfds) {
            for (int i = 0; i < nfds; i++)
                close(fds[i]);
            reply.status = MB_EPROTO;
        } else {
            if (!b)
                reply.status = mb_backend_cuda_open(0, &b);
            if (b) {
                uint64_t bad = 0;
                reply.status = import_and_fill(b, &m, fds, &bad);
                reply.mismatches = bad;
            } else {
                for (int i = 0; i < nfds; i++)
                    close(fds[i]);
            }
        }
        if (gpu_chan_send(sock, &reply, NULL, 0) != 0) {
            fprintf(stderr, "gpu_importer: failed to send the result\n");
            exit_code = 1;
            break;
        }
    }
    if (b)
        mb_backend_close(b);
    close(sock);
    return exit_code;
}
