"""The `--discrepancy` option shared by `simulate` and `plan` (not a subcommand)."""

from __future__ import annotations

from pathlib import Path

import click

HELP = ("Simulator discrepancy the intervals (simulate) and SLO probabilities (plan) allow for: "
        "'default' (measured on the 16 shared H100 runs held out by experiment), 'none' "
        "(posterior draws only), or a `bayesblis validate` REPORT.json.")


def discrepancy_option(func):
    return click.option("--discrepancy", "discrepancy", default="default", show_default=True,
                        metavar="default|none|REPORT.json", help=HELP)(func)


def resolve_discrepancy(value: str):
    """A `Discrepancy` for the option's value, or None for 'none'."""
    from bayesblis.discrepancy import load_discrepancy

    if value == "none":
        return None
    if value == "default":
        return load_discrepancy()
    if not Path(value).is_file():
        raise click.BadParameter(f"{value!r} is not a file (expected default, none or a "
                                 f"validate REPORT.json)", param_hint="'--discrepancy'")
    return load_discrepancy(value)
