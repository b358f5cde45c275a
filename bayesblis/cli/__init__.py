"""The `bayesblis` command line. Each subcommand lives in its own module here,
exposing a click command named `command`; modules are imported only when their
subcommand runs, so `bayesblis --help` stays fast."""

from __future__ import annotations

import importlib
import sys
import warnings

import click

from bayesblis import __version__
from bayesblis.errors import BayesBlisError, InputWarning

SUBCOMMANDS = {
    "ingest": ("ingest", "Read traces into a dataset folder and print a summary."),
    "inspect": ("inspect", "Describe a dataset, model config, GPU or posterior file."),
    "fit": ("fit", "Fit the hierarchical model to a dataset; write POSTERIOR.nc."),
    "coefficients": ("coefficients", "Alpha/beta coefficients with intervals for a configuration."),
    "calibrate": ("calibrate", "Posterior for a new deployment from a few minutes of its traces."),
    "simulate": ("simulate", "Simulate a scenario with posterior draws; write RESULT.json."),
    "demo": ("demo", "Synthetic fleet -> fit -> coefficients -> simulation, end to end."),
    "validate": ("validate", "Leave-one-out validation against measured runs."),
    "plan": ("plan", "Capacity plan under SLOs with a stated probability."),
    "report": ("report", "Self-contained HTML report of a posterior."),
    "blis-run": ("blis_run", "Run BLIS once per coefficient file; summarise like simulate."),
    "check": ("check", "Posterior-predictive checks per configuration."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return [name for name, (mod, _) in SUBCOMMANDS.items() if _module_exists(mod)]

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module_name, _ = SUBCOMMANDS[name]
        try:
            module = importlib.import_module(f"bayesblis.cli.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"bayesblis.cli.{module_name}":
                return None
            raise
        return module.command

    def format_commands(self, ctx, formatter):
        rows = [(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _module_exists(module_name: str) -> bool:
    return importlib.util.find_spec(f"bayesblis.cli.{module_name}") is not None


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="bayesblis")
def cli():
    """bayesblis: learn BLIS latency coefficients from vLLM traces, with uncertainty."""


def main(argv=None):
    """Entry point: user errors print one clear line and exit 2, never a traceback;
    input warnings print as one `warning:` line."""
    with warnings.catch_warnings():
        default_show = warnings.showwarning

        def show(message, category, *args, **kwargs):
            if issubclass(category, InputWarning):
                click.echo(f"warning: {message}", err=True)
            else:
                default_show(message, category, *args, **kwargs)

        warnings.showwarning = show
        _run(argv)


def _run(argv):
    try:
        cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except BayesBlisError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
