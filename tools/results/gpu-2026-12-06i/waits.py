#!/usr/bin/env python3
"""waits.py ERR|- JSON: a replay's figures per strategy (mbbench replay --json) and, from
its stderr at MOONBRIGHT_LOG=debug, the client's driver-work tallies and the caller waits
over 1 ms summed by part (refill, mapper queue, frame lock, grants, mapping)."""
import json, re, sys

if sys.argv[1] != "-":
    parts = ["total", "refill", "queue", "lock", "grants", "frames granted", "mapping", "frames mapped"]
    rows = []
    for line in open(sys.argv[1], errors="replace"):
        m = re.search(r"waited ([\d.]+) ms: ([\d.]+) for the range.s refill, ([\d.]+) for the "
                      r"mapper.s queue, ([\d.]+) for the frame lock, ([\d.]+) in grants of (\d+) "
                      r"frames, ([\d.]+) mapping (\d+)", line)
        if m:
            rows.append([float(v) for v in m.groups()])
        elif "growable ranges" in line:
            print(line.rstrip())
    for over in (1, 2):
        sel = [r for r in rows if r[0] > over]
        print("waits over %d ms: %d; sums: %s" % (over, len(sel), ", ".join(
            "%s %.1f" % (p, sum(r[i] for r in sel)) for i, p in enumerate(parts))))
d = json.load(open(sys.argv[2]))
for r in d["strategies"]:
    a = r["alloc_ns"]
    print("%s %.3f %.1fus p99 %.1f max %.2fms waits %s fr %s desc %s busy %s daemon %s import %s "
          "creates %s re-exports %s" % (r["strategy"], r["reserved_over_live"], a["mean"] / 1e3, a["p99"] / 1e3,
                          a["max"] / 1e6, r.get("driver_waits"), r.get("peak_daemon_frames"),
                          r.get("peak_daemon_descriptors"), r.get("background_busy_s"),
                          r.get("daemon_wait_s"), r.get("import_s"), r.get("daemon_grant_creates"), r.get("daemon_reexports")))
