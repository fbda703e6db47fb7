"""Kafka settings: validation, the SASL password's sources and masking, TLS/SASL mappings."""

from __future__ import annotations

import pickle
import shutil
import ssl
import subprocess
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka.config import (
    PASSWORD_ENV,
    ClientKwargs,
    KafkaConfigError,
    KafkaSettings,
    Secret,
    client_kwargs,
)
from gputriage.settings import SettingsError, load_settings
from tests.cli_helpers import load_tables

PASSWORD = "s3cr3t-Pa55w0rd"
SASL = {"security_protocol": "SASL_PLAINTEXT", "sasl_username": "gputriage"}
WITH_PASSWORD = {PASSWORD_ENV: PASSWORD}


def _sasl_env(**extra: str) -> dict[str, str]:
    return {
        "GPUTRIAGE_KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
        "GPUTRIAGE_KAFKA__SASL_MECHANISM": "SCRAM-SHA-512",
        "GPUTRIAGE_KAFKA__SASL_USERNAME": "gputriage",
        "GPUTRIAGE_KAFKA__BROKERS": "kafka-0:9093,kafka-1:9093",
        **extra,
    }


def test_defaults_mean_embedded_plaintext() -> None:
    settings = load_settings(None, environ={}).kafka_settings()
    assert settings == KafkaSettings()
    assert settings.embedded
    assert not settings.tls
    assert not settings.sasl
    with pytest.raises(KafkaConfigError, match="no Kafka brokers configured"):
        client_kwargs(settings)
    assert client_kwargs(settings, "127.0.0.1:9092") == {
        "bootstrap_servers": ["127.0.0.1:9092"],
        "client_id": "gputriage",
        "security_protocol": "PLAINTEXT",
    }


@pytest.mark.parametrize("brokers", ['"a:9092, b:9092"', '["a:9092", "b:9092"]', "a:9092,b:9092,"])
def test_brokers_as_a_list_or_a_comma_string(brokers: str) -> None:
    settings = load_settings(None, environ={"GPUTRIAGE_KAFKA__BROKERS": brokers})
    assert settings.kafka_settings().brokers == ("a:9092", "b:9092")


def test_brokers_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text('[kafka]\nbrokers = ["k:9092"]\n[topics]\nprefix = "p"\n', encoding="utf-8")
    settings = load_settings(str(path), environ={})
    assert settings.kafka_settings().brokers == ("k:9092",)
    assert settings.topic_settings().prefix == "p"
    assert client_kwargs(settings.kafka_settings(), "other:1")["bootstrap_servers"] == ["other:1"]


def test_the_password_comes_from_the_environment_and_never_shows() -> None:
    settings = load_settings(None, environ=_sasl_env(GPUTRIAGE_KAFKA_PASSWORD=PASSWORD))
    kafka = settings.kafka_settings()
    assert kafka.sasl_password is not None
    assert kafka.sasl_password.reveal() == PASSWORD
    kwargs = client_kwargs(kafka)
    assert kwargs["sasl_plain_password"] == PASSWORD, "aiokafka gets the real thing"
    shown = [
        repr(settings),
        str(settings),
        repr(kafka),
        str(kafka),
        f"{kafka.sasl_password}",
        f"{kafka.sasl_password!r}",
        repr(kwargs),
        str(kwargs),
        str(settings.tables),
    ]
    for text in shown:
        assert PASSWORD not in text, text
    assert "********" in repr(kafka)
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(kafka.sasl_password)


def test_the_password_from_a_file_loses_one_trailing_newline(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + " \n", encoding="utf-8")
    env = _sasl_env(GPUTRIAGE_KAFKA__SASL_PASSWORD_FILE=f'"{secret}"')
    kafka = load_settings(None, environ=env).kafka_settings()
    assert kafka.sasl_password == Secret(PASSWORD + " ")
    assert PASSWORD not in repr(kafka)


@pytest.mark.parametrize(
    "environ",
    [
        {"GPUTRIAGE_KAFKA__SASL_PASSWORD": PASSWORD},
        {"GPUTRIAGE_KAFKA__PASSWORD": PASSWORD},
    ],
)
def test_the_password_is_refused_as_a_setting(environ: dict[str, str]) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(None, environ=_sasl_env(**environ))
    assert "GPUTRIAGE_KAFKA_PASSWORD" in str(caught.value)
    assert PASSWORD not in str(caught.value)


def test_the_password_is_refused_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text(f'[kafka]\nsasl_password = "{PASSWORD}"\n', encoding="utf-8")
    with pytest.raises(SettingsError, match=r"kafka\.sasl_password") as caught:
        load_settings(str(path), environ={})
    assert PASSWORD not in str(caught.value)
    assert str(path) in str(caught.value)


def test_the_password_on_the_command_line_is_not_an_option() -> None:
    from gputriage.cli import cli  # noqa: PLC0415 - the click tree, not a run

    options = {opt for command in cli.commands.values() for p in command.params for opt in p.opts}
    assert not [opt for opt in options if "password" in opt]


def test_sasl_without_a_password_or_with_two(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="needs a password"):
        load_settings(None, environ=_sasl_env()).kafka_settings()
    secret = tmp_path / "password"
    secret.write_text(PASSWORD, encoding="utf-8")
    env = _sasl_env(
        GPUTRIAGE_KAFKA_PASSWORD=PASSWORD, GPUTRIAGE_KAFKA__SASL_PASSWORD_FILE=f'"{secret}"'
    )
    with pytest.raises(SettingsError, match="set twice"):
        load_settings(None, environ=env).kafka_settings()
    missing = _sasl_env(GPUTRIAGE_KAFKA__SASL_PASSWORD_FILE=f'"{tmp_path / "nope"}"')
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(None, environ=missing).kafka_settings()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"security_protocol": "TLS"}, r"kafka\.security_protocol"),
        ({"sasl_mechanism": "GSSAPI", **SASL}, r"kafka\.sasl_mechanism"),
        ({"brokerz": ["a"]}, r"kafka\.brokerz: unknown key"),
        ({"brokers": 9092}, r"kafka\.brokers"),
        ({"ssl_cafile": "/ca.pem"}, r"kafka\.ssl_cafile is set but security_protocol is PLAIN"),
        ({"security_protocol": "SSL", "ssl_keyfile": "/k"}, r"ssl_keyfile needs"),
        ({"security_protocol": "SASL_SSL"}, r"sasl_username is required"),
        ({"sasl_username": "u"}, r"sasl_username is set but security_protocol is PLAINTEXT"),
    ],
)
def test_bad_kafka_settings_name_the_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_tables({"kafka": table}, WITH_PASSWORD).kafka_settings()


def test_a_password_is_ignored_without_sasl() -> None:
    kafka = load_tables({}, WITH_PASSWORD).kafka_settings()
    assert kafka.sasl_password is None
    assert "sasl_plain_password" not in client_kwargs(kafka, "k:1")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A throwaway self-signed certificate and key (made by openssl, not committed)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "client.pem", directory / "client.key"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=gputriage-test", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def test_tls_maps_to_an_ssl_context_for_aiokafka(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    table = {
        "brokers": ["k:9093"],
        "security_protocol": "SSL",
        "ssl_cafile": str(cert),
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
    }
    settings = load_tables({"kafka": table}).kafka_settings()
    kwargs = client_kwargs(settings)
    assert isinstance(kwargs, ClientKwargs)
    assert kwargs["security_protocol"] == "SSL"
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert "sasl_mechanism" not in kwargs


def test_a_bad_tls_file_is_a_config_error(tmp_path: Path) -> None:
    bogus = tmp_path / "ca.pem"
    bogus.write_text("not a certificate", encoding="utf-8")
    table = {"brokers": ["k:1"], "security_protocol": "SSL", "ssl_cafile": str(bogus)}
    settings = load_tables({"kafka": table}).kafka_settings()
    with pytest.raises(KafkaConfigError, match="kafka TLS files"):
        client_kwargs(settings)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_maps_to_aiokafka_arguments(protocol: str, mechanism: str) -> None:
    # No ssl_cafile: SASL_SSL verifies against the system's trust store.
    table = {
        "brokers": "k:9093",
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_username": "gputriage",
    }
    settings = load_tables({"kafka": table}, WITH_PASSWORD).kafka_settings()
    kwargs = client_kwargs(settings)
    expected = {
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "gputriage",
        "sasl_plain_password": PASSWORD,
    }
    assert {k: kwargs[k] for k in expected} == expected
    assert ("ssl_context" in kwargs) == (protocol == "SASL_SSL")
