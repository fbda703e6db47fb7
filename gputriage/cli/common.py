"""What every ``gputriage`` command shares: options, the time type, files, settings.

One module per verb group: :mod:`gputriage.cli.replay`, ``tail``, ``process``,
``demo``, ``schemas``, ``ingest`` and ``connect``; :mod:`gputriage.cli` holds only
the root group and the error policy (:func:`gputriage.cli.run`). Each command
builds ONE options value from its arguments and the settings and calls ONE
``run_*`` function that returns the exit status.
Heavy imports (aiokafka, kubernetes-asyncio, aiohttp, pynvml) stay inside the
command functions, so ``gputriage --help`` stays fast.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click
import msgspec

from connectors.files import FileReader
from connectors.kafka.config import KafkaConfigError, check_brokers, client_kwargs
from connectors.times import parse_time
from gputriage.settings import Settings, load_settings

if TYPE_CHECKING:
    from connectors.k8s.slim import SlimConfig

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT: Final[dict[str, Any]] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def open_all(paths: Sequence[str]) -> list[FileReader]:
    """Open every path (``-`` is stdin), or none: a missing file is a usage error."""
    sources: list[FileReader] = []
    try:
        for path in paths:
            sources.append(FileReader(path))
    except OSError as exc:
        for source in sources:
            source.close()
        raise click.FileError(exc.filename or "?", hint=exc.strerror or str(exc)) from None
    return sources


def settings_of(ctx: click.Context) -> Settings:
    """The settings of this invocation (``--config`` / ``$GPUTRIAGE_CONFIG`` + environment).

    Loaded once per invocation and kept on the root context: a command that asks
    twice (merging its options, then running) must not read the file twice and
    risk seeing two versions of it.
    """
    root = ctx.find_root()
    settings = root.meta.get(_SETTINGS)
    if not isinstance(settings, Settings):
        settings = root.meta[_SETTINGS] = load_settings(root.obj)
    return settings


_SETTINGS: Final = "gputriage.settings"


def kafka_kwargs(settings: Settings, brokers: str | None) -> dict[str, Any]:
    """aiokafka client arguments from ``[kafka]``, ``--brokers`` winning."""
    if brokers is not None:
        try:
            check_brokers(brokers, "--brokers")
        except KafkaConfigError as exc:
            raise click.BadParameter(
                str(exc).removeprefix("--brokers: "), param_hint="'--brokers'"
            ) from None
    try:
        return client_kwargs(settings.kafka_settings(), brokers)  # a copy would drop its timeout
    except KafkaConfigError as exc:
        raise click.UsageError(f"{exc}, or pass --brokers") from None


def start_logging(settings: Settings) -> None:
    """Configure logging from ``[log]`` (long-running commands only; validated at load)."""
    from gputriage.logs import configure_logging  # noqa: PLC0415

    configure_logging(settings.log)


class TimeType(click.ParamType):
    """``TIME``: an RFC 3339 time (:func:`connectors.times.parse_time`) as a click type.

    A bad value is click's usage error (one line, exit 2), naming the option.
    """

    name = "TIME"

    def __init__(self, *, epoch_seconds: bool = False) -> None:
        self.epoch_seconds = epoch_seconds

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        try:
            return parse_time(str(value), epoch_seconds=self.epoch_seconds)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class FiniteRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (a usage error, one line).

    Trap: click's range check compares, and every comparison with ``nan`` is false,
    so ``FloatRange(min=0)`` lets ``nan`` through (``tail --connect-timeout-seconds nan``
    then waited forever); ``inf`` passes any range without a ``max``.
    """

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FloatRange.convert(self, value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def setting_range(table: type[msgspec.Struct], name: str) -> click.ParamType:
    """The click type of an option whose range a settings field owns (one range, two doors).

    A field typed ``Annotated[float, Meta(ge=.., le=..)]`` gives a :class:`FiniteRange`,
    an ``int`` one a ``click.IntRange``, with the same bounds as the settings check.
    """
    import msgspec.inspect  # noqa: PLC0415

    info = msgspec.inspect.type_info(table)
    assert isinstance(info, msgspec.inspect.StructType)
    (field,) = (f for f in info.fields if f.name == name)
    return range_of(field.type, f"{table.__name__}.{name}")


def range_of(kind: Any, where: str) -> click.ParamType:
    """The click range of a number's ``msgspec.inspect`` type (``Metadata``, ``None`` unwrapped)."""
    import msgspec.inspect as mi  # noqa: PLC0415

    while isinstance(kind, mi.Metadata | mi.UnionType):
        if isinstance(kind, mi.Metadata):
            kind = kind.type
        else:
            (kind,) = (t for t in kind.types if not isinstance(t, mi.NoneType))
    if isinstance(kind, mi.IntType):
        return click.IntRange(
            kind.ge if kind.gt is None else kind.gt + 1,
            kind.le if kind.lt is None else kind.lt - 1,
        )
    assert isinstance(kind, mi.FloatType), f"{where} is not a number"
    return FiniteRange(
        min=kind.ge if kind.gt is None else kind.gt,
        max=kind.le if kind.lt is None else kind.lt,
        min_open=kind.gt is not None,
        max_open=kind.lt is not None,
    )


def time_zone(value: str) -> tzinfo:
    """``--tz``: an IANA zone name (``BadParameter`` otherwise)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415

    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise click.BadParameter(f"unknown time zone {value!r}", param_hint="'--tz'") from None


def http_url(value: str) -> str:
    """An ``http://`` or ``https://`` URL with something after the scheme."""
    if not value.startswith(("http://", "https://")) or len(value) <= len("https://"):
        raise click.BadParameter(f"{value!r} is not an http(s):// URL", param_hint="'--url'")
    return value


class StructDefault(click.Option):
    """An option whose default lives in a settings struct and is shown as it is.

    Trap: the value is unset (``None``) so the settings can fill it, and click
    renders a string ``show_default`` in parentheses (``[default: (9465)]``),
    which reads like a remark; this shows ``[default: 9465]`` as for a real default.
    """

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        if isinstance(self.show_default, str):
            extra["default"] = self.show_default
        return extra


# -- options several commands share (one definition, one help text) -------------------
class SettingsRequired(click.Option):
    """A required option that ``[connect.<source>]`` may supply: click must not enforce it.

    ``required`` stays true for ``--help`` ("[required]") and for tools that read
    the click tree (``tests/deploy`` checks every required option is supplied);
    the check itself runs after the settings are merged
    (:func:`gputriage.cli.options.lay_over`), because click's runs before.
    """

    def process_value(self, ctx: click.Context, value: Any) -> Any:
        required, self.required = self.required, False
        try:
            return super().process_value(ctx, value)
        finally:
            self.required = required


def slim_config(
    resources: tuple[str, ...],
    prefixes: tuple[str, ...],
    drivers: tuple[str, ...] = (),
    classes: tuple[str, ...] = (),
) -> SlimConfig:
    """What ``--resource``/``--resource-prefix``/``--gpu-driver``/``--gpu-device-class`` say
    counts as a GPU (defaults if not given)."""
    from connectors.k8s.slim import DEFAULT_CONFIG, SlimConfig  # noqa: PLC0415

    return SlimConfig(
        gpu_resources=resources or DEFAULT_CONFIG.gpu_resources,
        gpu_prefixes=prefixes or DEFAULT_CONFIG.gpu_prefixes,
        gpu_drivers=drivers or DEFAULT_CONFIG.gpu_drivers,
        gpu_classes=classes or DEFAULT_CONFIG.gpu_classes,
    )
