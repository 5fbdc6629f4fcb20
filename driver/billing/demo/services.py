"""What the demo starts around the worker: its own database, the HTTP API (for the gateway's
webhooks) on a free port, and the event topic of the run (or a JSON-lines file without Kafka)."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from billing.config import Settings


# -- the database ------------------------------------------------------------------------------

def demo_database_url(url: str) -> str:
    """The demo drops and recreates its database: a name without "demo" gets "_demo" appended."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    name = info.get("dbname") or "billing"
    if "demo" not in name:
        info["dbname"] = f"{name}_demo"
    return psycopg.conninfo.make_conninfo(**info)


def recreate_database(url: str) -> None:
    info = psycopg.conninfo.conninfo_to_dict(url)
    name = info["dbname"]
    admin = psycopg.conninfo.make_conninfo(**{**info, "dbname": "postgres"})
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def display_url(url: str) -> str:
    """The URL without its password, for the terminal."""
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.pop("password", None)
    return f"postgresql://{info.get('user', '')}@{info.get('host', '')}:{info.get('port', '')}/{info.get('dbname', '')}"


# -- the HTTP API ------------------------------------------------------------------------------

@dataclass
class ApiServer:
    server: object  # uvicorn.Server
    task: asyncio.Task
    url: str

    async def stop(self) -> None:
        self.server.should_exit = True
        await asyncio.gather(self.task, return_exceptions=True)


async def start_api(settings: Settings, clock) -> ApiServer:
    """`billing.api.create_app` served by uvicorn on a free loopback port, in this event loop."""
    import uvicorn

    from billing.api import create_app

    app = create_app(settings, clock=clock)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False)
    server = uvicorn.Server(config)
    server.install_signal_handlers = lambda: None  # older uvicorn; newer ones restore handlers on exit
    task = asyncio.create_task(server.serve(sockets=[sock]), name="api")
    for _ in range(500):
        if server.started:
            break
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    return ApiServer(server, task, f"http://127.0.0.1:{port}")


# -- the events --------------------------------------------------------------------------------

@dataclass
class EventTarget:
    """Where the run's events go: a Kafka topic of the run's own, or a JSON-lines file."""

    source: str  # for the terminal and the report
    topic: str | None = None
    path: Path | None = None


async def event_target(settings: Settings, run_id: str, events: str | None, report: str) -> EventTarget:
    """Create the run's topic (with Kafka), or empty the JSON-lines file (without)."""
    if settings.kafka_bootstrap:
        topic = f"{settings.kafka_topic}.demo-{run_id}"
        await asyncio.to_thread(create_topic, settings.kafka_bootstrap, topic)
        return EventTarget(f"Kafka topic {topic} at {settings.kafka_bootstrap}", topic=topic)
    path = Path(events or Path(report).with_suffix(".events.jsonl"))
    path.unlink(missing_ok=True)
    return EventTarget(f"JSON-lines file {path}", path=path)


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    futures[topic].result(timeout=60)
