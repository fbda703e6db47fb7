"""The ``[processor]`` settings: defaults, the example file, and typos refused."""

from __future__ import annotations

import pytest

from gputriage.process import processor_options
from gputriage.settings import SettingsError, load_settings
from tests.paths import EXAMPLES

EXAMPLE = EXAMPLES / "gputriage.toml"


def test_the_example_settings_are_valid_and_match_the_defaults() -> None:
    from streams.app.worker import ProcessorOptions  # noqa: PLC0415

    assert processor_options(load_settings(str(EXAMPLE), environ={})) == ProcessorOptions()


def test_overrides_and_environment_apply() -> None:
    settings = load_settings(None, environ={"GPUTRIAGE_PROCESSOR__SNAPSHOT_SECONDS": "2.5"})
    options = processor_options(settings, app_id="other", metrics_port=None)
    assert (options.snapshot_seconds, options.app_id, options.metrics_port) == (2.5, "other", 9464)


def test_a_typo_is_an_error_naming_the_key() -> None:
    settings = load_settings(None, environ={"GPUTRIAGE_PROCESSOR__TICK_SECONDZ": "1"})
    with pytest.raises(SettingsError, match="tick_secondz"):
        processor_options(settings)
