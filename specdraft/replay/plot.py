"""``specdraft replay``'s chart: tokens per pass and estimated speedups, per workload and method."""

from __future__ import annotations


def plot_replay(out: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    workloads = list(out["results"])
    methods = out["settings"]["methods"]
    bs = out["settings"]["batches"]
    panels = [("tokens_per_pass", "output tokens per target pass")] + [
        (b, f"estimated speedup at batch {b} ({out['settings']['cost_model']} cost model)")
        for b in (bs[0], bs[-1])]
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(9, 1.3 * len(workloads)), 4 * len(panels)))
    width = 0.8 / max(1, len(methods))
    for ax, (key, title) in zip(axes, panels):
        for j, m in enumerate(methods):
            vals = []
            for w in workloads:
                a = out["results"][w].get(m)
                vals.append(0 if a is None else a[key] if isinstance(key, str)
                            else a["batch"][str(key)]["est_speedup"])
            ax.bar([i + j * width for i in range(len(workloads))], vals, width, label=m)
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))])
        ax.set_xticklabels(workloads, rotation=30, ha="right")
        ax.set_title(title, fontsize=10)
        ax.axhline(1.0, color="grey", lw=0.8)
    axes[0].legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
