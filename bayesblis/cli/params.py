"""Option types shared by the subcommands."""

from __future__ import annotations

import math

import click


class FiniteFloatRange(click.FloatRange):
    """`click.FloatRange` that also refuses NaN (which passes its comparisons) and infinity."""

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{rv} is not a finite number.", param, ctx)
        return rv


PROBABILITY = FiniteFloatRange(0, 1, min_open=True, max_open=True)
"""A probability strictly between 0 and 1."""
