/* vsnodes.h: device memory for the page-table nodes of a client's vspaces
 * (vsnodes.c), and the stream-ordered end of a destroyed vspace.
 *
 * Glossary
 *   node     4 KiB of device memory: 512 entries of a vspace's table.
 *   clean    a free node whose entries are all INVALID (0) on the device,
 *            written and complete: a new vspace's root is one, so that
 *            mb_vspace_create enqueues and waits for nothing. The
 *            background step keeps VSN_LOW of them while vspaces are being
 *            created (a root taken in the last second).
 *   raw      a free node with unknown entries: fine for a directory or a
 *            leaf (mapping writes a new node whole before any entry points
 *            at it), cleared into a clean node by the background step.
 * A destroyed vspace's nodes come back with its pages (pagepool_retire),
 * once the work of every stream it used completed.
 *   wait     a root that had to be cleared on the request path (no clean
 *            node was free): counted in mb_stats' vspace_refill_waits.
 *
 * Chunks of nodes come from the public allocator (c->node_alloc: mb_malloc)
 * and stay until mb_close. Locks: vsnodes->lock is a leaf; that allocator
 * and the pools' calls are made
 * without it. */
#ifndef MB_CLIENT_VSNODES_H
#define MB_CLIENT_VSNODES_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

struct vsnodes;
struct pagepool;

#define VSN_NODE_BYTES ((size_t)4096)

struct vsnodes *vsnodes_new(mb_client *c);
/* One clean node (a root), cleared now when none is free (a wait). */
int vsnodes_take_clean(struct vsnodes *n, uint64_t *out);
/* At least one chunk of clean nodes free (mb_vspace_prepare): a chunk is
 * made and cleared now when fewer than VSN_LOW are free. */
int vsnodes_prepare(struct vsnodes *n);
/* count nodes whose content does not matter (the caller writes them whole
 * before any entry points at them): raw ones first, then clean ones, then
 * a new chunk. */
int vsnodes_take(struct vsnodes *n, size_t count, uint64_t *out);
/* Nodes whose last use completed (a destroyed vspace's, from its pool's
 * pending batch): cleared by the background step. Never waits. */
void vsnodes_put(struct vsnodes *n, const uint64_t *nodes, size_t count);
/* The background step: raw nodes cleared, clean nodes topped up to the
 * watermark. No lock held. */
void vsnodes_work(struct vsnodes *n);
/* Whether the background step should run soon (clean nodes running low). */
bool vsnodes_busy(struct vsnodes *n);
/* Free the chunks (mb_close, after the pools gave their nodes back and
 * before the tiers go). */
void vsnodes_free(struct vsnodes *n);
uint64_t vsnodes_waits(struct vsnodes *n);

#endif
