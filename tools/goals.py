#!/usr/bin/env python3
"""goals.py: the benchmark goals of the heap and page work, checked against
benchmark output (the JSON of mbbench replay, mbbench latency and
bench_torch.py train, and bench_vspace's tables; in any mix, plain or
gzipped). Prints one line per goal: what was measured,
what it was held to, and met, MISSED or "-" (nothing to compare: the run
lacked that strategy or its baseline). It reads figures only; it runs
nothing, and it never fails a run: exit status 0 whatever the figures,
2 when a file could not be read (the others are still checked).

    tools/goals.py replay.json latency.json vspace.txt train.json

Goals held to (BENCHMARKS.md, "Where things stand"):
- replay (conversation trace, on a GPU): realloc and grow hold at most 1.03x the live
  bytes; realloc's mean and p99 allocation and grow's mean at most
  cudaMallocAsync's in the same file; grow's and vspace's slowest
  allocation at most 2 ms and 1 ms; vspace's mean at most 5 us, p99 50 us,
  1.03x; at most 2 000 descriptors in the daemon; every strategy
  completed; on the host backend, realloc's mean within 2x of glibc's
  (the malloc strategy);
- latency: the 64 MiB and 1 GiB pairs of mb_malloc and mb_malloc_async at
  most 1 us at p50; on the host backend, mb_malloc's 64 MiB pair no slower
  than glibc's malloc/free of 64 MiB;
- vspace (bench_vspace): mb_vspace_map_async of 1024 pages from a warm
  pool in at most 20 us of host time, at every page size measured;
- train: MoonBright's median step at most 1.03x the default allocator's,
  identical losses, a first-round peak no higher than the default's.
"""
import gzip
import json
import sys

US = 1e3  # ns per us


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        text = f.read()
    if text.startswith("# bench_vspace"):
        return vspace_table(text)
    return json.loads(text)


def vspace_table(text):
    """bench_vspace's output (a table per part, not JSON): the rows of its
    growth table, as {"bench": "vspace", "rows": [{page_kib, pages,
    map_async_host_us}]}. Rows it cannot read are left out."""
    rows, head = [], None
    for ln in text.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if ln.startswith("## "):
            head = None
        elif ln.startswith("| page |"):
            head = cells
        elif head and ln.startswith("|") and not ln.startswith("|---") and len(cells) == len(head):
            try:
                rows.append({"page_kib": int(cells[0].split()[0]), "pages": int(cells[1]),
                             "map_async_host_us": float(cells[head.index("map_async host us")])})
            except (ValueError, IndexError):
                pass
    return {"bench": "vspace", "rows": rows}


def verdict(value, limit):
    if value is None or limit is None:
        return "-"
    return "met" if value <= limit else "MISSED"


def line(what, value, limit, shown=None, held=None):
    v = "-" if value is None else (shown or "%.3f" % value)
    h = "-" if limit is None else (held or "%.3f" % limit)
    print("  %-46s %-14s <= %-14s %s" % (what, v, h, verdict(value, limit)))


def replay_goals(doc):
    rows = {r["strategy"]: r for r in doc.get("strategies", []) if r.get("ran", True)}
    print("replay %s (%s backend, %s requests)" % (doc.get("trace"), doc.get("backend"),
                                                   doc.get("requests")))
    if doc.get("backend") == "host":
        libc = rows.get("malloc")
        m = rows.get("realloc")
        lm = libc["alloc_ns"]["mean"] / US if libc else None
        line("host: realloc mean us (2x glibc's)", m["alloc_ns"]["mean"] / US if m else None,
             2 * lm if lm else None, shown=fmt(m["alloc_ns"]["mean"] / US) if m else None,
             held=fmt(2 * lm) if lm else None)
        print("  (the lines below are the GPU goals; a host run shows them for reference)")
    cuda = rows.get("cudaMallocAsync")
    cmean = cuda["alloc_ns"]["mean"] / US if cuda else None
    cp99 = cuda["alloc_ns"]["p99"] / US if cuda else None

    def us(name, key):
        r = rows.get(name)
        return r["alloc_ns"][key] / US if r else None

    def max_ms(name):
        r = rows.get(name)
        return r["alloc_ns"]["max"] / 1e6 if r else None

    def rl(name):
        r = rows.get(name)
        return r["reserved_over_live"] if r else None

    line("realloc reserved/live", rl("realloc"), 1.03)
    line("realloc mean us (cudaMallocAsync's)", us("realloc", "mean"), cmean,
         shown=fmt(us("realloc", "mean")), held=fmt(cmean))
    line("realloc p99 us (cudaMallocAsync's)", us("realloc", "p99"), cp99,
         shown=fmt(us("realloc", "p99")), held=fmt(cp99))
    line("grow reserved/live", rl("grow"), 1.03)
    line("grow mean us (cudaMallocAsync's)", us("grow", "mean"), cmean,
         shown=fmt(us("grow", "mean")), held=fmt(cmean))
    line("grow slowest allocation, ms", max_ms("grow"), 2.0, shown=fmt(max_ms("grow")), held="2")
    line("vspace reserved/live", rl("vspace"), 1.03)
    line("vspace mean us", us("vspace", "mean"), 5.0, shown=fmt(us("vspace", "mean")), held="5")
    line("vspace p99 us", us("vspace", "p99"), 50.0, shown=fmt(us("vspace", "p99")), held="50")
    line("vspace slowest allocation, ms", max_ms("vspace"), 1.0, shown=fmt(max_ms("vspace")),
         held="1")
    fds = [r.get("peak_daemon_descriptors") for r in rows.values()
           if r.get("peak_daemon_descriptors") is not None]
    line("daemon descriptors at the peak, any strategy", max(fds) if fds else None, 2000,
         shown=str(max(fds)) if fds else None, held="2000")
    failed = [n for n, r in rows.items() if not r.get("ok", True)]
    print("  %-46s %s" % ("every strategy completed",
                          "met (%s)" % ", ".join(rows) if not failed and rows
                          else "MISSED: %s" % ", ".join(failed) if failed else "-"))


def latency_goals(doc):
    print("latency (%s backend)" % doc.get("backend"))
    seen = False
    libc = {r["size"]: r["pair_ns"]["p50"] / US for r in doc.get("rows", [])
            if r.get("allocator") == "malloc"}
    for r in doc.get("rows", []):
        if r.get("allocator") == "mb_malloc" and r.get("size") == 64 << 20 and libc.get(64 << 20):
            p50 = r["pair_ns"]["p50"] / US
            line("host: mb_malloc 64 MiB pair p50 us (glibc's)", p50, libc[64 << 20], shown=fmt(p50),
                 held=fmt(libc[64 << 20]))
    for r in doc.get("rows", []):
        if r.get("allocator") in ("mb_malloc", "mb_malloc_async") and \
                r.get("size") in (64 << 20, 1 << 30):
            p50 = r["pair_ns"]["p50"] / US
            line("%s %d MiB pair p50 us" % (r["allocator"], r["size"] >> 20), p50, 1.0,
                 shown=fmt(p50), held="1")
            seen = True
    if not seen:
        print("  no 64 MiB or 1 GiB rows of mb_malloc or mb_malloc_async")


def vspace_goals(doc):
    print("vspace growth (bench_vspace)")
    seen = False
    for r in doc.get("rows", []):
        if r["pages"] == 1024:
            line("map_async of 1024 %d KiB pages, host us" % r["page_kib"], r["map_async_host_us"],
                 20.0, shown="%.1f" % r["map_async_host_us"], held="20")
            seen = True
    if not seen:
        print("  no rows of 1024 pages")


def train_goals(doc):
    print("train (%s)" % doc.get("model_kind", doc.get("model")))
    summ = {s["allocator"]: s for s in doc.get("summary", [])}
    mb, base = summ.get("torch-moonbright"), summ.get("torch-default")
    if not mb or not base:
        print("  needs torch-default and torch-moonbright")
        return
    line("median step / the default's", mb.get("ratio_median"), 1.03)
    print("  %-46s %s" % ("identical losses", "met" if mb.get("losses_all_match") else "MISSED"))
    pk, pb = mb.get("first_round_peak_device_used_bytes"), base.get("first_round_peak_device_used_bytes")
    line("first-round peak GiB (the default's)", pk / 2**30 if pk else None,
         pb / 2**30 if pb else None)


def fmt(v):
    return None if v is None else "%.2f" % v


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    rc = 0
    for path in argv[1:]:
        try:
            doc = load(path)
        except (OSError, ValueError) as e:
            print("goals.py: %s: %s" % (path, e))
            rc = 2
            continue
        bench = doc.get("bench")
        if bench == "replay" and doc.get("format") != "lifetimes":
            replay_goals(doc)
        elif bench == "latency":
            latency_goals(doc)
        elif bench == "vspace":
            vspace_goals(doc)
        elif bench == "train":
            train_goals(doc)
        else:
            print("%s: no goals for bench %r" % (path, bench))
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
