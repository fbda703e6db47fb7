"""Kafka connection settings: validated once, then turned into aiokafka arguments.

The ``[kafka]`` table (brokers, TLS, SASL, ``connect_timeout_seconds``). The SASL password
comes only from ``$GPUTRIAGE_KAFKA_PASSWORD`` or ``sasl_password_file``, never from the
settings file, a variable of the tree or the command line, and is held in a masked
:class:`Secret`.

Traps: aiokafka needs the password in plain text, so never log the individual kwargs; one
trailing newline of a password file is removed, nothing else; ``ssl_*`` files with a
non-TLS protocol are an error; the ``ssl_context`` is built fresh on every call (rotated
certificates); aiokafka bounds a start only by 40 s per bootstrap server, so
:func:`start_client` bounds it by ``connect_timeout_seconds`` and raises
:class:`KafkaUnreachable`. The table and each trap: docs/connectors.md, design notes:
connectors/kafka/config.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import socket
import ssl
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Final, Literal

import msgspec

from connectors.bounded import read_small

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

PASSWORD_ENV: Final = "GPUTRIAGE_KAFKA_PASSWORD"
"""The only environment variable the SASL password is read from."""
CLIENT_ID: Final = "gputriage"
_TLS: Final = frozenset({"SSL", "SASL_SSL"})
_SASL: Final = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})
_MASK: Final = "********"

CONNECT_TIMEOUT_SECONDS: Final = 10.0
"""``kafka.connect_timeout_seconds``' default: how long a client's start may take."""
ConnectTimeout = Annotated[
    float,
    msgspec.Meta(
        gt=0,
        le=3600,
        description="Give up when the brokers cannot be reached within this long.",
        extra={"metavar": "SECONDS"},
    ),
]


class KafkaConfigError(ValueError):
    """A ``[kafka]`` value that cannot be used; the message names the key, never a secret."""


class KafkaUnreachable(RuntimeError):
    """Kafka could not be reached or its topics not created; one line for the user.

    Raised by :func:`start_client` (every client's start, so every verb's) and
    :func:`connectors.kafka.producer.start_producer`; never printed under
    ``connectors/``: the CLI reports it, once (:func:`gputriage.cli.run`). Defined
    here, not beside the producer, so that catching it does not import aiokafka.
    ``reason`` is the message's last part (``Connection refused``, ``no answer``),
    for a caller that words its own line (``gputriage tail``, which retries).
    """

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason or message


class Secret:
    """A string that does not show itself: ``repr``/``str``/f-strings print a mask.

    Call :meth:`reveal` at the one place the value is handed to a client.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret('{_MASK}')"

    def __str__(self) -> str:
        return _MASK

    def __format__(self, spec: str) -> str:
        return _MASK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __reduce__(self) -> Any:
        # Pickling would write the value out: refuse rather than leak it to a cache.
        raise TypeError("a Secret cannot be pickled")


class KafkaSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The validated ``[kafka]`` table; see the module docs for each key."""

    brokers: tuple[str, ...] = ()
    """``host:port`` bootstrap servers; empty means "start the embedded broker" (demo)."""
    security_protocol: SecurityProtocol = "PLAINTEXT"
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str = ""
    sasl_password_file: str = ""
    client_id: str = CLIENT_ID
    connect_timeout_seconds: ConnectTimeout = CONNECT_TIMEOUT_SECONDS
    """How long a client's start (bootstrap and metadata) may take before the command
    gives up with one line (:func:`start_client`); every Kafka verb shares it."""
    sasl_password: Secret | None = None
    """Filled from ``$GPUTRIAGE_KAFKA_PASSWORD`` or ``sasl_password_file``, never from the table."""

    @property
    def embedded(self) -> bool:
        """No brokers configured: ``demo`` starts its own."""
        return not self.brokers

    @property
    def tls(self) -> bool:
        """Whether connections use TLS."""
        return self.security_protocol in _TLS

    @property
    def sasl(self) -> bool:
        """Whether connections authenticate with SASL."""
        return self.security_protocol in _SASL


def split_brokers(value: Any) -> Any:
    """``"a:9092, b:9092"`` or ``["a:9092"]`` as a list of non-empty names (others unchanged)."""
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, list | tuple):
        return [part.strip() if isinstance(part, str) else part for part in value]
    return value


_HOST: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,253}$")
"""A DNS name or an IPv4 address (IPv6 goes in brackets: ``[::1]:9092``)."""


def broker_problem(address: str) -> str | None:
    """Why ``address`` is not a ``host:port`` bootstrap server, or ``None`` when it is one.

    aiokafka takes ``int()`` of whatever follows the last colon, so ``::::`` or
    ``localhost:http`` would be a ``ValueError`` traceback deep inside a client's
    start; a port is required (aiokafka's silent 9092 hides a forgotten one).
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        return f"{address!r} is not HOST:PORT"
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"{address!r}: {host} is not an IPv6 address"
    elif not _HOST.match(host):
        return f"{address!r} is not HOST:PORT (an IPv6 address goes in brackets: [::1]:9092)"
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        return f"{address!r}: the port must be a number from 1 to 65535"
    return None


def check_brokers(brokers: Any, where: str) -> list[str]:
    """``brokers`` (a comma string or a list) as a list of ``host:port``, or
    :class:`KafkaConfigError` naming ``where`` (``kafka.brokers``, ``--brokers``)."""
    servers = split_brokers(brokers)
    for index, server in enumerate(servers):
        problem = broker_problem(server)
        if problem is not None:
            at = f"{where}[{index}]" if len(servers) > 1 else where
            raise KafkaConfigError(f"{at}: {problem}")
    return list(servers)


def kafka_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``[kafka]`` with ``brokers`` split (a comma string is as good as a list)."""
    values = dict(table)
    if "brokers" in values:
        values["brokers"] = split_brokers(values["brokers"])
    return values


def check_kafka(settings: KafkaSettings) -> None:
    """Refuse combinations that would silently mean something else (see the module traps).

    Raises :class:`KafkaConfigError`. Reads no file: fine at load time.
    """
    check_brokers(settings.brokers, "kafka.brokers")
    _check_consistency(settings)


def with_password(settings: KafkaSettings, password_env: Secret | None) -> KafkaSettings:
    """``settings`` with the SASL password attached when SASL is on (else unchanged).

    Reads ``sasl_password_file``, so it runs only where Kafka is used: a command
    that never connects must not fail on an unreadable secret.
    """
    if not settings.sasl:
        return settings
    return msgspec.structs.replace(settings, sasl_password=_password(settings, password_env))


def _check_consistency(settings: KafkaSettings) -> None:
    protocol = settings.security_protocol
    if not settings.tls:
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(settings, key):
                raise KafkaConfigError(
                    f"kafka.{key} is set but security_protocol is {protocol}: "
                    "use SSL or SASL_SSL, or remove it"
                )
    if settings.ssl_keyfile and not settings.ssl_certfile:
        raise KafkaConfigError("kafka.ssl_keyfile needs kafka.ssl_certfile")
    if settings.sasl:
        if not settings.sasl_username:
            raise KafkaConfigError(f"kafka.sasl_username is required with {protocol}")
    else:
        for key in ("sasl_username", "sasl_password_file"):
            if getattr(settings, key):
                raise KafkaConfigError(
                    f"kafka.{key} is set but security_protocol is {protocol}: "
                    "use SASL_PLAINTEXT or SASL_SSL, or remove it"
                )


def _password(settings: KafkaSettings, password_env: Secret | None) -> Secret:
    path = settings.sasl_password_file
    if path and password_env is not None:
        raise KafkaConfigError(
            f"the SASL password is set twice (${PASSWORD_ENV} and kafka.sasl_password_file): "
            "keep one"
        )
    if path:
        try:
            text = read_small(path).decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            raise KafkaConfigError(
                f"kafka.sasl_password_file: cannot read {path}: {reason or exc}"
            ) from None
        for ending in ("\r\n", "\n"):
            if text.endswith(ending):
                text = text[: -len(ending)]
                break
        password_env = Secret(text)
    if password_env is None or not password_env.reveal():
        raise KafkaConfigError(
            f"{settings.security_protocol} needs a password: set ${PASSWORD_ENV} "
            "or kafka.sasl_password_file"
        )
    return password_env


class ClientKwargs(dict[str, Any]):
    """aiokafka keyword arguments; the repr masks the password.

    ``connect_timeout_seconds`` rides along as an attribute, not a key (aiokafka would refuse
    an unknown keyword): :func:`start_client` reads it. Trap: ``dict(kwargs)`` or
    ``{**kwargs}`` copies only the keys; a start given such a copy waits the default.
    """

    connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS

    def __repr__(self) -> str:
        shown = {k: (_MASK if k == "sasl_plain_password" and v else v) for k, v in self.items()}
        return f"ClientKwargs({shown!r})"

    __str__ = __repr__


def ssl_context(settings: KafkaSettings) -> ssl.SSLContext | None:
    """A client TLS context (certificate and host name verified), or ``None`` without TLS."""
    if not settings.tls:
        return None
    from aiokafka.helpers import create_ssl_context  # noqa: PLC0415 - only with TLS

    try:
        context: ssl.SSLContext = create_ssl_context(
            cafile=settings.ssl_cafile or None,
            certfile=settings.ssl_certfile or None,
            keyfile=settings.ssl_keyfile or None,
        )
    except (OSError, ssl.SSLError) as exc:
        raise KafkaConfigError(f"kafka TLS files: {exc}") from None
    return context


def client_kwargs(
    settings: KafkaSettings, brokers: tuple[str, ...] | list[str] | str | None = None
) -> ClientKwargs:
    """Keyword arguments shared by aiokafka's producer, consumer and admin client.

    ``brokers`` overrides ``settings.brokers`` (a ``--brokers`` option, or the
    embedded broker's address). Raises :class:`KafkaConfigError` when there is
    no broker at all, because aiokafka would silently try ``localhost:9092``.
    """
    servers = check_brokers(brokers, "--brokers") if brokers is not None else list(settings.brokers)
    if not servers:
        raise KafkaConfigError(
            "no Kafka brokers configured: set kafka.brokers (or GPUTRIAGE_KAFKA__BROKERS)"
        )
    kwargs = ClientKwargs(
        bootstrap_servers=servers,
        client_id=settings.client_id,
        security_protocol=settings.security_protocol,
    )
    kwargs.connect_timeout_seconds = settings.connect_timeout_seconds
    context = ssl_context(settings)
    if context is not None:
        kwargs["ssl_context"] = context
    if settings.sasl:
        kwargs["sasl_mechanism"] = settings.sasl_mechanism
        kwargs["sasl_plain_username"] = settings.sasl_username
        password = settings.sasl_password
        kwargs["sasl_plain_password"] = password.reveal() if password is not None else None
    return kwargs


def connect_timeout(client_kwargs: Mapping[str, Any]) -> float:
    """The start timeout that ``client_kwargs`` carry (the default for a plain mapping)."""
    if isinstance(client_kwargs, ClientKwargs):
        return client_kwargs.connect_timeout_seconds
    return CONNECT_TIMEOUT_SECONDS


def brokers_text(client_kwargs: Mapping[str, Any]) -> str:
    """The bootstrap servers as a user typed them: ``k0:9092,k1:9092``, never a list repr."""
    servers = client_kwargs.get("bootstrap_servers", "")
    return ",".join(servers) if isinstance(servers, list | tuple) else str(servers)


async def start_client(
    client: Any, client_kwargs: Mapping[str, Any], *, timeout_seconds: float | None = None
) -> None:
    """Start an aiokafka client (producer, consumer, admin) within the connect timeout.

    ``timeout_seconds`` defaults to :func:`connect_timeout` of ``client_kwargs``. Any failure
    stops the half-started client and raises :class:`KafkaUnreachable`: ``cannot reach
    Kafka at HOST:PORT: <reason>``, the reason heard from aiokafka (``Connection
    refused``) rather than its ``Unable to bootstrap from [('h', 1, <AddressFamily...>)]``.
    Nothing aiokafka logs while starting is printed (:func:`heard`).
    """
    from aiokafka.errors import KafkaError  # noqa: PLC0415 - this module stays cheap

    timeout = connect_timeout(client_kwargs) if timeout_seconds is None else timeout_seconds
    with heard("aiokafka") as complaints:
        try:
            await asyncio.wait_for(client.start(), timeout)
        except BaseException as exc:
            with contextlib.suppress(KafkaError, OSError):
                stop = getattr(client, "stop", None) or client.close  # the admin client closes
                await stop()
            if not isinstance(exc, KafkaError | OSError | TimeoutError):
                raise  # cancelled (Ctrl-C), or a bug: never a reason
            reason = start_failure(exc, complaints)
        else:
            return
    shown = reason
    if reason == NO_ANSWER:
        shown = f"{NO_ANSWER} within {timeout:g} s (kafka.connect_timeout_seconds)"
    raise KafkaUnreachable(f"cannot reach Kafka at {brokers_text(client_kwargs)}: {shown}", reason)


NO_ANSWER: Final = "no answer"
"""The reason of a start that timed out: the broker took the connection and said nothing."""


def start_failure(exc: BaseException, complaints: list[logging.LogRecord]) -> str:
    """Why a start failed, in a few words: the last connection error aiokafka logged
    (its ``Unable connect to "h:p": <error>``), else the exception's own."""
    if isinstance(exc, TimeoutError):
        return NO_ANSWER
    for record in reversed(complaints):
        for arg in record.args if isinstance(record.args, tuple) else ():
            if isinstance(arg, BaseException):
                return error_reason(arg)
    return error_reason(exc)


def error_reason(exc: BaseException) -> str:
    """An exception as a short reason: the OS's words for an ``OSError`` (``Connection
    refused``, ``Name or service not known``), never a repr of address tuples."""
    from aiokafka.errors import KafkaConnectionError  # noqa: PLC0415

    if isinstance(exc, ssl.SSLError):
        return f"TLS: {exc.reason or exc}"
    if isinstance(exc, socket.gaierror):
        return exc.strerror or str(exc)
    if isinstance(exc, OSError) and exc.errno is not None and exc.errno > 0:
        return os.strerror(exc.errno)
    if isinstance(exc, TimeoutError):
        return NO_ANSWER
    if isinstance(exc, KafkaConnectionError):
        return "connection failed"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Heard(logging.Handler):
    """Keeps the records it is handed (:func:`heard`)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def heard(name: str) -> Iterator[list[logging.LogRecord]]:
    """Logger ``name``'s warnings and errors for the block, kept instead of printed.

    aiokafka logs every refused connection at ERROR, and Python prints records nobody
    handles on stderr: while a client starts, they are reasons for the one line, not
    lines of their own. Trap: this holds for the whole logger tree for the block, other
    clients' records included; start clients one at a time.
    """
    logger = logging.getLogger(name)
    handler = _Heard()
    propagate, level = logger.propagate, logger.level
    logger.addHandler(handler)
    logger.propagate = False
    if logger.level == logging.NOTSET or logger.level > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
        logger.setLevel(level)  # setLevel, not .level =: it clears the loggers' level cache
