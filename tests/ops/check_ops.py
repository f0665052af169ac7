#!/usr/bin/env python3
"""Checks ops/: the Prometheus rules and the Grafana dashboard against a live turnstiled.

Starts a single node and a one-voter cluster node (so the raft and signal-link metrics exist),
sends each a little traffic (so labelled series appear), reads /metrics from both, and fails when
an expression of the rules file or of the dashboard (panel targets, template queries) names a
metric neither serves. Also fails when the YAML or the JSON does not parse, when a rule lacks its
fields, or when the expression scanner misses a metric planted on purpose.

usage: check_ops.py TURNSTILED RULES.yml DASHBOARD.json
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

# PromQL words that are not metric names: functions are recognized by the '(' after them.
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan",
}
# Metrics Prometheus itself provides for every target.
PROMETHEUS_METRICS = {"up"}


def metric_names(expr):
    """The metric names an expression (PromQL, or a Grafana label_values() query) mentions."""
    text = re.sub(r'"(?:\\.|[^"\\])*"' + r"|'(?:\\.|[^'\\])*'", '""', expr)  # string literals
    text = re.sub(r"\{[^{}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range and subquery durations
    text = re.sub(r"\$\{?\w+\}?", " ", text)  # Grafana variables
    # label lists: sum by (a, b), on (x), group_left (y)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    # label_values(metric, label): the label is not a metric
    text = re.sub(r"\blabel_values\s*\(\s*([A-Za-z_:][\w:]*)\s*,\s*\w+\s*\)", r"(\1)", text)
    text = re.sub(r"(?<![\w:])\d+(\.\d+)?([eE][+-]?\d+)?", " ", text)  # numbers
    names = set()
    for match in re.finditer(r"[A-Za-z_:][\w:]*", text):
        word = match.group(0)
        rest = text[match.end():].lstrip()
        if rest.startswith("("):
            continue  # a function or an aggregation
        if word.lower() in KEYWORDS:
            continue
        names.add(word)
    return names


def served_names(exposition):
    """Every series name a /metrics text declares or serves (histograms: _bucket, _sum, _count)."""
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            parts = line.split()
            name, kind = parts[2], parts[3]
            names.add(name)
            if kind in ("histogram", "summary"):
                names.update({name + "_sum", name + "_count"})
            if kind == "histogram":
                names.add(name + "_bucket")
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def rule_expressions(path):
    with open(path) as f:
        document = yaml.safe_load(f)
    expressions = []
    groups = document.get("groups") if isinstance(document, dict) else None
    if not groups:
        sys.exit(f"{path}: no rule groups")
    for group in groups:
        for rule in group.get("rules", []):
            name = rule.get("alert") or rule.get("record")
            if not name or not isinstance(rule.get("expr"), str):
                sys.exit(f"{path}: a rule without a name or an expr: {rule}")
            if "alert" in rule and "severity" not in rule.get("labels", {}):
                sys.exit(f"{path}: alert {name} has no severity label")
            expressions.append((f"rule {name}", rule["expr"]))
    return expressions


def dashboard_expressions(path):
    with open(path) as f:
        dashboard = json.load(f)
    expressions = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if "expr" in target:
                    expressions.append((f"panel {panel.get('title')!r}", target["expr"]))
            walk(panel.get("panels", []))

    walk(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if variable.get("type") == "query" and isinstance(query, str):
            expressions.append((f"variable {variable.get('name')}", query))
    if not expressions:
        sys.exit(f"{path}: no panel targets")
    return expressions


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """One turnstiled with its HTTP API on a free loopback port; stopped by stop()."""

    def __init__(self, binary, extra_args, workdir):
        self.http_port = free_port()
        self.tcp_port = extra_args.pop("tcp_port", 0)
        args = [binary, "--host", "127.0.0.1", "--port", str(self.tcp_port),
                "--http-port", str(self.http_port), "--threads", "1", "--huge-pages=false"]
        args += extra_args["args"]
        self.log = open(os.path.join(workdir, f"node-{self.http_port}.log"), "w+")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={k: v for k, v in os.environ.items()
                                             if not k.startswith(("TURNSTILE_", "DFLOCKD_"))})

    def wait(self, predicate, what, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if predicate():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.log.seek(0)
        raise RuntimeError(f"turnstiled never got {what}; its log:\n{self.log.read()}")

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=5) as r:
            return r.read().decode()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def traffic(node):
    """An acquire and a release over TCP, and an HTTP 404, so the labelled series exist."""
    port = node.tcp_port
    if port == 0:
        node.log.flush()
        node.log.seek(0)
        found = re.search(r"listening on 127\.0\.0\.1:(\d+) \(tcp", node.log.read())
        port = int(found.group(1))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"l\nops-check\n5 10\n")
        reply = s.makefile().readline().split()
        s.sendall(f"r\nops-check\n{reply[1]}\n".encode())
        s.makefile().readline()
    try:
        node.get("/v1/locks/ops-check-none")
    except OSError:
        pass  # 404 is expected


def serve_and_read(binary):
    """The series names a live single node and a live one-voter cluster node serve, together."""
    workdir = tempfile.mkdtemp(prefix="turnstile-ops-")
    nodes = []
    try:
        single = Node(binary, {"args": []}, workdir)
        nodes.append(single)
        raft_port, client_port = free_port(), free_port()
        os.makedirs(os.path.join(workdir, "raft"))
        secret = os.path.join(workdir, "secret")
        with open(secret, "w") as f:
            f.write("ops-check-cluster-secret\n")
        cluster = Node(binary, {
            "tcp_port": client_port,
            "args": ["--raft-dir", os.path.join(workdir, "raft"), "--node-id", "1",
                     "--raft-addr", f"127.0.0.1:{raft_port}",
                     "--cluster-peers", f"1=127.0.0.1:{raft_port}@127.0.0.1:{client_port}",
                     "--cluster-bootstrap", "--cluster-secret-file", secret]}, workdir)
        nodes.append(cluster)
        single.wait(lambda: "turnstile_ready 1" in single.get("/metrics"), "ready")
        cluster.wait(lambda: "turnstile_raft_is_leader 1" in cluster.get("/metrics"), "leadership")
        served = set()
        for node in nodes:
            traffic(node)
            served |= served_names(node.get("/metrics"))
    finally:
        for node in nodes:
            node.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return served


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    binary, rules_path, dashboard_path = sys.argv[1:]

    # The scanner itself: a planted metric must be found, and the usual forms parsed.
    planted = metric_names('sum by (le, path) (rate(turnstile_planted_bucket{x="a{b}"}[5m]))'
                           ' / on (instance) group_left (job) up{job="$job"} > 1e3')
    if planted != {"turnstile_planted_bucket", "up"}:
        sys.exit(f"the expression scanner is broken: {planted}")

    expressions = rule_expressions(rules_path) + dashboard_expressions(dashboard_path)

    # A free port may be taken by another process before turnstiled binds it: try again.
    for attempt in range(3):
        try:
            served = serve_and_read(binary)
            break
        except RuntimeError as error:
            if attempt == 2:
                raise
            print(f"ops check: start failed, trying again: {error}", file=sys.stderr)

    missing = []
    checked = set()
    for where, expr in expressions:
        for name in sorted(metric_names(expr)):
            checked.add(name)
            if name not in served and name not in PROMETHEUS_METRICS:
                missing.append(f"{where}: {name} is not served by /metrics (expr: {expr})")
    if missing:
        print("\n".join(missing))
        sys.exit(1)
    print(f"ops check: {len(expressions)} expressions name {len(checked)} metrics, all served "
          f"(/metrics serves {len(served)} series names)")


if __name__ == "__main__":
    main()
