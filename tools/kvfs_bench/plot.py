"""--plot: throughput per chunk size (python3-matplotlib)."""
from .common import MiB, GiB, fmt_size


def plot(path, rows, fio_rows, cfg, machine):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lm = [r for r in rows if r["workload"] == "lmcache"]
    batches = sorted({r["batches"] for r in lm}) or [1]
    ops = ["store", "load"]
    fig, axes = plt.subplots(len(ops), len(batches), figsize=(5.2 * len(batches), 7.5),
                             squeeze=False)
    sizes = sorted({r["size"] for r in lm})
    colors = {"kvfs": "tab:blue", "ext4": "tab:orange"}
    for i, op in enumerate(ops):
        for j, m in enumerate(batches):
            ax = axes[i][j]
            for fs in ("kvfs", "ext4"):
                for mode, style in (("buffered", "-"), ("direct", "--")):
                    pts = [(r["size"], r[fs]) for r in lm if r["op"] == op and r["batches"] == m
                           and r["mode"] == mode and r[fs]]
                    if not pts:
                        continue
                    xs = [p[0] / MiB for p in pts]
                    ys = [p[1]["median"] for p in pts]
                    err = [[p[1]["median"] - p[1]["min"] for p in pts],
                           [p[1]["max"] - p[1]["median"] for p in pts]]
                    ax.errorbar(xs, ys, yerr=err, color=colors[fs], linestyle=style, marker="o",
                                capsize=3, label=f"{fs} {'O_DIRECT' if mode == 'direct' else mode}")
            lim = [(r["size"], r["limit"]) for r in lm if r["op"] == op and r["batches"] == m
                   and r["mode"] == "buffered" and r["limit"]]
            if lim:
                ax.plot([s / MiB for s, _ in lim], [v for _, v in lim], color="black",
                        linestyle=":", marker="s", label="device limit (fio best qd)")
            ax.set_xscale("log")
            ax.set_xticks([s / MiB for s in sizes])
            ax.set_xticklabels([fmt_size(s) for s in sizes])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            ax.set_xlabel("chunk size")
            ax.set_ylabel("MB/s")
            ax.set_title(f"{op}: {cfg['keys']} keys/batch, {m} batch{'es' if m > 1 else ''} "
                         "in flight", fontsize=10)
            ax.grid(True, alpha=0.3)
    mem = machine.get("mem_bytes", 0) / GiB
    fig.suptitle(f"kvfs-bench: LMCache-style loop, median of {cfg['rounds']} round(s), "
                 f"min-max bars\n{machine.get('cpus')} cores, {mem:.0f} GiB RAM, "
                 f"kernel {machine.get('kernel')}", fontsize=10)
    handles, labels = {}, []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    fig.legend([handles[lab] for lab in labels], labels, loc="lower center",
               ncol=min(5, len(labels)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
