"""The benchmarks' plots, drawn with matplotlib (Debian's python3-matplotlib, which
tools/deps.sh installs). Each plot is written as an SVG and as a PNG beside it
(same name, .png). The callers turn their results into the lines drawn here."""

import textwrap
from pathlib import Path

# Figure, not pyplot: no global figure state and no display backend to choose.
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

PNG_DPI = 110
# Titles wrap at this many characters per panel width.
PANEL_TITLE_WIDTH = 44


def save(fig, svg_path):
    """Writes `fig` to `svg_path` and to the PNG beside it; returns both paths."""
    svg_path = Path(svg_path)
    png_path = svg_path.with_suffix(".png")
    fig.savefig(svg_path, format="svg")
    fig.savefig(png_path, format="png", dpi=PNG_DPI)
    return [svg_path, png_path]


def size_chart(svg_path, title, panels, size_label):
    """Panels side by side, each a line per series against a size (log2 x axis, a
    tick at each size measured, named by `size_label`). A panel is {title, xlabel,
    ylabel, ylog, series: [{label, color, dash, points: [(size, value)]}]}; points
    without a value (or not positive on a log axis) are left out."""
    fig = Figure(figsize=(4.6 * len(panels), 4.4), layout="constrained")
    fig.suptitle(textwrap.fill(title, PANEL_TITLE_WIDTH * len(panels)), fontweight="bold")
    for ax, panel in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        ylog = panel.get("ylog")
        ax.set_title(textwrap.fill(panel["title"], PANEL_TITLE_WIDTH), fontsize="medium")
        ax.set_xscale("log", base=2)
        if ylog:
            ax.set_yscale("log")
        sizes, values = set(), []
        for s in panel["series"]:
            points = sorted((x, y) for x, y in s["points"]
                            if x is not None and y is not None and x > 0 and (y > 0 or not ylog))
            sizes.update(x for x, _ in points)
            values += [y for _, y in points]
            ax.plot([x for x, _ in points], [y for _, y in points], color=s["color"], marker="o", markersize=3,
                    linestyle="--" if s.get("dash") else "-", label=s["label"] + ("" if points else " (no data)"))
        if sizes:
            ax.xaxis.set_major_locator(FixedLocator(sorted(sizes)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: size_label(int(x))))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.tick_params(axis="x", labelrotation=30)
        else:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#888888")
        if ylog and values:
            # Numbers, not powers of ten; within about a decade the ticks between
            # powers of ten are the only ones, so they are labelled too.
            ax.yaxis.set_major_formatter(FuncFormatter(_plain_number))
            if max(values) / min(values) < 30:
                ax.yaxis.set_minor_formatter(FuncFormatter(_plain_number))
        if not ylog:
            ax.set_ylim(bottom=0)
        ax.set_xlabel(panel["xlabel"])
        ax.set_ylabel(panel["ylabel"])
        ax.grid(True, which="major", color="#dddddd")
        ax.legend(fontsize="small")
    return save(fig, svg_path)


def timeline(svg_path, title, columns, legend):
    """A column of panels over time per run, stacked panels sharing the time axis.
    `columns`: [(name, [panel])] with a panel {ylabel, lines: [{x, y, color}]} (x
    in seconds); `legend`: [(label, color)] below the plot."""
    if not columns:
        columns = [("no data", [])]
    rows = max(1, max(len(panels) for _, panels in columns))
    fig = Figure(figsize=(4.3 * len(columns), 2.6 * rows + 1.2), layout="constrained")
    fig.suptitle(textwrap.fill(title, PANEL_TITLE_WIDTH * len(columns)), fontweight="bold")
    # The legend gets a strip of its own, which the layout keeps clear of the panels.
    plots_area, legend_area = fig.subfigures(2, 1, height_ratios=[2.6 * rows, 0.4])
    axes = plots_area.subplots(rows, len(columns), squeeze=False, sharex="col")
    for col, (name, panels) in enumerate(columns):
        for row, panel in enumerate(panels):
            ax = axes[row][col]
            ax.set_title(f"{name}: {panel['ylabel']}", fontsize="medium")
            for line in panel["lines"]:
                ax.plot(line["x"], line["y"], color=line["color"], linewidth=1.2)
            ax.set_ylim(bottom=0)
            ax.grid(True, color="#eeeeee")
        axes[max(0, len(panels) - 1)][col].set_xlabel("seconds")
    if legend:
        legend_area.legend(handles=[_swatch(label, color) for label, color in legend], loc="center",
                           ncol=len(legend), fontsize="small", frameon=False)
    return save(fig, svg_path)


def tradeoff(svg_path, title, points, target, xlabel, ylabel, legend):
    """Named points in a plane with the region that meets both targets shaded:
    `points` [(name, x, y, color)], `target` (x at least, y at most), `legend`
    [(label, color)]. Labels of close points are moved apart, with a line back."""
    fig = Figure(figsize=(7.2, 4.8), layout="constrained")
    fig.suptitle(textwrap.fill(title, 2 * PANEL_TITLE_WIDTH), fontweight="bold", fontsize="medium")
    ax = fig.subplots()
    x_min, y_max = target
    xmax = max([1.1] + [x * 1.1 for _, x, _, _ in points])
    ymax = max([2 * y_max] + [y * 1.1 for _, _, y, _ in points])
    ax.set_xlim(0, xmax)
    ax.set_ylim(0, ymax)
    ax.axvspan(x_min, xmax, ymax=y_max / ymax, color="#dff0d8", zorder=0)
    ax.text((x_min + xmax) / 2, y_max * 0.05, "targets", ha="center", color="#3c763d")
    for _, x, y, color in points:
        ax.plot([x], [y], "o", color=color, markersize=6)
    for (name, x, y, color), offset in zip(points, _label_offsets(ax, points)):
        ax.annotate(name, (x, y), xytext=offset, textcoords="offset points", color=color, fontsize="small",
                    va="center", arrowprops=None if offset == _LABEL_OFFSETS[0] else
                    {"arrowstyle": "-", "color": color, "linewidth": 0.8})
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, color="#eeeeee")
    ax.legend(handles=[_swatch(label, color, marker="o") for label, color in legend], fontsize="small",
              loc="upper left")
    return save(fig, svg_path)


# Where a point's label goes (points right of and above or below the point), in
# the order tried: the first that overlaps no label placed before.
_LABEL_OFFSETS = [(7, 0), (7, -12), (7, 12), (7, -24), (7, 24), (7, -36), (7, 36)]


def _label_offsets(ax, points):
    """An offset from _LABEL_OFFSETS per point (in points, 1/72 in), so that labels
    overlap neither each other nor the points."""
    at = [ax.transData.transform((x, y)) * 72 / ax.figure.dpi for _, x, y, _ in points]
    placed = [(px - 4, py - 4, px + 4, py + 4) for px, py in at]
    offsets = []
    for (name, _, _, _), (px, py) in zip(points, at):
        width = 5.5 * len(name)
        for dx, dy in _LABEL_OFFSETS:
            box = (px + dx, py + dy - 5, px + dx + width, py + dy + 5)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                break
        placed.append(box)
        offsets.append((dx, dy))
    return offsets


def _plain_number(value, _position):
    return f"{value:g}"


def _swatch(label, color, marker=None):
    """A legend entry of `color` for `label`."""
    return Line2D([], [], color=color, marker=marker, linestyle="none" if marker else "-", label=label)
