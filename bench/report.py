#!/usr/bin/env python3
"""report.py - turns the raw results of one workload of bench/run.sh into
the table it prints: every round's value, the median, the ratio of the
medians (shoal/ext4) and, where issue #2 sets one, the target with PASS or
MISS.  The verdicts are information only; the exit status is 0 unless the
raw file cannot be read.

    report.py RAWFILE

RAWFILE holds tab-separated lines written by run.sh:

    meta   KEY      TEXT                     printed as "KEY: TEXT", in order
    val    FS  ROUND  METRIC  VALUE          one measured number
    fail   FS  ROUND  TEXT                   one line of a failed run's story

Invariants:
 (1) a median is taken over the rounds that produced the metric; a round
     that failed shows FAIL in its column and is left out;
 (2) a ratio and a verdict need both medians; without them the row says
     "n/a" and never PASS.
"""
import statistics
import sys

MIB = 1 << 20

# Per workload: rows of (metric, label, scale, format, target).  scale
# divides the raw value; target is (op, bound) on the ratio shoal/ext4 of
# the medians, or None.  Metrics named shoal_* exist for shoal only.
SPECS = {
    "meta": [
        ("create_s", "create phase (s)", 1, "%.3f", None),
        ("stat_s", "stat phase (s)", 1, "%.3f", None),
        ("unlink_s", "unlink phase (s)", 1, "%.3f", None),
        ("total_s", "total create+stat+unlink (s)", 1, "%.3f", ("<=", 3.0)),
        ("syncfs_s", "syncfs afterwards (s, not in total)", 1, "%.3f", None),
        ("dev_wr_bytes", "device MiB written (loop, run+syncfs)", MIB, "%.1f", None),
        ("dev_wr_ios", "device write requests (loop)", 1, "%.0f", None),
        ("dev_flushes", "device flushes (loop)", 1, "%.0f", None),
        ("umount_wr_bytes", "device MiB written until unmounted", MIB, "%.1f", None),
        ("shoal_dev_write_bytes", "shoal stat: dev_write_bytes (MiB)", MIB, "%.1f", None),
        ("shoal_dev_flushes", "shoal stat: dev_flushes", 1, "%.0f", None),
        ("shoal_commits", "shoal stat: commits", 1, "%.0f", None),
        ("shoal_commit_blocks", "shoal stat: commit_blocks", 1, "%.0f", None),
    ],
    "seq": [
        ("w_mib_s", "write MiB/s (1 MiB writes + fsync)", 1, "%.1f", (">=", 0.7)),
        ("w_fsync_s", "  of which fsync (s)", 1, "%.3f", None),
        ("r_mib_s", "read MiB/s (cold cache)", 1, "%.1f", (">=", 0.7)),
        ("w_dev_bytes", "device MiB written by write+fsync (loop)", MIB, "%.1f", None),
        ("w_dev_per_app", "  per application byte", 1, "%.3f", None),
        ("w_dev_flushes", "  device flushes (loop)", 1, "%.0f", None),
        ("r_dev_bytes", "device MiB read by the read (loop)", MIB, "%.1f", None),
        ("umount_wr_bytes", "device MiB written until unmounted", MIB, "%.1f", None),
        ("shoal_w_dev_write_bytes", "shoal stat: dev_write_bytes, write (MiB)", MIB, "%.1f", None),
        ("shoal_w_dev_flushes", "shoal stat: dev_flushes, write", 1, "%.0f", None),
        ("shoal_w_wb_written", "shoal stat: wb_written, write", 1, "%.0f", None),
        ("shoal_r_dev_read_bytes", "shoal stat: dev_read_bytes, read (MiB)", MIB, "%.1f", None),
    ],
    "fstest": [
        ("kib_s", "bandwidth KiB/s (app bytes / time)", 1, "%.1f", (">=", 1.0)),
        ("lat_avg_us", "iteration latency avg (us)", 1, "%.0f", None),
        ("lat_p99_us", "iteration latency p99 (us)", 1, "%.0f", None),
        ("dev_per_app", "device bytes written per app byte (loop)", 1, "%.2f", ("<=", 2.0)),
        ("flushes_per_iter", "device flushes per iteration (loop)", 1, "%.2f", None),
        ("wr_ios_per_iter", "device write requests per iteration (loop)", 1, "%.2f", None),
        ("umount_dev_per_app", "  ... per app byte, until unmounted", 1, "%.2f", None),
        ("shoal_dev_per_app", "shoal stat: dev_write_bytes per app byte", 1, "%.2f", None),
        ("shoal_flushes_per_iter", "shoal stat: dev_flushes per iteration", 1, "%.2f", None),
        ("shoal_commits_per_iter", "shoal stat: commits per iteration", 1, "%.2f", None),
        ("shoal_fsyncs", "shoal stat: fsyncs", 1, "%.0f", None),
        ("shoal_fsync_noop", "shoal stat: fsync_noop", 1, "%.0f", None),
    ],
}

FSES = ("ext4", "shoal")


def fmt(spec_fmt, scale, v):
    return spec_fmt % (v / scale)


def verdict(op, bound, ratio):
    ok = ratio <= bound if op == "<=" else ratio >= bound
    return "PASS" if ok else "MISS"


# --- lockd (begin) ------------------------------------------------------------
# The "lockd" workload compares variants of one client, not two filesystems:
# rows are (variant, metric), ratios are against the bare echo of the same run.
LOCKD_VARIANTS = ("echo", "echo_poll", "lockd", "lockd_nospin", "contend")
LOCKD_METRICS = [
    ("lat_p50_us", "lock+unlock (or echo) latency, median (us)", "%.1f"),
    ("lat_p99_us", "  p99 (us)", "%.1f"),
    ("ops_s", "round trips per second", "%.0f"),
    ("handoffs_s", "contended EX handoffs per second (2 nodes)", "%.0f"),
]
# (numerator, denominator, metric, label, target)
LOCKD_RATIOS = [
    ("lockd", "echo", "lat_p50_us", "median latency lockd / echo", ("<=", 1.5)),
    ("lockd_nospin", "echo", "lat_p50_us", "median latency lockd_nospin / echo", None),
    ("lockd", "echo_poll", "lat_p50_us", "median latency lockd / echo_poll", None),
    ("lockd", "echo", "ops_s", "round trips/s lockd / echo", None),
]


def report_lockd(vals, fails, rounds):
    failed = {(fs, r) for fs, r, _ in fails}
    w_label = max(len(m[1]) for m in LOCKD_METRICS) + 1
    head = "%-*s %-13s" % (w_label, "metric", "variant")
    head += "".join("%11s" % ("round %d" % r) for r in rounds) + "%11s" % "median"
    print(head)
    print("-" * len(head))
    med = {}
    for metric, label, sfmt in LOCKD_METRICS:
        first = True
        for v in LOCKD_VARIANTS:
            per = vals.get((v, metric), {})
            primary = "handoffs_s" if v == "contend" else "lat_p50_us"
            if not per and (metric != primary or
                            not any((v, r) in failed for r in rounds)):
                continue
            cells = ""
            for r in rounds:
                if r in per:
                    cells += "%11s" % (sfmt % per[r])
                elif (v, r) in failed:
                    cells += "%11s" % "FAIL"
                else:
                    cells += "%11s" % "-"
            if per:
                med[(v, metric)] = statistics.median(per.values())
            print(("%-*s %-13s%s%11s" % (w_label, label if first else "", v, cells,
                                         sfmt % med[(v, metric)] if (v, metric) in med
                                         else "n/a")).rstrip())
            first = False
    print()
    for num, den, metric, label, target in LOCKD_RATIOS:
        a, b = med.get((num, metric)), med.get((den, metric))
        if a is None or not b:
            line = "%-40s %8s" % (label, "n/a")
            if target:
                line += "  %s %.1fx n/a" % target
        else:
            line = "%-40s %7.2fx" % (label, a / b)
            if target:
                line += "  %s %.1fx %s" % (target[0], target[1],
                                           verdict(target[0], target[1], a / b))
        print(line)
# --- lockd (end) --------------------------------------------------------------


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: report.py RAWFILE\n")
        return 2
    meta, vals, fails, rounds = [], {}, [], set()
    workload = None
    with open(sys.argv[1]) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if p[0] == "meta" and len(p) >= 3:
                meta.append((p[1], "\t".join(p[2:])))
                if p[1] == "workload":
                    workload = p[2].split()[0]
            elif p[0] == "val" and len(p) == 5:
                rounds.add(int(p[2]))
                vals.setdefault((p[1], p[3]), {})[int(p[2])] = float(p[4])
            elif p[0] == "fail" and len(p) >= 4:
                rounds.add(int(p[2]))
                fails.append((p[1], int(p[2]), "\t".join(p[3:])))
            elif p[0] == "rounds" and len(p) == 2:
                rounds.update(range(1, int(p[1]) + 1))
    failed = {(fs, r) for fs, r, _ in fails}
    rounds = sorted(rounds)

    for k, v in meta:
        print("%s: %s" % (k, v))
    print()
    if workload == "lockd":
        report_lockd(vals, fails, rounds)
        if fails:
            print()
            print("FAILED RUNS:")
            for fs, r, text in fails:
                print("  %s round %d: %s" % (fs, r, text))
        return 0
    w_label = max(len(s[1]) for s in SPECS[workload]) + 1
    head = "%-*s %-6s" % (w_label, "metric", "fs")
    head += "".join("%11s" % ("round %d" % r) for r in rounds)
    head += "%11s %11s  %s" % ("median", "shoal/ext4", "target")
    print(head)
    print("-" * len(head))
    for metric, label, scale, sfmt, target in SPECS[workload]:
        shoal_only = metric.startswith("shoal_")
        med = {}
        for i, fs in enumerate(FSES):
            if shoal_only and fs != "shoal":
                continue
            per = vals.get((fs, metric), {})
            cells = ""
            for r in rounds:
                if r in per:
                    cells += "%11s" % fmt(sfmt, scale, per[r])
                elif (fs, r) in failed:
                    cells += "%11s" % "FAIL"
                else:
                    cells += "%11s" % "-"
            if per:
                med[fs] = statistics.median(per.values())
            line = "%-*s %-6s%s%11s" % (
                w_label, label if (i == 0 or shoal_only) else "", fs, cells,
                fmt(sfmt, scale, med[fs]) if fs in med else "n/a")
            if fs == "shoal" and not shoal_only:
                if "ext4" in med and "shoal" in med and med["ext4"] != 0:
                    ratio = med["shoal"] / med["ext4"]
                    line += " %10.2fx" % ratio
                    if target:
                        line += "  %s %.1fx %s" % (target[0], target[1],
                                                   verdict(target[0], target[1], ratio))
                else:
                    line += " %11s" % "n/a"
                    if target:
                        line += "  %s %.1fx n/a" % target
            print(line.rstrip())
    if fails:
        print()
        print("FAILED RUNS:")
        for fs, r, text in fails:
            print("  %s round %d: %s" % (fs, r, text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
