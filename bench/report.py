#!/usr/bin/env python3
"""report.py - turns the raw results of one workload of bench/run.sh into
the table it prints: every round's value per variant, the median, the
ratios of the medians (shoal/ext4 and shoal-cl/ext4, shoal-cl/shoal; for
pingpong hold=0 against the default hold time; for mmread N shoal nodes
against N ext4 processes; for cluster N nodes against one node and against
ext4) and, where an issue sets one, the target with PASS or MISS.  The verdicts are information only; the
exit status is 0 unless the raw file cannot be read.

    report.py RAWFILE

RAWFILE holds tab-separated lines written by run.sh:

    rounds N                                 the rounds that were run
    fses   FS FS...                          the variants, in table order
    meta   KEY      TEXT                     printed as "KEY: TEXT", in order
    val    FS  ROUND  METRIC  VALUE          one measured number
    fail   FS  ROUND  TEXT                   one line of a failed run's story

Invariants:
 (1) a median is taken over the rounds that produced the metric; a round
     that failed shows FAIL in its column and is left out;
 (2) a ratio and a verdict need both medians; without them the row says
     "n/a" and never PASS;
 (3) a check on the value itself (cache: lock requests == 0) holds for every
     round that produced it, and says n/a, never PASS, when no round met
     its precondition; a check on the median ("median" targets) needs it.
"""
import statistics
import sys

MIB = 1 << 20

# Ratio columns: (header, {numerator variant: denominator variant}); a
# variant's row shows its ratio in each column that names it.
MAIN_COLS = [("vs ext4", {"shoal": "ext4", "shoal-cl": "ext4", "fuse-null": "ext4",
                          "shoal-cl2": "ext4"}),
             ("vs null", {"shoal": "fuse-null", "shoal-cl": "fuse-null"}),
             ("cl/shoal", {"shoal-cl": "shoal"})]
CACHE_COLS = [("cl/shoal", {"shoal-cl": "shoal"})]
PP_COLS = [("vs ext4", {"shoal-cl": "ext4", "shoal-cl-hold0": "ext4"}),
           ("hold0/hold", {"shoal-cl-hold0": "shoal-cl"})]
PL_COLS = [("vs ext4", {"shoal-cl": "ext4", "shoal-cl-hold0": "ext4"}),
           ("vs null", {"shoal-cl": "fuse-null", "shoal-cl-hold0": "fuse-null"})]
MM_COLS = [("vs ext4", {"shoal-cl": "ext4", "fuse-null": "ext4"}),
           ("vs null", {"shoal-cl": "fuse-null"})]

# Targets: ("ratio", NUM, DEN, op, bound) on the ratio of the medians, shown
# on NUM's row; ("value", FS, op, bound) on every round's value of FS;
# ("median", FS, op, bound) on FS's median.
T_EXT4 = lambda op, b: ("ratio", "shoal", "ext4", op, b)  # issue #2
T_CL = lambda op, b: ("ratio", "shoal-cl", "shoal", op, b)  # issue #3: <= 10% worse
T_CL2 = lambda op, b: ("ratio", "shoal-cl2", "ext4", op, b)  # issue #5: lock=shoal, 2nd node
T_MM = lambda op, b: ("ratio", "shoal-cl", "ext4", op, b)  # issue #4: N nodes against N processes


def mm_rows():
    """mmread (issue #4): per mode and N, the wall time (targets: iter <= 2x
    ext4 at N = 4, once <= 1.2x), then the file's lock counters (0 EX
    requests and 0 callbacks in every round)."""
    rows = []
    for mode, what in (("iter", "mmap per iteration"), ("once", "one mmap per process")):
        for n in (1, 2, 4):
            t = []
            if mode == "once" or n == 4:
                t = [T_MM("<=", 2.0 if mode == "iter" else 1.2)]
            rows.append(("%s_n%d_wall_s" % (mode, n), "%s, N=%d: wall time (s)" % (what, n),
                         1, "%.3f", t))
        for n in (1, 2, 4):
            rows.append(("%s_n%d_ops_s" % (mode, n), "  N=%d: iterations per second" % n,
                         1, "%.0f", []))
        for n in (1, 2, 4):
            rows.append(("%s_n%d_faults" % (mode, n), "  N=%d: page faults (all processes)" % n,
                         1, "%.0f", []))
        for n in (1, 2, 4):
            rows.append(("%s_n%d_rd_bytes" % (mode, n), "  N=%d: device MiB read (loop)" % n,
                         MIB, "%.1f", []))
        for n in (1, 2, 4):
            rows.append(("shoal_%s_n%d_file_ex" % (mode, n),
                         "  N=%d: EX requests for the file (all nodes)" % n, 1, "%.0f",
                         [("value", "shoal-cl", "==", 0)]))
            rows.append(("shoal_%s_n%d_file_cb" % (mode, n),
                         "  N=%d: callbacks for the file (all nodes)" % n, 1, "%.0f",
                         [("value", "shoal-cl", "==", 0)]))
            rows.append(("shoal_%s_n%d_file_req" % (mode, n),
                         "  N=%d: lock requests for the file (all nodes)" % n, 1, "%.0f", []))
    return rows

CL_TYPES = ((1, "non-disk"), (2, "inode"), (3, "rgrp"), (4, "meta"), (5, "iopen"),
            (6, "flock"), (8, "quota"), (9, "journal"))


def cluster_spec(fses):
    """cluster (issue 22): per flavour, the totals and the per-node figures
    of variants shoal-cl-nN (N nodes) and ext4 (one node), against one
    shoal node and against ext4; targets at 8 nodes: private total >= 1.5x
    one node's, mixed >= 0.5x, slowest node >= 0.5x the fastest (median)."""
    ns = [fs for fs in fses if fs.startswith("shoal-cl-n")]
    cols = [("vs 1 node", {fs: "shoal-cl-n1" for fs in ns if fs != "shoal-cl-n1"}),
            ("vs ext4", {fs: "ext4" for fs in ns})]
    rows = []
    for fl, bound in (("private", 1.5), ("mixed", 0.5)):
        rows += [
            (fl + "_ops_s", fl + ": total ops/s (all nodes)", 1, "%.0f",
             [("ratio", "shoal-cl-n8", "shoal-cl-n1", ">=", bound)]),
            (fl + "_node_min_ops_s", "  per node: the slowest node's ops/s", 1, "%.1f", []),
            (fl + "_node_max_ops_s", "  per node: the fastest node's ops/s", 1, "%.1f", []),
            (fl + "_node_ratio", "  slowest / fastest node", 1, "%.3f",
             [("median", "shoal-cl-n8", ">=", 0.5)]),
            (fl + "_max_ms", "  the slowest single op (ms)", 1, "%.0f", []),
            ("shoal_%s_lockd_rss_kib" % fl, "  shoal-lockd RSS after the run (MiB)", 1024, "%.1f", []),
            ("shoal_%s_lockd_rss0_kib" % fl, "  shoal-lockd RSS before the run (MiB)", 1024, "%.1f", []),
            (fl + "_flushes_per_op", "  device flushes per op (loop)", 1, "%.2f", []),
            (fl + "_wr_bytes_per_op", "  device bytes written per op (loop)", 1, "%.0f", []),
            ("shoal_%s_gl_requests_per_op" % fl, "  shoal stat, all nodes: lock requests per op",
             1, "%.2f", []),
            ("shoal_%s_gl_callbacks_per_op" % fl, "  shoal stat: callbacks per op", 1, "%.3f", []),
            ("shoal_%s_gl_demotions_per_op" % fl, "  shoal stat: demotions per op", 1, "%.3f", []),
            ("shoal_%s_gl_restarts_per_op" % fl, "  shoal stat: restarts per op", 1, "%.3f", []),
            ("shoal_%s_gl_rtt_us_per_op" % fl, "  shoal stat: lock wait per op (us)", 1, "%.0f", []),
            ("shoal_%s_commits_per_op" % fl, "  shoal stat: commits per op", 1, "%.2f", []),
            ("shoal_%s_dev_flushes_per_op" % fl, "  shoal stat: dev_flushes per op", 1, "%.2f", []),
        ]
        for t, name in CL_TYPES:
            rows += [
                ("shoal_%s_t%d_req_per_op" % (fl, t),
                 "  glstats, %s glocks: requests per op" % name, 1, "%.3f", []),
                ("shoal_%s_t%d_cb_per_op" % (fl, t),
                 "  glstats, %s glocks: callbacks per op" % name, 1, "%.3f", []),
                ("shoal_%s_t%d_tryfail_per_op" % (fl, t),
                 "  glstats, %s glocks: refused tries per op" % name, 1, "%.3f", []),
            ]
    return cols, rows


# Rows per workload: (metric, label, scale, format, targets).  scale divides
# the raw value.  Metrics named shoal_* exist for shoal variants only.
GL_ROWS = lambda pfx, what: [
    (pfx + "gl_requests", "shoal stat: gl_requests" + what, 1, "%.0f", []),
    (pfx + "gl_callbacks", "shoal stat: gl_callbacks" + what, 1, "%.0f", []),
    (pfx + "gl_demotions", "shoal stat: gl_demotions" + what, 1, "%.0f", []),
    (pfx + "gl_restarts", "shoal stat: gl_restarts" + what, 1, "%.0f", []),
    (pfx + "gl_rtt_us", "shoal stat: gl_rtt_us (total wait)" + what, 1, "%.0f", []),
]
SPECS = {
    "meta": (MAIN_COLS, [
        ("create_s", "create phase (s)", 1, "%.3f", []),
        ("stat_s", "stat phase (s)", 1, "%.3f", []),
        ("unlink_s", "unlink phase (s)", 1, "%.3f", []),
        ("total_s", "total create+stat+unlink (s)", 1, "%.3f",
         [T_EXT4("<=", 3.0), T_CL("<=", 1.1)]),
        ("syncfs_s", "syncfs afterwards (s, not in total)", 1, "%.3f", []),
        ("dev_wr_bytes", "device MiB written (loop, run+syncfs)", MIB, "%.1f", []),
        ("dev_wr_ios", "device write requests (loop)", 1, "%.0f", []),
        ("dev_flushes", "device flushes (loop)", 1, "%.0f", []),
        ("umount_wr_bytes", "device MiB written until unmounted", MIB, "%.1f", []),
        ("shoal_dev_write_bytes", "shoal stat: dev_write_bytes (MiB)", MIB, "%.1f", []),
        ("shoal_dev_flushes", "shoal stat: dev_flushes", 1, "%.0f", []),
        ("shoal_commits", "shoal stat: commits", 1, "%.0f", []),
        ("shoal_commit_blocks", "shoal stat: commit_blocks", 1, "%.0f", []),
    ] + GL_ROWS("shoal_", "")),
    "seq": (MAIN_COLS, [
        ("w_mib_s", "write MiB/s (1 MiB writes + fsync)", 1, "%.1f",
         [T_EXT4(">=", 0.7), T_CL(">=", 0.9)]),
        ("w_fsync_s", "  of which fsync (s)", 1, "%.3f", []),
        ("r_mib_s", "read MiB/s (cold cache)", 1, "%.1f",
         [T_EXT4(">=", 0.7), T_CL(">=", 0.9)]),
        ("w_dev_bytes", "device MiB written by write+fsync (loop)", MIB, "%.1f", []),
        ("w_dev_per_app", "  per application byte", 1, "%.3f", []),
        ("w_dev_flushes", "  device flushes (loop)", 1, "%.0f", []),
        ("r_dev_bytes", "device MiB read by the read (loop)", MIB, "%.1f", []),
        ("umount_wr_bytes", "device MiB written until unmounted", MIB, "%.1f", []),
        ("shoal_w_dev_write_bytes", "shoal stat: dev_write_bytes, write (MiB)", MIB, "%.1f", []),
        ("shoal_w_dev_flushes", "shoal stat: dev_flushes, write", 1, "%.0f", []),
        ("shoal_w_wb_written", "shoal stat: wb_written, write", 1, "%.0f", []),
        ("shoal_r_dev_read_bytes", "shoal stat: dev_read_bytes, read (MiB)", MIB, "%.1f", []),
    ] + GL_ROWS("shoal_w_", ", write") + GL_ROWS("shoal_r_", ", read")),
    "fstest": (MAIN_COLS, [
        ("kib_s", "bandwidth KiB/s (app bytes / time)", 1, "%.1f",
         [T_EXT4(">=", 1.0), T_CL(">=", 0.9), T_CL2(">=", 1.5)]),
        ("lat_avg_us", "iteration latency avg (us)", 1, "%.0f", []),
        ("lat_p99_us", "iteration latency p99 (us)", 1, "%.0f", []),
        ("floor_us", "device floor: 1.5 KiB direct write + flush (us)", 1, "%.0f", []),
        ("floor_write_us", "  of which the write (us)", 1, "%.0f", []),
        ("floor_flush_us", "  of which the flush (us)", 1, "%.0f", []),
        ("above_floor_us", "iteration latency above the floor (us)", 1, "%.0f", []),
        ("dev_per_app", "device bytes written per app byte (loop)", 1, "%.2f",
         [T_EXT4("<=", 2.0), T_CL2("<=", 1.0)]),
        ("flushes_per_iter", "device flushes per iteration (loop)", 1, "%.2f",
         [("value", "shoal-cl2", "<=", 1.1)]),
        ("wr_ios_per_iter", "device write requests per iteration (loop)", 1, "%.2f", []),
        ("umount_dev_per_app", "  ... per app byte, until unmounted", 1, "%.2f", []),
        ("shoal_dev_per_app", "shoal stat: dev_write_bytes per app byte", 1, "%.2f", []),
        ("shoal_flushes_per_iter", "shoal stat: dev_flushes per iteration", 1, "%.2f", []),
        ("shoal_commits_per_iter", "shoal stat: commits per iteration", 1, "%.2f", []),
        ("shoal_fsyncs", "shoal stat: fsyncs", 1, "%.0f", []),
        ("shoal_fsync_noop", "shoal stat: fsync_noop", 1, "%.0f", []),
        ("shoal_fast_commits", "shoal stat: fast_commits", 1, "%.0f", []),
        ("shoal_fc_visited_per_fc", "shoal stat: fc_visited per iteration", 1, "%.2f", []),
    ] + GL_ROWS("shoal_", "")),
    "mmext": (MAIN_COLS, [
        ("u_mib_s", "unmap per hunk: MiB/s (fill + fsync)", 1, "%.1f", [T_CL2(">=", 0.9)]),
        ("u_first_mib_s", "  first 64 MiB segment MiB/s", 1, "%.1f", []),
        ("u_last_mib_s", "  last 64 MiB segment MiB/s", 1, "%.1f", []),
        ("u_flat", "  last/first segment", 1, "%.3f",
         [("value", "shoal-cl2", ">=", 0.9), ("value", "shoal", ">=", 0.9)]),
        ("u_fsync_s", "  final fsync (s)", 1, "%.3f", []),
        ("u_dev_per_app", "  device bytes written per app byte (loop)", 1, "%.2f", []),
        ("u_wr_ios", "  device write requests (loop)", 1, "%.0f", []),
        ("u_rd_bytes", "  device MiB read (loop)", MIB, "%.1f", []),
        ("shoal_u_dev_read_bytes", "  shoal stat: dev_read_bytes (MiB)", MIB, "%.1f", []),
        ("shoal_u_queue_read_bytes", "  shoal stat: dev_queue_read_bytes (MiB, read from queued writes)", MIB, "%.1f", []),
        ("shoal_u_dev_writes", "  shoal stat: dev_writes", 1, "%.0f", []),
        ("shoal_u_commits", "  shoal stat: commits", 1, "%.0f", []),
        ("shoal_u_dev_flushes", "  shoal stat: dev_flushes", 1, "%.0f", []),
        ("shoal_u_wb_visited", "  shoal stat: wb_visited", 1, "%.0f", []),
        ("shoal_u_page_writes", "  shoal stat: page_writes (kernel's page writeback)", 1, "%.0f", []),
        ("m_mib_s", "mremap, one mapping: MiB/s (fill + fsync)", 1, "%.1f", [T_CL2(">=", 0.5)]),
        ("m_first_mib_s", "  first 64 MiB segment MiB/s", 1, "%.1f", []),
        ("m_last_mib_s", "  last 64 MiB segment MiB/s", 1, "%.1f", []),
        ("m_flat", "  last/first segment", 1, "%.3f", []),
        ("m_fsync_s", "  final fsync (s)", 1, "%.3f", []),
        ("m_dev_per_app", "  device bytes written per app byte (loop)", 1, "%.2f", []),
        ("m_wr_ios", "  device write requests (loop)", 1, "%.0f", []),
        ("m_rd_bytes", "  device MiB read (loop)", MIB, "%.1f", []),
        ("shoal_m_dev_read_bytes", "  shoal stat: dev_read_bytes (MiB)", MIB, "%.1f", []),
        ("shoal_m_queue_read_bytes", "  shoal stat: dev_queue_read_bytes (MiB, read from queued writes)", MIB, "%.1f", []),
        ("shoal_m_dev_writes", "  shoal stat: dev_writes", 1, "%.0f", []),
        ("shoal_m_commits", "  shoal stat: commits", 1, "%.0f", []),
        ("shoal_m_page_writes", "  shoal stat: page_writes (kernel's page writeback)", 1, "%.0f", []),
        ("shoal_m_wb_kicks", "  shoal stat: wb_kicks (writeback started before a resize)", 1, "%.0f", []),
        ("umount_wr_bytes", "device MiB written until unmounted (both)", MIB, "%.1f", []),
    ]),
    "wbcost": (MAIN_COLS, [
        ("wr_bytes", "device bytes written by the fsync of one 4 KiB block (loop)", 1, "%.0f", []),
        ("wr_ios", "device write requests (loop)", 1, "%.0f", []),
        ("flushes", "device flushes (loop)", 1, "%.0f", []),
        ("shoal_dev_writes", "shoal stat: dev_writes", 1, "%.0f",
         [("value", "shoal-cl2", "<=", 2), ("value", "shoal", "<=", 2)]),
        ("shoal_dev_write_bytes", "shoal stat: dev_write_bytes", 1, "%.0f", []),
        ("shoal_dev_flushes", "shoal stat: dev_flushes", 1, "%.0f", []),
        ("shoal_commits", "shoal stat: commits", 1, "%.0f", []),
        ("shoal_fast_commits", "shoal stat: fast_commits", 1, "%.0f", []),
        ("shoal_wb_visited", "shoal stat: wb_visited", 1, "%.0f", []),
        ("shoal_wb_written", "shoal stat: wb_written", 1, "%.0f", []),
    ]),
    "cache": (CACHE_COLS, [
        ("shoal_p2_gl_requests", "pass 2 (echo 1): gl_requests", 1, "%.0f",
         [("value", "shoal-cl", "==", 0)]),
        ("p2_dev_rd_bytes", "pass 2: device MiB read (loop)", MIB, "%.1f", []),
        ("shoal_p2_dev_read_bytes", "pass 2: shoal stat dev_read_bytes (MiB)", MIB, "%.1f", []),
        ("p2_mib_s", "pass 2: read MiB/s", 1, "%.1f", []),
        ("shoal_p2_gl_callbacks", "pass 2: gl_callbacks", 1, "%.0f", []),
        ("shoal_p2_gl_demotions", "pass 2: gl_demotions", 1, "%.0f", []),
        ("shoal_p1_gl_requests", "pass 1 (warm-up): gl_requests", 1, "%.0f", []),
        ("p1_mib_s", "pass 1: read MiB/s", 1, "%.1f", []),
        ("shoal_p3_gl_requests", "pass 3 (echo 3): gl_requests", 1, "%.0f", []),
        ("shoal_p3_gl_demotions", "pass 3: gl_demotions", 1, "%.0f", []),
        ("p3_dev_rd_bytes", "pass 3: device MiB read (loop)", MIB, "%.1f", []),
        ("p3_mib_s", "pass 3: read MiB/s", 1, "%.1f", []),
    ]),
    "pingpong": (PP_COLS, [
        ("ops_s", "appends per second", 1, "%.1f", []),
        ("lat_p50_us", "append latency p50 (us)", 1, "%.0f", []),
        ("lat_p99_us", "append latency p99 (us)", 1, "%.0f", []),
        ("lat_a_p50_us", "  p50 of the appends through node a (us)", 1, "%.0f", []),
        ("lat_b_p50_us", "  p50 of the appends through node b (us)", 1, "%.0f", []),
        ("flushes_per_append", "device flushes per append (loop)", 1, "%.2f", []),
        ("wr_bytes_per_append", "device bytes written per append (loop)", 1, "%.0f", []),
        ("shoal_gl_demotions", "shoal stat a+b: gl_demotions", 1, "%.0f", []),
        ("shoal_a_gl_demotions", "  of node a", 1, "%.0f", []),
        ("shoal_b_gl_demotions", "  of node b", 1, "%.0f", []),
        ("shoal_gl_demotions_per_append", "  per append", 1, "%.2f", []),
        ("shoal_gl_callbacks", "shoal stat a+b: gl_callbacks", 1, "%.0f", []),
        ("shoal_gl_callbacks_per_append", "  per append", 1, "%.2f", []),
        ("shoal_gl_requests_per_append", "shoal stat a+b: gl_requests per append", 1, "%.2f", []),
        ("shoal_gl_restarts_per_append", "shoal stat a+b: gl_restarts per append", 1, "%.2f", []),
        ("shoal_gl_rtt_us_per_append", "shoal stat a+b: lock wait per append (us)", 1, "%.0f", []),
        ("shoal_commits_per_append", "shoal stat a+b: commits per append", 1, "%.2f", []),
        ("shoal_dev_flushes_per_append", "shoal stat a+b: dev_flushes per append", 1, "%.2f", []),
    ]),
    "mmread": (MM_COLS, mm_rows()),
    "plock": (PL_COLS, [
        ("uncontended_us", "uncontended lock+unlock (us; fuse-null: 1 round trip)", 1, "%.1f",
         [("ratio", "shoal-cl", "fuse-null", "<=", 3.0)]),
        ("uncontended_best_us", "  best batch of 100 (us; what a pair costs on an idle machine)", 1,
         "%.1f", [("ratio", "shoal-cl", "fuse-null", "<=", 3.0)]),
        ("pp0_handoffs_s", "ping-pong (a) locks only: handoffs/s", 1, "%.0f",
         [("value", "shoal-cl", ">=", 2000)]),
        ("pp1_handoffs_s", "ping-pong (b) read+increment: handoffs/s", 1, "%.0f",
         [("value", "shoal-cl", ">=", 500)]),
        ("pp1_lost", "  (b) increments not seen", 1, "%.0f", [("value", "shoal-cl", "==", 0)]),
    ]),
}
FS_ORDER = ("ext4", "fuse-null", "shoal", "shoal-cl", "shoal-cl2", "shoal-cl-hold0") + tuple(
    "shoal-cl-n%d" % n for n in range(1, 65))


def fmt(spec_fmt, scale, v):
    return spec_fmt % (v / scale)


def verdict(op, bound, x):
    if op == "==":
        ok = x == bound
    else:
        ok = x <= bound if op == "<=" else x >= bound
    return "PASS" if ok else "MISS"


def cache_reached(vals, fs, r):
    """Pass 2 of the cache workload reached shoal in round r."""
    size = vals.get((fs, "file_bytes"), {}).get(r)
    got = vals.get((fs, "p2_dev_rd_bytes"), {}).get(r)
    if got is None:  # no loop device (--shoal-on-file)
        got = vals.get((fs, "shoal_p2_dev_read_bytes"), {}).get(r)
    return size is not None and got is not None and got >= size


def value_check(vals, workload, fs, metric, op, bound, rounds):
    per = vals.get((fs, metric), {})
    ok_rounds = [r for r in rounds if r in per and
                 (workload != "cache" or cache_reached(vals, fs, r))]
    if not ok_rounds:
        return "%s %g n/a%s" % (op, bound, " (pass 2 did not reach shoal)"
                                if per and workload == "cache" else "")
    bad = [r for r in ok_rounds if verdict(op, bound, per[r]) == "MISS"]
    return "%s %g %s" % (op, bound, "MISS (round %s)" % ",".join(map(str, bad))
                         if bad else "PASS")


def report_table(workload, vals, failed, rounds, fses):
    cols, rows = cluster_spec(fses) if workload == "cluster" else SPECS[workload]
    w_label = max(len(s[1]) for s in rows) + 1
    w_fs = max(len(f) for f in fses) + 1
    head = "%-*s %-*s" % (w_label, "metric", w_fs, "fs")
    head += "".join("%11s" % ("round %d" % r) for r in rounds)
    head += "%11s" % "median" + "".join("%11s" % c[0] for c in cols) + "  target"
    print(head)
    print("-" * len(head))
    for metric, label, scale, sfmt, targets in rows:
        # fuse-null has no device and no shoal counters: time rows only
        rfses = [fs for fs in fses
                 if not (metric.startswith("shoal_") and fs == "ext4")
                 and not (fs == "fuse-null" and
                          (metric.startswith("shoal_") or
                           any(k in metric for k in ("dev", "wr_", "flush", "umount"))))]
        if not any((fs, metric) in vals for fs in rfses):
            continue  # not measured in this run (older raw file, no loop device)
        med = {}
        for fs in rfses:
            per = vals.get((fs, metric), {})
            if per:
                med[fs] = statistics.median(per.values())
        for i, fs in enumerate(rfses):
            per = vals.get((fs, metric), {})
            cells = ""
            for r in rounds:
                if r in per:
                    cells += "%11s" % fmt(sfmt, scale, per[r])
                elif (fs, r) in failed:
                    cells += "%11s" % "FAIL"
                else:
                    cells += "%11s" % "-"
            line = "%-*s %-*s%s%11s" % (
                w_label, label if i == 0 else "", w_fs, fs, cells,
                fmt(sfmt, scale, med[fs]) if fs in med else "n/a")
            for _, pairs in cols:
                den = pairs.get(fs)
                if den is None or den not in rfses:
                    line += "%11s" % ""
                elif fs in med and den in med and med[den] != 0:
                    line += " %9.2fx" % (med[fs] / med[den])
                else:
                    line += "%11s" % "n/a"
            notes = []
            for t in targets:
                if t[0] == "ratio" and t[1] == fs and t[2] in rfses:
                    _, num, den, op, bound = t
                    name = "%s/%s %s %.1fx" % (num, den, op, bound)
                    if num in med and den in med and med[den] != 0:
                        notes.append("%s %s" % (name, verdict(op, bound, med[num] / med[den])))
                    else:
                        notes.append(name + " n/a")
                elif t[0] == "value" and t[1] == fs:
                    notes.append(value_check(vals, workload, fs, metric, t[2], t[3], rounds))
                elif t[0] == "median" and t[1] == fs:
                    name = "median %s %g" % (t[2], t[3])
                    notes.append("%s %s" % (name, verdict(t[2], t[3], med[fs]) if fs in med
                                            else "n/a"))
            if notes:
                line += "  " + "; ".join(notes)
            print(line.rstrip())


# --- lockd (begin) ------------------------------------------------------------
# The "lockd" workload compares variants of one client, not two filesystems:
# rows are (variant, metric), ratios are against the bare echo of the same run.
LOCKD_VARIANTS = ("echo", "echo_poll", "lockd", "lockd_nospin", "lockd_secret", "contend",
                  "contend_secret")
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
    ("lockd_secret", "lockd", "lat_p50_us", "median latency lockd_secret / lockd", ("<=", 1.2)),
    ("contend_secret", "contend", "handoffs_s", "handoffs/s contend_secret / contend", None),
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
            primary = "handoffs_s" if v.startswith("contend") else "lat_p50_us"
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
    meta, vals, fails, rounds, fses = [], {}, [], set(), None
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
            elif p[0] == "fses" and len(p) == 2:
                fses = p[1].split()
    failed = {(fs, r) for fs, r, _ in fails}
    rounds = sorted(rounds)
    if fses is None:  # raw files from before the "fses" line: what they hold
        seen = {fs for fs, _ in vals} | {fs for fs, _ in failed}
        fses = [fs for fs in FS_ORDER if fs in seen] or ["ext4", "shoal"]

    for k, v in meta:
        print("%s: %s" % (k, v))
    print()
    if workload == "lockd":
        report_lockd(vals, fails, rounds)
    else:
        report_table(workload, vals, failed, rounds, fses)
    if fails:
        print()
        print("FAILED RUNS:")
        for fs, r, text in fails:
            print("  %s round %d: %s" % (fs, r, text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
