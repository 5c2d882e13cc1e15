"""Security claims that need no server (docs/security.md): no code-executing deserializer in
src/, settings from the environment and the command line are data, the crawler keeps no pickled
state, callback names read from Redis reach only public spider methods, KAFKA_CONFIG reaches
librdkafka, secrets are masked."""

from __future__ import annotations

import ast
import json
import os
import pickle
from pathlib import Path

import confluent_kafka
import pytest
from click.testing import CliRunner
from scrapy import Spider

from scrapy_cluster.bus import create_bus
from scrapy_cluster.cli import main
from scrapy_cluster.crawler.common.resolution import scrapy_settings
from scrapy_cluster.crawler.serialization import RequestSerializationError, request_from_dict
from scrapy_cluster.errors import SettingsError
from scrapy_cluster.frontier.calls import FrontierCalls
from scrapy_cluster.settings import load_settings, mask_secrets
from tests.support.certificates import write_test_certificates

SRC = Path(__file__).resolve().parent.parent / "src" / "scrapy_cluster"
CODE_LOADING_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill",
                        "cloudpickle", "jsonpickle"}
EVALUATING_BUILTINS = {"eval", "exec", "compile", "__import__"}
UNSAFE_YAML = {"load", "load_all", "unsafe_load", "unsafe_load_all", "full_load",
               "full_load_all", "Loader", "UnsafeLoader", "FullLoader"}
# Where code is loaded on purpose, each by a name an operator wrote (never by data):
ALLOWED_CODE_LOADERS = {
    ("settings/loader.py", "runpy.run_path"),  # localsettings.py, the one executed settings file
    ("cli/__init__.py", "importlib.import_module"),  # the CLI's own subcommand modules
    ("crawler/common/resolution.py", "importlib.import_module"),  # --spider package.module:Class
    ("plugins.py", "load_object"),  # PLUGINS dotted paths
    ("crawler/middlewares.py", "load_object"),  # Scrapy's RETRY_EXCEPTIONS dotted paths
}
CODE_LOADERS = {"runpy.run_path", "runpy.run_module", "importlib.import_module", "load_object"}
MARKER_COMMAND = "touch {marker}"


def _python_files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _findings(path: Path) -> list[str]:
    return _findings_in(path.read_text(), path.relative_to(SRC).as_posix())


def _findings_in(text: str, relative: str) -> list[str]:
    tree = ast.parse(text, relative)
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{relative}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {alias.name}" for alias in node.names
                      if alias.name.split(".")[0] in CODE_LOADING_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in \
                CODE_LOADING_MODULES:
            found.append(f"{where} imports from {node.module}")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in EVALUATING_BUILTINS:
                found.append(f"{where} calls {name}")
            elif name.startswith("yaml.") and name.split(".", 1)[1] in UNSAFE_YAML:
                found.append(f"{where} calls {name}")
            elif name in CODE_LOADERS and (relative, name) not in ALLOWED_CODE_LOADERS:
                found.append(f"{where} calls {name}")
        elif isinstance(node, ast.Attribute) and _dotted(node) in {
                f"yaml.{name}" for name in ("Loader", "UnsafeLoader", "FullLoader")}:
            found.append(f"{where} uses {_dotted(node)}")
    return found


def test_src_has_no_code_executing_deserializer_or_eval() -> None:
    findings = [finding for path in _python_files() for finding in _findings(path)]
    assert findings == []


def test_the_scan_catches_what_it_looks_for() -> None:
    bad = ("import pickle\nfrom marshal import loads\npickle.loads(b'')\neval('1')\n"
           "yaml.load('a', Loader=yaml.Loader)\n__import__('os')\nrunpy.run_path('x')\n")
    assert len(_findings_in(bad, "probe.py")) == 7  # pickle.loads: its import is the finding


def test_settings_files_are_executed_only_in_the_loader() -> None:
    executing = [(path.relative_to(SRC).as_posix(), name) for path in _python_files()
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Call)
                 and (name := _dotted(node.func)).startswith("runpy.")]
    assert executing == [("settings/loader.py", "runpy.run_path")]


def test_lua_scripts_load_no_code() -> None:
    offenders = [path.name for path in (SRC / "lua").glob("*.lua")
                 if any(word in path.read_text()
                        for word in ("loadstring", "dofile", "loadfile", " load("))]
    assert offenders == []


def test_the_crawler_keeps_no_pickled_state_on_disk() -> None:
    settings = scrapy_settings(load_settings("crawler", environ={}))
    assert (settings.get("JOBDIR"), settings.getbool("HTTPCACHE_ENABLED"),
            settings.get("SCHEDULER")) == \
        (None, False, "scrapy_cluster.crawler.scheduler.DistributedScheduler")


def test_the_crawler_runs_with_its_guards_and_limits() -> None:
    settings = scrapy_settings(load_settings("crawler", environ={}))
    assert settings.getdict("DOWNLOADER_MIDDLEWARES")[
        "scrapy_cluster.crawler.ssrf.SsrfGuardMiddleware"] == 50
    assert settings.getint("DOWNLOAD_MAXSIZE") > 0 and settings.getfloat("DOWNLOAD_TIMEOUT") > 0
    assert not settings.getbool("TELNETCONSOLE_ENABLED")


@pytest.mark.parametrize("name", ["KAFKA_CONFIG", "PLUGINS", "REST_API_KEYS", "QUEUE_HITS",
                                  "LOG_STDOUT", "REDIS_SOCKET_TIMEOUT"])
def test_an_expression_in_a_typed_env_var_is_refused_and_not_run(name: str,
                                                                  tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    expression = f'__import__("os").system("{MARKER_COMMAND.format(marker=marker)}")'
    with pytest.raises(SettingsError, match=name):
        load_settings("crawler", environ={name: expression})
    assert not marker.exists()


def test_an_expression_in_a_string_env_var_or_flag_stays_a_string(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    expression = f'__import__("os").system("{MARKER_COMMAND.format(marker=marker)}")'
    settings = load_settings("rest", environ={"KAFKA_TOPIC_PREFIX": expression},
                             overrides={"REDIS_URL": expression})
    result = CliRunner().invoke(main, ["--kafka-hosts", expression, "settings", "KAFKA_HOSTS"])
    refused = CliRunner().invoke(main, ["--redis-url", expression, "settings", "REDIS_URL"])
    assert (settings["KAFKA_TOPIC_PREFIX"], settings["REDIS_URL"]) == (expression, expression)
    assert json.dumps(expression) in result.output  # printed as a JSON string
    # a REDIS_URL is checked before use: refused in one line that quotes the text as it is
    assert refused.exit_code == 1 and f"Error: REDIS_URL {expression!r} is not a Redis URL" \
        in refused.output
    assert not marker.exists()


def test_a_json_env_var_is_parsed_as_json_only(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = pickle.dumps({"a": 1}).hex()
    with pytest.raises(SettingsError):
        load_settings(environ={"KAFKA_CONFIG": payload})
    yaml_payload = f"!!python/object/apply:os.system ['touch {marker}']"
    with pytest.raises(SettingsError):
        load_settings(environ={"KAFKA_CONFIG": yaml_payload})
    assert load_settings(environ={"KAFKA_CONFIG": '{"a": "__import__(1)"}'})["KAFKA_CONFIG"] \
        == {"a": "__import__(1)"}
    assert not marker.exists()


class _Spider(Spider):
    name = "probe"

    def parse_page(self, response: object) -> None:
        """A public callback."""


@pytest.mark.parametrize("callback", ["__class__", "__init__", "_set_crawler", "__reduce__"])
def test_a_callback_name_from_redis_reaches_only_public_spider_methods(callback: str) -> None:
    with pytest.raises(RequestSerializationError, match="not a public method"):
        request_from_dict({"url": "http://example.com/", "callback": callback}, _Spider())


def test_a_public_callback_name_still_works() -> None:
    request = request_from_dict({"url": "http://example.com/", "callback": "parse_page"},
                                _Spider())
    assert request.callback.__name__ == "parse_page"


def test_an_undecodable_queued_item_is_marked_and_the_rest_of_the_pop_decoded(
        tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return os.system, (MARKER_COMMAND.format(marker=marker),)

    good = b'1:k0 {"u":"http://b.example/1","a":"app"}'
    reply = [1000, -1,
             b"1", b"a.example", b"1", b"c1", b"2:k0 " + pickle.dumps(Payload()), b"0",
             b"2", b"b.example", b"1", b"c1", good, b"0",
             b"3", b"c.example", b"1", b"c1", b"no-space-at-all", b"0"]
    result = FrontierCalls.parse_pop(reply, "link")
    first, second, third = (leased.request for leased in result.requests)
    assert "url" not in first and first["undecodable"].startswith("JSONDecodeError")
    assert second["url"] == "http://b.example/1"
    assert "url" not in third and "undecodable" in third
    assert not marker.exists()


SECRETS = {"REDIS_URL": "redis://:redis-pw-9f3@h:1/0?password=query-pw-41c",
           "KAFKA_CONFIG": {"sasl.password": "sasl-pw-7d2", "ssl.key.password": "key-pw-0b1",
                            "ssl.key.pem": "-----BEGIN PRIVATE KEY----- pem-5e8",
                            "sasl.oauthbearer.client.secret": "oauth-7a1",
                            "sasl.username": "alice"},
           "REST_API_KEYS": ["api-key-3c9", "api-key-8e4"],
           "REDIS_PASSWORD": "plain-pw-2aa"}
SECRET_STRINGS = ("redis-pw-9f3", "query-pw-41c", "sasl-pw-7d2", "key-pw-0b1", "pem-5e8",
                  "oauth-7a1", "api-key-3c9", "api-key-8e4", "plain-pw-2aa")


def test_settings_command_masks_every_secret_from_the_environment() -> None:
    env = {name: value if isinstance(value, str) else json.dumps(value)
           for name, value in SECRETS.items()}
    result = CliRunner().invoke(main, ["settings", "--json", "-c", "rest"], env=env)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [secret for secret in SECRET_STRINGS if secret in result.output] == []
    assert rows["KAFKA_CONFIG"]["value"]["sasl.username"] == "alice"
    assert rows["REDIS_URL"]["value"] == "redis://:****@h:1/0?password=****"


def test_the_human_settings_listing_masks_them_too() -> None:
    env = {name: value if isinstance(value, str) else json.dumps(value)
           for name, value in SECRETS.items()}
    result = CliRunner().invoke(main, ["settings"], env=env)
    assert result.exit_code == 0, result.output
    assert [secret for secret in SECRET_STRINGS if secret in result.output] == []


@pytest.mark.parametrize(("url", "masked"), [
    ("unix:///run/redis.sock?db=0&password=pw", "unix:///run/redis.sock?db=0&password=****"),
    ("rediss://:pw@h:1/0?ssl_ca_certs=/ca.pem", "rediss://:****@h:1/0?ssl_ca_certs=/ca.pem"),
])
def test_url_passwords_are_masked_wherever_the_url_holds_them(url: str, masked: str) -> None:
    assert mask_secrets("REDIS_URL", url) == masked


KAFKA_SECURITY = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                  "sasl.username": "alice", "sasl.password": "sasl-pw-7d2"}


def test_kafka_config_reaches_librdkafka_which_rejects_a_bad_value() -> None:
    """librdkafka itself reads the value: a CA file that does not exist fails the bus."""
    settings = load_settings(environ={}, overrides={
        "KAFKA_HOSTS": "127.0.0.1:1",
        "KAFKA_CONFIG": {**KAFKA_SECURITY, "ssl.ca.location": "/nonexistent/ca.pem"}})
    with pytest.raises(confluent_kafka.KafkaException, match="ssl.ca.location"):
        create_bus(settings)


def test_kafka_sasl_ssl_config_is_accepted_by_librdkafka(tmp_path: Path) -> None:
    ca = write_test_certificates(tmp_path)["ca"]
    settings = load_settings(environ={}, overrides={
        "KAFKA_HOSTS": "127.0.0.1:1", "KAFKA_CONFIG": {**KAFKA_SECURITY,
                                                       "ssl.ca.location": str(ca)}})
    bus = create_bus(settings)
    bus.producer()  # librdkafka builds a SASL_SSL producer; nothing connects yet
    bus.close()
