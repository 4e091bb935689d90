"""The console summary of a complexity result (pure: strings)."""

from __future__ import annotations

from train.complexity.measure import ComplexityResult
from train.complexity.tables import rss_rows


def markdown(result: ComplexityResult) -> str:
    """The console summary: one row per model, predicted memory per batch size."""
    cfg = result.cfg
    gib = 2**30
    mem_txt = format_bytes(result.device_memory_bytes)
    batches = measured_batches_text(result.models)
    head = (
        f"Per-sample quantities measured at batch {batches} on {result.device} ({result.device_name}) and scaled linearly to each batch "
        f"({cfg.precision}, {cfg.image_size} px, {cfg.optimizer}). Predicted training memory = weights + gradients "
        f"+ optimizer state + activations (GiB; `over` = more than {mem_txt}, {result.device_memory_source})."
    )
    cols = [
        "model",
        "params (M)",
        "fwd GFLOP/sample",
        "train GFLOP/sample",
        "weights+grads+opt MiB",
        "activations MiB/sample",
        *[f"b{b} GiB" for b in cfg.batch_sizes],
        f"max batch ({mem_txt})",
    ]
    lines = [
        head,
        "",
        "| " + " | ".join(cols) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|",
    ]
    for c in result.models:
        cells = [
            c.model,
            f"{c.params / 1e6:.2f}",
            f"{c.fwd_flops_per_sample / 1e9:.2f}",
            f"{c.train_flops_per_sample / 1e9:.2f}",
            f"{(c.weight_bytes + c.grad_bytes + c.optimizer_state_bytes) / 2**20:.1f}",
            f"{c.activation_bytes_per_sample / 2**20:.2f}",
        ]
        for b in cfg.batch_sizes:
            mem = c.predicted_train_mem_bytes(b)
            cells.append(
                f"{mem / gib:.2f}" + ("" if mem <= result.device_memory_bytes else " over")
            )
        cells.append(str(c.max_batch_fit(result.device_memory_bytes)))
        lines.append("| " + " | ".join(cells) + " |")
    lines += _rss_lines(result)
    if result.rss_notes:
        lines += ["", "RSS check notes:", *(f"- {note}" for note in result.rss_notes)]
    return "\n".join(lines) + "\n"


def _rss_lines(result: ComplexityResult) -> list[str]:
    """The RSS check's table (none when nothing was checked)."""
    rss = rss_rows(result)
    if not rss:
        return []
    scope = (
        f"auto: {', '.join(result.rss_models)} only, the model with the fewest training FLOPs per sample; "
        "--validate-rss true checks every model"
        if result.cfg.validate_rss == "auto"
        else "every model"
    )
    lines = [
        "",
        f"RSS check (CPU, {scope}): growth of one real first training step in a fresh process vs the "
        "prediction (gradients + optimizer state + activations; the weights exist before the step).",
        "",
        "| model | batch | measured MiB | predicted MiB | error |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rss:
        lines.append(
            f"| {r['model']} | {r['batch_size']} | {r['measured_growth_bytes'] / 2**20:.1f} | "
            f"{r['predicted_growth_bytes'] / 2**20:.1f} | {r['rel_error']:+.1%} |"
        )
    return lines


def measured_batches_text(models) -> str:
    """'1 and 2', or '1 and 2 (2 and 4 for resnet18)' when some models had to be measured elsewhere."""

    def pair(c):
        return " and ".join(map(str, c.measured_batches))

    groups: dict[str, list[str]] = {}
    for c in models:
        groups.setdefault(pair(c), []).append(c.model)
    if not groups:
        return "-"
    common = max(groups, key=lambda k: len(groups[k]))
    others = [f"{k} for {', '.join(v)}" for k, v in groups.items() if k != common]
    return common + (f" ({'; '.join(others)})" if others else "")


def summary_line(result: ComplexityResult) -> str:
    fits = ", ".join(
        f"{c.model} {c.max_batch_fit(result.device_memory_bytes)}" for c in result.models
    )
    line = (
        f"measured {len(result.models)} model(s) in {result.wall_s:.1f} s on {result.device}; "
        f"largest batch predicted to fit {format_bytes(result.device_memory_bytes)}: {fits}"
    )
    rss = rss_rows(result)
    if rss:
        worst = max(rss, key=lambda r: abs(r["rel_error"]))
        line += f"; RSS check worst error {worst['rel_error']:+.1%} ({worst['model']} b{worst['batch_size']})"
    if result.rss_notes:
        line += f"; {len(result.rss_notes)} RSS check note(s) above"
    return line


def format_bytes(n: float) -> str:
    """Human-readable binary size for display only (values are stored raw)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"
