"""nginx as a node's log source: Debian's nginx, run as a plain process, writing one JSON line per request into the
node's log, as the testbed's replay writes it (its own write time `ts_nginx`, nginx's `$msec`), plus the `X-Sent`
header its client sent (the client's clock: a test's truth of when the line was written, whatever nginx's clock
says)."""

from __future__ import annotations

from pathlib import Path

from testbed.faketime import NGINX_ENV
from testbed.install import install_nginx
from testbed.pipeline import NodeLayout
from testbed.processes import Service

LOG_FORMAT = '{"ts_nginx":$msec,"sent_s":"$http_x_sent"}'
# The paper pipeline's access log: nginx's own `$request_id` (32 hex digits, one per request) is the ledger's key
# from nginx to the warehouse table (testbed/spark_sink.py).
REQUEST_LOG_FORMAT = ('{"ts_nginx":$msec,"request_id":"$request_id","method":"$request_method","uri":"$uri",'
                      '"status":$status,"bytes":$body_bytes_sent,"rt":$request_time,"sent_s":"$http_x_sent"}')

CONFIG = """worker_processes 1;
{env}
pid {work}/nginx.pid;
error_log {work}/error.log error;
events {{ worker_connections 256; }}
http {{
    log_format pipetune escape=json '{log_format}';
    access_log {log} pipetune;
    client_body_temp_path {work}/tmp; proxy_temp_path {work}/tmp; fastcgi_temp_path {work}/tmp;
    uwsgi_temp_path {work}/tmp; scgi_temp_path {work}/tmp;
    server {{
        listen 127.0.0.1:{port};
        location / {{ return 204; }}
    }}
}}
"""


def nginx_service(node: NodeLayout, port: int, env: dict[str, str] | None = None,
                  log_format: str = LOG_FORMAT) -> Service:
    """nginx logging into `node`'s log, listening on 127.0.0.1:`port`, its files under the node's home; `env` (a
    `testbed.faketime.FakeClock`'s) is handed on to its workers; `log_format` is its JSON access log line
    (`REQUEST_LOG_FORMAT` adds the request's id and fields)."""
    work = node.home / "nginx"
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    config = work / "nginx.conf"
    config.write_text(CONFIG.format(env="".join(f"env {name};\n" for name in NGINX_ENV), work=work,
                                    log=node.log_path, port=port, log_format=log_format))
    argv = (str(install_nginx()), "-p", str(work), "-c", str(config), "-e", str(work / "error.log"),
            "-g", "daemon off;")
    return Service(f"nginx-{node.name}", argv, work, env=env)
