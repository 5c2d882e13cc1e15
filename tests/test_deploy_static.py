"""The deployment files, checked without running them (no container engine here).

deploy/docker/compose.yml and Dockerfile, the supervisord config and the log-shipping
examples must parse, run real ``scrapy-cluster`` commands with options the CLI accepts, and
set only environment variables that are settings (or listed in ``NOT_SETTINGS``).
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from supervisor.datatypes import dict_of_key_value_pairs

from scrapy_cluster.cli import main
from scrapy_cluster.settings.defaults import DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "deploy" / "docker" / "compose.yml"
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SUPERVISOR = ROOT / "deploy" / "supervisor" / "scrapy-cluster.conf"
VECTOR = ROOT / "deploy" / "logging" / "vector.toml"
FILEBEAT = ROOT / "deploy" / "logging" / "filebeat.yml"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"

# Environment variables our components may be given that are not settings.
NOT_SETTINGS = {"SC_SETTINGS"}  # path of the localsettings.py to load (settings/loader.py)
# Services of compose.yml that run the third-party images, not ours.
INFRASTRUCTURE = {"redis", "kafka", "zookeeper"}


def resolve_command(argv: list[str]) -> list[str]:
    """The command path (``["kafka-monitor", "run"]``) of ``scrapy-cluster <argv>``; raises
    ``click.UsageError`` for an unknown command or an option the command does not accept."""
    context = main.make_context("scrapy-cluster", list(argv))
    command: click.Command = main
    path: list[str] = []
    while isinstance(command, click.Group):
        # click >= 8.2 keeps the subcommand name in _protected_args (8.1: protected_args)
        protected = getattr(context, "_protected_args", None)
        if protected is None:
            protected = context.protected_args
        remaining = [*protected, *context.args]
        if not remaining:
            raise click.UsageError(f"{' '.join(argv)!r} names no command")
        name, subcommand, rest = command.resolve_command(context, remaining)
        assert name is not None and subcommand is not None
        path.append(name)
        context = subcommand.make_context(name, list(rest), parent=context)
        command = subcommand
    return path


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def our_services() -> Iterator[tuple[str, dict[str, Any]]]:
    for name, service in compose()["services"].items():
        if name not in INFRASTRUCTURE:
            yield name, service


def supervisor_config() -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser()
    parser.read_string(SUPERVISOR.read_text())
    return parser


def supervisor_commands() -> dict[str, list[str]]:
    """``{program: argv after the executable}``, commented-out programs included."""
    commands: dict[str, list[str]] = {}
    program = None
    for line in SUPERVISOR.read_text().splitlines():
        header = re.match(r"^;?\[program:([^\]]+)\]", line)
        if header:
            program = header.group(1)
        command = re.match(r"^;?command=(\S+)\s*(.*)$", line)
        if command and program:
            assert command.group(1).endswith("/scrapy-cluster"), line
            commands[program] = command.group(2).split()
    return commands


def documented_log_fields() -> list[str]:
    """Field names in the first column of the table under "Shipping logs" in docs/deploy.md."""
    section = DEPLOY_DOC.read_text().split("## Shipping logs", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.MULTILINE)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip())
            for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


# --- the command-line check itself -------------------------------------------------------


def test_resolve_command_accepts_real_commands_and_refuses_others() -> None:
    assert resolve_command(["crawler", "--spider", "link"]) == ["crawler"]
    assert resolve_command(["config", "sync"]) == ["config", "sync"]
    with pytest.raises(click.UsageError):
        resolve_command(["crawler", "--no-such-option"])
    with pytest.raises(click.UsageError):
        resolve_command(["kafka-monitor", "walk"])


# --- compose -----------------------------------------------------------------------------


def compose_commands() -> dict[str, list[str]]:
    return {name: service["command"] for name, service in our_services()}


@pytest.mark.parametrize("commands", [
    pytest.param(compose_commands, id="compose-services"),
    pytest.param(supervisor_commands, id="supervisor-programs")])
def test_deployed_processes_run_real_subcommands(
        commands: Callable[[], dict[str, list[str]]]) -> None:
    paths = {name: resolve_command(argv) for name, argv in commands().items()}
    assert paths == {"kafka-monitor": ["kafka-monitor", "run"],
                     "redis-monitor": ["redis-monitor"], "crawler": ["crawler"],
                     "rest": ["rest"], "config-sync": ["config", "sync"]}


def test_compose_environment_names_only_settings() -> None:
    for name, service in our_services():
        unknown = set(service["environment"]) - set(DEFAULTS) - NOT_SETTINGS
        assert not unknown, f"{name}: not settings: {sorted(unknown)}"


def test_compose_services_wait_for_healthy_dependencies() -> None:
    services = compose()["services"]
    for name, service in our_services():
        assert service["depends_on"], name
        for dependency, condition in service["depends_on"].items():
            assert condition == {"condition": "service_healthy"}, name
            assert "healthcheck" in services[dependency], dependency
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_compose_builds_our_image_from_the_dockerfile() -> None:
    for name, service in our_services():
        build = service["build"]
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE, name


def test_compose_rest_port_and_health_check_use_flask_port() -> None:
    rest = compose()["services"]["rest"]
    port = DEFAULTS["FLASK_PORT"]
    assert rest["ports"] == [f"{port}:{port}"]
    assert f"http://127.0.0.1:{port}/" in " ".join(rest["healthcheck"]["test"])


def test_compose_kafka_runs_in_kraft_mode_and_zookeeper_is_optional() -> None:
    services = compose()["services"]
    assert "controller" in services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"]
    assert services["zookeeper"]["profiles"] == ["zookeeper"]
    assert services["config-sync"]["profiles"] == ["zookeeper"]
    assert not [name for name, service in services.items()
                if "zookeeper" in service.get("depends_on", {}) and "profiles" not in service]


def test_compose_crawler_scales_and_gets_time_to_hand_work_back() -> None:
    crawler = compose()["services"]["crawler"]
    assert crawler["deploy"]["replicas"] >= 1
    assert "container_name" not in crawler  # a fixed name would forbid --scale
    assert crawler["stop_grace_period"] == "60s"


def test_compose_redis_persists_to_a_volume() -> None:
    redis = compose()["services"]["redis"]
    assert "--appendonly" in redis["command"]
    assert any(volume.endswith(":/data") for volume in redis["volumes"])


# --- Dockerfile --------------------------------------------------------------------------


def test_dockerfile_installs_the_package_and_runs_scrapy_cluster() -> None:
    instructions = dockerfile_instructions()
    arguments = {name: [args for kind, args in instructions if kind == name]
                 for name, _ in instructions}
    assert json.loads(arguments["ENTRYPOINT"][-1]) == ["scrapy-cluster"]
    assert json.loads(arguments["CMD"][-1]) == ["--help"]
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in [f"ARG {a}" for a in arguments["ARG"]]
    assert any("pip install" in run and run.rstrip().endswith(" .") for run in arguments["RUN"])
    assert arguments["USER"][-1] not in ("root", "0")


def test_dockerignore_keeps_what_the_dockerfile_copies() -> None:
    kept = {line[1:].rstrip("/") for line in DOCKERIGNORE.read_text().splitlines()
            if line.startswith("!")}
    copied = [args.split()[:-1] for kind, args in dockerfile_instructions()
              if kind == "COPY" and not args.startswith("--from")]
    assert {source.rstrip("/") for sources in copied for source in sources} <= kept


# --- supervisord -------------------------------------------------------------------------


def test_supervisor_environment_names_only_settings() -> None:
    environment = dict_of_key_value_pairs(supervisor_config()["supervisord"]["environment"])
    assert {"REDIS_URL", "BUS_BACKEND", "KAFKA_HOSTS"} <= set(environment)
    assert not set(environment) - set(DEFAULTS) - NOT_SETTINGS


def test_supervisor_programs_restart_stop_as_a_group_and_rotate_logs() -> None:
    config = supervisor_config()
    programs = [section for section in config.sections() if section.startswith("program:")]
    assert len(programs) == 4
    for section in programs:
        program = config[section]
        assert program["autorestart"] == "true" and program["stopsignal"] == "TERM"
        assert program["stopasgroup"] == "true" and program["killasgroup"] == "true"
        assert int(program["startsecs"]) > 0
        assert program["stdout_logfile_maxbytes"] and int(program["stdout_logfile_backups"]) > 0
    assert int(config["program:crawler"]["stopwaitsecs"]) >= 60
    assert int(config["program:crawler"]["numprocs"]) > 1


# --- log shipping ------------------------------------------------------------------------


def test_deploy_doc_lists_the_log_fields() -> None:
    assert set(documented_log_fields()) >= {"component", "node", "level", "event",
                                            "crawlid", "appid", "url"}


@pytest.mark.parametrize("path", [VECTOR, FILEBEAT], ids=lambda path: path.name)
def test_shipping_config_parses_and_names_the_documented_fields(path: Path) -> None:
    text = path.read_text()
    parsed = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    assert parsed
    missing = [field for field in documented_log_fields()
               if not re.search(rf"\b{field}\b", text)]
    assert not missing


def test_vector_config_parses_json_and_sends_to_elasticsearch_and_loki() -> None:
    config = tomllib.loads(VECTOR.read_text())
    (transform,) = config["transforms"].values()
    assert "parse_json" in transform["source"]
    assert {sink["type"] for sink in config["sinks"].values()} == {"elasticsearch", "loki"}
    assert config["sinks"]["loki"]["labels"]["component"] == "{{ component }}"
