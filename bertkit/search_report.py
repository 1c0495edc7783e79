"""report.md of a `bertkit search`: the trials, Optuna's optimisation history and parameter importance plots, and the
confirmation over seeds of the best setting against the recipe's own."""

from __future__ import annotations

from pathlib import Path

from .plots import plt, save_figure
from .utils import atomic_path


def trials_table(study) -> list[dict]:
    return [{"number": t.number, "state": t.state.name.lower(), "value": t.value, "params": t.params,
             "folder": t.user_attrs.get("folder"),
             "seconds": round(t.duration.total_seconds(), 1) if t.duration is not None else None}
            for t in study.trials]


def plots(out: Path, study) -> list[str]:
    """The optimisation history and, with at least two finished trials that differ, the parameters' importance
    (Optuna's matplotlib figures)."""
    import warnings

    from optuna.exceptions import ExperimentalWarning
    from optuna.visualization import matplotlib as ov

    plt()  # the Agg backend
    images = []
    for name, draw in (("search_history.png", ov.plot_optimization_history),
                       ("search_importance.png", ov.plot_param_importances)):
        try:
            with warnings.catch_warnings():  # Optuna calls these figures experimental: no use to a user
                warnings.simplefilter("ignore", ExperimentalWarning)
                # PED-ANOVA on a few trials: "importances will be equal", as the figure then shows
                warnings.filterwarnings("ignore", "Target and region quantiles", UserWarning)
                ax = draw(study)
        except (ValueError, RuntimeError, ZeroDivisionError):  # too few finished trials for importance
            continue
        images.append(save_figure(ax.figure, out / name))
    return images


def write_search_report(out: Path, study, summary: dict) -> Path:
    metric = summary["main_metric"]
    keys = list(summary["space"])
    lines = [f"# Search: {summary['name']} ({summary['recipe']})", "",
             f"{len(summary['trials'])} trials, {summary['direction']} {metric}; the study is `study.db` (Optuna, "
             "SQLite): the same command goes on with it.", "",
             "| trial | state | " + " | ".join(keys) + f" | {metric} | seconds | run folder |",
             "|---|---|" + "---|" * len(keys) + "---|---|---|"]
    for t in summary["trials"]:
        value = "" if t["value"] is None else f"{t['value']:.4f}"
        lines.append(f"| {t['number']} | {t['state']} | " + " | ".join(str(t["params"].get(k, "")) for k in keys)
                     + f" | {value} | {t['seconds'] or ''} | {t['folder'] or ''} |")
    best, conf = summary["best"], summary["confirmation"]
    lines += ["", f"Best trial: {best['number']}, {metric} {best['value']:.4f} with {best['params']}.", ""]
    if conf:
        lines += [f"## Confirmation over seeds {', '.join(map(str, conf['best']['seeds']))}", "",
                  f"| setting | {metric} mean ± std | per seed |", "|---|---|---|"]
        for name in ("best", "default"):
            c = conf[name]
            lines.append(f"| {name} | {c['mean']:.4f} ± {c['std']:.4f} | "
                         f"{', '.join(f'{v:.4f}' for v in c['values'])} |")
        lines += ["", f"Verdict: {conf['verdict']}.", ""]
    else:
        lines += ["No confirmation over seeds (--confirm-seeds 0): the best trial's value is one seed's.", ""]
    lines += ["## Plots", ""]
    lines += [f"![{image}]({image})" for image in plots(out, study)]
    with atomic_path(out / "report.md") as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    return out / "report.md"
