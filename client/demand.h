/* demand.h: demand over the last second, as the page pools (pagepool.c)
 * and the spare growable ranges (grow_bg.c) size what they keep ready:
 * per window of DEMAND_WINDOW_MS over the last DEMAND_WINDOWS, the largest
 * rise of what is held above its lowest point in the window. A load that
 * grows rises by what it takes; a load at a steady size, taking and
 * returning as much, rises by little however much it takes, and needs
 * little kept ready. The owner's lock guards a struct demand.
 *
 * A window starts at what was held after the latest note (held since, as
 * every change is noted), so a rise noted once, in a window of its own,
 * still counts.
 *
 * It also keeps, per window, the largest single take (`more`), for an owner
 * that sizes what it keeps ready by the largest request it must cover.
 *
 * Invariant (demand_is_valid): low <= what is held now, for callers that
 * report every fall (demand_note with more == 0). */
#ifndef MB_CLIENT_DEMAND_H
#define MB_CLIENT_DEMAND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define DEMAND_WINDOWS 10
#define DEMAND_WINDOW_MS 100

struct demand {
    int64_t win;                 /* the current window: ms / DEMAND_WINDOW_MS */
    size_t rise[DEMAND_WINDOWS]; /* per window, the largest rise above low; rise[i] current */
    size_t take[DEMAND_WINDOWS]; /* per window, the largest single take */
    size_t low;                  /* the least held in the current window */
    size_t last;                 /* held after the latest note (its held + more) */
    int i;
};

/* Starts measuring at now_ms with `held` held. */
static inline void demand_init(struct demand *d, size_t held, int64_t now_ms)
{
    memset(d, 0, sizeof(*d));
    d->win = now_ms / DEMAND_WINDOW_MS;
    d->low = d->last = held;
}

/* `held` is held now and `more` is about to be taken (0: a fall, a rise
 * already counted in held, or the clock only), at now_ms (an older
 * reading counts in the current window). Returns the largest rise over
 * the last DEMAND_WINDOWS windows. */
static inline size_t demand_note(struct demand *d, size_t held, size_t more, int64_t now_ms)
{
    int64_t w = now_ms / DEMAND_WINDOW_MS;
    if (w > d->win) {
        int64_t steps = w - d->win < DEMAND_WINDOWS ? w - d->win : DEMAND_WINDOWS;
        for (int64_t k = 0; k < steps; k++) {
            d->i = (d->i + 1) % DEMAND_WINDOWS;
            d->rise[d->i] = 0;
            d->take[d->i] = 0;
        }
        d->win = w;
        d->low = d->last;   /* held from the window's start until now */
    }
    d->last = held + more;
    if (more > d->take[d->i])
        d->take[d->i] = more;
    if (held < d->low)
        d->low = held;
    if (held + more - d->low > d->rise[d->i])
        d->rise[d->i] = held + more - d->low;
    size_t peak = 0;
    for (int k = 0; k < DEMAND_WINDOWS; k++)
        peak = d->rise[k] > peak ? d->rise[k] : peak;
    return peak;
}

/* The largest single take over the last DEMAND_WINDOWS windows, as of the
 * latest demand_note. */
static inline size_t demand_largest_take(const struct demand *d)
{
    size_t m = 0;
    for (int k = 0; k < DEMAND_WINDOWS; k++)
        m = d->take[k] > m ? d->take[k] : m;
    return m;
}

/* A trim: what came before no longer counts. */
static inline void demand_forget(struct demand *d, size_t held)
{
    memset(d->rise, 0, sizeof(d->rise));
    memset(d->take, 0, sizeof(d->take));
    d->low = d->last = held;
}

static inline bool demand_is_valid(const struct demand *d, size_t held)
{
    return d->low <= held && d->i >= 0 && d->i < DEMAND_WINDOWS;
}

#endif
