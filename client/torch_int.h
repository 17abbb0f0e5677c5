/* torch_int.h: what the framework hook's files share (torch.c: a client
 * per device and the entry points; torch_graph.c: CUDA graphs;
 * torch_streams.c: tensor.record_stream). The functions here take no lock
 * of the caller's. */
#ifndef MB_CLIENT_TORCH_INT_H
#define MB_CLIENT_TORCH_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "client.h"

/* torch.c: the client of this process's device `device`, opened on first
 * use (NULL when no daemon serves it); torch_client_open: only if open. */
mb_client *torch_client(int device);
mb_client *torch_client_open(int device);

/* torch_graph.c. Is work on stream being captured into a graph (only
 * asked of the driver while a pool is open on c's device)? */
bool graph_capturing(mb_client *c, void *stream);
/* An allocation on a capturing stream: memory free of every stream's
 * work, kept as the graph's. NULL when none. */
void *graph_alloc(mb_client *c, int device, size_t size);
/* The free of p: true when the graph keeps it (p is a graph's, or freed
 * on a capturing stream, cap). */
bool graph_free(void *p, int device, bool cap);

/* torch_streams.c. Give back the deferred frees that are done (a few,
 * or all); true while some wait (cheap). */
void streams_poll(bool all);
bool streams_deferred(void);
/* The free of p on stream, deferred when streams were recorded for it
 * (host backend: its streams are ordered, nothing to defer): true when
 * deferred (the caller frees nothing then). Never waits. */
bool streams_free(mb_client *c, void *p, void *stream);

#endif
