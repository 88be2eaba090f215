"""Every `flawforge run <pipeline>` command against its pipeline's parameter model: an option for each parameter a
user sets, with the parameter's default and description, no option that sets nothing, and the options every job
command shares."""
from __future__ import annotations

import typer

from flawforge.cli.main import app
from flawforge.cli.math_errors import caps_of
from flawforge.cli.run import comma_list
from flawforge.jobs.pipeline import PIPELINE_MODULES, pipeline_named

COMMON = {"out", "stack", "token", "cancel_on_exit", "keep_blobs"}
# Options that set no pipeline parameter: where the job runs (embedded: its blob store, its model).
NOT_PARAMETERS = {"debug-conversations": {"state"}, "pressure-study": {"model"}}
# Parameters no user sets: the tests' way to stop a run halfway.
NOT_OPTIONS = {"pressure-study": {"stop_after_batches"}}
# How the command line writes a parameter that is not one plain value.
AS_WRITTEN = {("math-errors", "caps"): caps_of}


def run_commands() -> dict:
    root = typer.main.get_command(app)
    context = typer.Context(root)
    group = root.get_command(context, "run")
    return {name: group.get_command(context, name) for name in group.list_commands(context)}


def as_parameter(pipeline: str, field: str, default, expected):
    """An option's default as the parameter it becomes (a list is written comma-separated)."""
    if (pipeline, field) in AS_WRITTEN:
        return AS_WRITTEN[pipeline, field](default)
    return comma_list(default) if isinstance(expected, list) else default


def test_every_pipeline_has_a_run_command():
    assert list(run_commands()) == list(PIPELINE_MODULES)


def test_each_run_command_sets_its_pipelines_parameters_with_their_defaults_and_descriptions():
    for name, command in run_commands().items():
        model = pipeline_named(name).params
        options = {option.name: option for option in command.params}
        fields = model.model_fields
        missing = set(fields) - set(options) - NOT_OPTIONS.get(name, set())
        assert not missing, f"run {name}: no option for {sorted(missing)}"
        unknown = set(options) - set(fields) - COMMON - NOT_PARAMETERS.get(name, set())
        assert not unknown, f"run {name}: {sorted(unknown)} set no parameter"
        for field in set(fields) & set(options):
            option, info = options[field], fields[field]
            assert info.description and option.help.startswith(info.description), (name, field)
            assert option.required == info.is_required(), (name, field)
            if not info.is_required():
                expected = info.get_default(call_default_factory=True)
                if hasattr(expected, "model_dump"):
                    expected = expected.model_dump()
                assert as_parameter(name, field, option.default, expected) == expected, (name, field)


def test_each_job_command_takes_the_common_options_declared_once():
    declared = None
    for name, command in run_commands().items():
        options = {option.name: option for option in command.params if option.name in COMMON}
        assert set(options) == COMMON, name
        shown = {key: (option.opts, option.secondary_opts, option.help, option.default)
                 for key, option in options.items()}
        assert declared in (None, shown), name
        declared = shown
