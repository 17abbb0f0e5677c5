#!/usr/bin/env python3
"""test_bench_torch.py: tools/bench_torch.py's train and generate
bookkeeping, without PyTorch: each run is compared with the torch-default
run of its own round, the summary takes the median of those ratios and
flags differing losses (or generated tokens), and bad options (--rounds
below 1, an empty prompt range, no new tokens) are refused before anything
runs. Exit 0 on success."""
import os
import subprocess
import sys
import importlib.util

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "bench_torch.py")


def load():
    spec = importlib.util.spec_from_file_location("bench_torch", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def row(name, rnd, median_ms, losses, peak_gib):
    return {"allocator": name, "round": rnd, "ok": True, "steps": 3, "note": "",
            "step_ms": {"median": median_ms, "mean": median_ms, "p90": median_ms},
            "losses": losses, "peak_device_used_bytes": int(peak_gib * 2**30),
            "max_memory_reserved_bytes": None}


def check(cond, what):
    if not cond:
        print("test_bench_torch: FAILED: " + what)
        sys.exit(1)


def main():
    bt = load()
    # Round 2's default run is slow: paired within rounds, MoonBright's ratio
    # there is 17/20, not 17/15 as a comparison across rounds would give.
    rows = [row("torch-default", 0, 15.0, [1.0, 2.0], 4.0), row("torch-moonbright", 0, 16.5, [1.0, 2.0], 3.0),
            row("torch-default", 1, 20.0, [1.0, 2.0], 4.5), row("torch-moonbright", 1, 17.0, [1.0, 2.0], 3.5),
            row("torch-default", 2, 15.0, [1.0, 2.0], 4.0), row("torch-moonbright", 2, 15.0, [1.0, 2.5], 3.2)]
    bt.judge_train(rows)
    check(abs(rows[3]["step_vs_default"] - 17.0 / 20.0) < 1e-12, "round 2 compared with its own default run")
    check(abs(rows[1]["step_vs_default"] - 1.1) < 1e-12, "round 1 ratio")
    check(rows[5]["losses_vs_default"].startswith("DIFFER"), "round 3's losses differ")
    check(rows[1]["losses_vs_default"] == "identical", "round 1's losses match")
    summary = {s["allocator"]: s for s in bt.summarize_train(rows, ["torch-default", "torch-moonbright"])}
    mb = summary["torch-moonbright"]
    check(mb["rounds"] == 3, "three rounds counted")
    check(abs(mb["ratio_median"] - 1.0) < 1e-12, "median of 0.85, 1.0 and 1.1")
    check(abs(mb["ratio_min"] - 0.85) < 1e-12 and abs(mb["ratio_max"] - 1.1) < 1e-12, "ratio range")
    check(not mb["losses_all_match"], "a differing round is flagged")
    check(summary["torch-default"]["losses_all_match"], "the reference matches itself")
    check(mb["first_round_peak_device_used_bytes"] == 3 * 2**30, "peak memory from the first round")
    p = subprocess.run([sys.executable, TOOL, "train", "--rounds", "0"], capture_output=True, text=True)
    check(p.returncode == 2 and "--rounds must be at least 1" in p.stderr, "--rounds 0 refused: " + p.stderr)
    p = subprocess.run([sys.executable, TOOL, "generate", "--rounds", "0"], capture_output=True, text=True)
    check(p.returncode == 2 and "--rounds must be at least 1" in p.stderr, "generate --rounds 0 refused: " + p.stderr)
    p = subprocess.run([sys.executable, TOOL, "generate", "--min-prompt", "64", "--max-prompt", "32"],
                       capture_output=True, text=True)
    check(p.returncode == 2 and "--max-prompt must be at least --min-prompt" in p.stderr,
          "generate's prompt range checked: " + p.stderr)
    p = subprocess.run([sys.executable, TOOL, "generate", "--new-tokens", "0"], capture_output=True, text=True)
    check(p.returncode == 2 and "--new-tokens must be at least 1" in p.stderr, "--new-tokens 0 refused: " + p.stderr)
    # Generated tokens stand in for the losses: one differing token is a difference.
    check(bt.compare_losses([5, 7, 9], [5, 7, 9])[0] == "identical", "equal token lists match")
    check(bt.compare_losses([5, 7, 9], [5, 8, 9])[0] == "DIFFER", "one differing token is flagged")
    # A result row, from a stand-in for torch.cuda: times, values, memory.
    import types

    def no_stats(dev):
        raise RuntimeError("not kept by this allocator")
    cuda = types.SimpleNamespace(mem_get_info=lambda dev: (1 << 30, 8 << 30),
                                 max_memory_reserved=no_stats, max_memory_allocated=lambda dev: 123)
    fake = types.SimpleNamespace(cuda=cuda)
    args = types.SimpleNamespace(warmup=1)
    r = bt.timed_row(fake, bt.DeviceMemory(fake, 0), args, "torch-moonbright", "GPT generation batches",
                     "batches", [3_000_000, 1_000_000, 2_000_000], [7, 8], None, "", 5, 9, 0.5)[0]
    check(r["ok"] and r["steps"] == 3 and r["step_ms"]["median"] == 2.0, "row times: %r" % r["step_ms"])
    check(r["losses"] == [7, 8] and r["peak_device_used_bytes"] == 9, "row values and peak")
    check(r["max_memory_reserved_bytes"] is None and r["max_memory_allocated_bytes"] == 123,
          "statistics the allocator does not keep are None")
    check(r["device_total_bytes"] == 8 << 30 and r["device_used_idle_bytes"] == 5, "device memory")
    print("test_bench_torch: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
