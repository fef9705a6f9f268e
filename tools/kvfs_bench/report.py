"""The summary: medians, ratios, CPU per GiB, and the text tables."""
import os
import statistics

from .common import GiB, fmt_size

# Units of rows where less is better: their ratios are inverted, so that
# above 1 always means kvfs faster.
TIME_UNITS = ("s", "ms")


def summarize(samples, cfg):
    """Rows of the table: medians, min and max over rounds per filesystem,
    and the ratios (kvfs speed / ext4 speed, kvfs speed / device limit)."""
    def stats(vals):
        vals = [v for v in vals if v is not None]
        if not vals:
            return None
        return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                "n": len(vals)}

    fio = {}
    for s in samples:
        if s["workload"] == "fio":
            fio.setdefault((s["op"], s["size"], s["depth"]), []).append(s["value"])
    fio_rows = []
    limit = {}
    for (op, size, depth), vals in sorted(fio.items()):
        st = stats(vals)
        fio_rows.append({"op": op, "size": size, "depth": depth, **st})
        if st["median"] > limit.get((op, size), (0, 0))[0]:
            limit[(op, size)] = (st["median"], depth)

    groups = {}
    order = []
    for s in samples:
        # The eviction workload has its own table (workloads/eviction.py).
        if s["workload"] in ("fio", "evict") or s.get("available") is False:
            continue
        key = (s["workload"], s["op"], s["mode"], s["size"], s["batches"], s.get("keys"))
        if key not in groups:
            groups[key] = {"unit": s["unit"], "keys": s.get("keys")}
            order.append(key)
        groups[key].setdefault(s["fs"], []).append(s["value"])
        if s.get("cpu_client_s") is not None and s.get("bytes"):
            acc = groups[key].setdefault("cpu", {}).setdefault(
                s["fs"], {"daemon": 0.0, "client": 0.0, "system": 0.0, "bytes": 0,
                          "daemon_known": True})
            acc["client"] += s["cpu_client_s"]
            acc["system"] += s["cpu_system_s"]
            acc["bytes"] += s["bytes"]
            if s.get("cpu_daemon_s") is None:
                acc["daemon_known"] = False
            else:
                acc["daemon"] += s["cpu_daemon_s"]

    rows = []
    for key in order:
        workload, op, mode, size, m, _ = key
        g = groups[key]
        row = {"workload": workload, "op": op, "mode": mode, "size": size, "batches": m,
               "keys": g["keys"], "unit": g["unit"],
               "kvfs": stats(g.get("kvfs", [])), "ext4": stats(g.get("ext4", [])),
               "limit": None, "limit_depth": None, "kvfs_vs_ext4": None, "kvfs_vs_limit": None}
        kv, ex = row["kvfs"], row["ext4"]
        if workload in ("lmcache", "batch"):
            lim = limit.get(("write" if op == "store" else "read", size))
            if lim:
                row["limit"], row["limit_depth"] = lim
        elif workload in ("wholeseq", "vllm") and row["unit"] == "MB/s":
            # fio at this size when it ran at it (vllm), else fio's best at
            # any size: a whole object is one long sequential stream.
            rw = "write" if op.startswith("store") else "read"
            best = max((v for (o, _), v in limit.items() if o == rw), default=None)
            lim = limit.get((rw, size)) if workload == "vllm" else None
            if lim or best:
                row["limit"], row["limit_depth"] = lim or best
        elif workload == "restore" and op in ("idle", "busy"):
            lim = limit.get(("read", size))
            if lim:
                # The time the device needs for the restore's bytes at its best.
                row["limit"] = g["keys"] * size / (lim[0] * 1e6)
                row["limit_depth"] = lim[1]
        if kv and ex and kv["median"] and ex["median"] and row["unit"] != "x":
            r = kv["median"] / ex["median"]
            row["kvfs_vs_ext4"] = 1 / r if row["unit"] in TIME_UNITS else r
        if kv and row["limit"] and kv["median"]:
            r = kv["median"] / row["limit"]
            row["kvfs_vs_limit"] = 1 / r if row["unit"] in TIME_UNITS else r
        # CPU seconds per GiB moved: totals over every sample of the row
        # (one sample lasts milliseconds; /proc/PID/stat counts 10 ms ticks).
        for fs, acc in g.get("cpu", {}).items():
            gib = acc["bytes"] / GiB
            row[f"cpu_{fs}"] = {
                "daemon": acc["daemon"] / gib if acc["daemon_known"] and fs == "kvfs" else None,
                "client": acc["client"] / gib, "system": acc["system"] / gib,
                "bytes": acc["bytes"]}
        rows.append(row)
    for s in (s for s in samples if s.get("available") is False and s["workload"] == "batch"):
        rows.append({"workload": "batch", "op": "batch", "mode": "-", "size": 0, "batches": 1,
                     "keys": None, "unit": "-", "kvfs": None, "ext4": None, "limit": None,
                     "limit_depth": None, "kvfs_vs_ext4": None, "kvfs_vs_limit": None,
                     "note": "not available: " + s["reason"]})
    return fio_rows, rows


def fmt_value(v, unit):
    if v is None:
        return "-"
    if unit == "s":
        return f"{v:.3f}"
    if unit == "ms":
        return f"{v:.1f}"
    if unit == "x":
        return f"{v:.2f}"
    return f"{v:.0f}"


def fmt_cell(st, unit):
    if not st:
        return "-"
    if st["n"] == 1:
        return fmt_value(st["median"], unit)
    return (f"{fmt_value(st['median'], unit)} "
            f"[{fmt_value(st['min'], unit)}-{fmt_value(st['max'], unit)}]")


def render_table(cols, rows):
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) if rows else len(str(c))
              for i, c in enumerate(cols)]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(cols, widths)).rstrip(),
           "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip())
    return "\n".join(out)


OP_LABELS = {("lookup", "hit"): "stat existing (cold)", ("lookup", "miss"): "stat missing (cold)",
             ("restore", "idle"): "load, idle volume",
             ("restore", "busy"): "load, store burst", ("restore", "busy/idle"): "slowdown busy/idle",
             ("wholeseq", "store"): "store + fsync", ("wholeseq", "load"): "load (cold)",
             ("wholeseq", "load p50"): "load p50 per object (cold)",
             ("wholeseq", "load p95"): "load p95 per object (cold)",
             ("wholeseq", "reload"): "reload (fadvise only)", ("vllm", "load"): "load (cold)",
             ("vllm", "load during stores"): "load (cold) during stores"}


def fmt_cpu(cpu, with_daemon):
    """'daemon/client/system' (kvfs) or 'client/system' CPU s/GiB."""
    if not cpu:
        return "-"
    vals = ([cpu["daemon"]] if with_daemon else []) + [cpu["client"], cpu["system"]]
    return "/".join("-" if v is None else f"{v:.2f}" for v in vals)


def device_note(cfg):
    """What the device of the run stands for (--ram), or None."""
    if not cfg.get("ram"):
        return None
    return (f"Device: RAM, a tmpfs of {fmt_size(cfg['ram_bytes'])} mounted for this run at "
            f"{os.path.join(cfg['dir'], 'ram')} (kvfs's image, ext4's loop image and fio's file "
            "on it). It stands for a device faster than the software: what is measured is the "
            "software's own path.\nIt does not model DMA: every byte the device moves costs a "
            "CPU copy here, for ext4 once and for kvfs once more (into its cache, then to the "
            "caller); an NVMe drive copies by DMA, so the CPU columns include copies a drive "
            "would not cost.")


def format_report(fio_rows, rows, cfg):
    parts = []
    note = device_note(cfg)
    if note:
        parts.append(note)
    if fio_rows:
        depths = sorted({r["depth"] for r in fio_rows})
        table = []
        for op in ("read", "write"):
            for size in sorted({r["size"] for r in fio_rows}):
                cells = {r["depth"]: r for r in fio_rows if r["op"] == op and r["size"] == size}
                if not cells:
                    continue
                best = max(cells.values(), key=lambda r: r["median"])
                table.append([op, fmt_size(size)]
                             + [fmt_cell(cells.get(d), "MB/s") for d in depths]
                             + [f"{best['median']:.0f} (qd{best['depth']})"])
        parts.append("Device limit: fio, io_uring, O_DIRECT, MB/s, median [min-max]\n"
                     + render_table(["op", "bs"] + [f"qd{d}" for d in depths] + ["best"], table))
    if rows:
        table, notes = [], []
        for r in rows:
            if "note" in r:
                notes.append(f"{r['workload']:<9} {r['note']}")
                continue
            if r["workload"] == "batch" and r["size"] == 0:
                size = f"{r['keys']} names"
            elif r["workload"] in ("lmcache", "batch", "wholeseq", "vllm"):
                size = f"{fmt_size(r['size'])} x{r['keys']}"
            elif r["workload"] == "restore":
                size = f"{r['keys']}x{fmt_size(r['size'])}"
            else:
                size = f"{r['keys']} names"
            unit = r["unit"]
            table.append([r["workload"], OP_LABELS.get((r["workload"], r["op"]), r["op"]),
                          r["mode"], size, str(r["batches"]), unit,
                          fmt_cell(r["kvfs"], unit), fmt_cell(r["ext4"], unit),
                          fmt_value(r["limit"], unit),
                          "-" if r["kvfs_vs_ext4"] is None else f"{r['kvfs_vs_ext4']:.2f}",
                          "-" if r["kvfs_vs_limit"] is None else f"{r['kvfs_vs_limit']:.2f}",
                          fmt_cpu(r.get("cpu_kvfs"), True), fmt_cpu(r.get("cpu_ext4"), False)])
        parts.append(f"Workloads: median [min-max] over {cfg['rounds']} round(s); ratios are "
                     "kvfs speed / other speed (above 1: kvfs faster)\n"
                     "CPU s/GiB: CPU seconds per GiB moved, totals over the row's samples, "
                     "during the timed phase only: dmn the kvfs daemon's user+system "
                     "(/proc/PID/stat), cli the workload process's (getrusage), sys SYSTEM-WIDE "
                     "busy time of all CPUs (/proc/stat: every process and kernel thread, "
                     "other load on the machine included; for ext4 the only place its "
                     "writeback and loop-device work shows)\n"
                     + render_table(["workload", "op", "mode", "chunk", "M", "unit", "kvfs",
                                     "ext4", "limit", "kvfs/ext4", "kvfs/limit",
                                     "kvfs s/GiB dmn/cli/sys", "ext4 s/GiB cli/sys"], table)
                     + "".join("\n" + n for n in notes))
    return "\n\n".join(parts)
