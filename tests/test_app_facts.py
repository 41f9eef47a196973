"""App facts are data: ``envs/<app>/app.yaml``, validated by ``spec/app.schema.json``, read by
``spec/appfacts.py`` (everything outside the twin) and by the twin's own loader — never Python lists."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import itbench_gym.spec
from conftest import PROJECT_ROOT
from itbench_gym.backends.sim.app import AppModel, AppSpecError
from itbench_gym.lang.sql import SqlError, inserted_rows
from itbench_gym.spec.appfacts import APP_SCHEMA_PATH, load_app_facts

APP = PROJECT_ROOT / "envs" / "astronomy-shop"
SRC = PROJECT_ROOT / "src" / "itbench_gym"


def _copy(tmp_path: Path, change: Any) -> Path:
    """A copy of the app whose app.yaml ``change(doc)`` edited."""
    app = tmp_path / "app"
    shutil.copytree(APP, app)
    doc = yaml.safe_load((app / "app.yaml").read_text())
    change(doc)
    (app / "app.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return app


def test_the_app_schema_lives_beside_the_scenario_schema_not_in_an_app() -> None:
    spec_package = Path(itbench_gym.spec.__file__).parent  # the installed package, wherever it lives
    assert APP_SCHEMA_PATH == spec_package / "app.schema.json" and (spec_package / "scenario.schema.json").is_file()
    assert not list((PROJECT_ROOT / "envs").glob("*/*.schema.json"))


def test_both_loaders_reject_what_the_schema_rejects(tmp_path: Path) -> None:
    app = _copy(tmp_path, lambda doc: doc["edge"].pop("metric"))
    assert any("edge" in p and "'metric' is a required property" in p for p in load_app_facts(app).problems)
    with pytest.raises(AppSpecError, match=r"app\.yaml: edge: 'metric' is a required property"):
        AppModel.load(app, seed=0)


def test_the_edge_and_its_traffic_series_come_from_the_data(tmp_path: Path) -> None:
    edge = load_app_facts(APP).edge
    assert edge is not None and edge.service == "frontend-proxy"
    assert edge.selector("shop") == 'traces_span_metrics_calls_total{namespace="shop",service_name="frontend-proxy",span_kind="SPAN_KIND_SERVER"}'
    assert edge.selector("shop", errors=True).endswith(',status_code="STATUS_CODE_ERROR"}')

    def other_edge(doc: dict[str, Any]) -> None:
        doc["edge"] = {"service": "frontend", "metric": "http_requests_total", "labels": {"job": "web"}, "error_labels": {"code": "500"}}

    moved = load_app_facts(_copy(tmp_path, other_edge)).edge
    assert moved is not None and moved.selector("x", errors=True) == 'http_requests_total{namespace="x",job="web",code="500"}'


def test_an_edge_must_be_a_service_and_leave_the_namespace_to_the_scenario(tmp_path: Path) -> None:
    def bad(doc: dict[str, Any]) -> None:
        doc["edge"]["service"] = "front-door"
        doc["edge"]["labels"]["namespace"] = "otel-demo"

    problems = load_app_facts(_copy(tmp_path, bad)).problems
    assert any("edge.service: 'front-door' is not one of the app's services" in p for p in problems)
    assert any("edge: the namespace label is the scenario's" in p for p in problems)


def test_example_actions_are_filled_with_the_scenarios_namespace(tmp_path: Path) -> None:
    facts = load_app_facts(APP)
    examples = facts.example_actions("shop")
    assert examples[0] == "kubectl get pods -n shop" and not any("$" in a or "otel-demo" in a for a in examples)
    bad = load_app_facts(_copy(tmp_path, lambda doc: doc["examples"].append("kubectl get pods -n $ns")))
    assert bad.examples == facts.examples and any("examples[6]: only $namespace may be filled in" in p for p in bad.problems)


def test_products_come_from_the_catalogue_configmap_in_its_order() -> None:
    model = AppModel.load(APP, seed=0)
    names = {m["metadata"]["name"] for m in model.manifests() if m["kind"] == "ConfigMap"}
    assert "product-catalog-products" not in names  # ITBench's chart has none: the catalogue is PostgreSQL's seed script
    seed = next(m for m in model.manifests() if m["kind"] == "ConfigMap" and m["metadata"]["name"] == "postgresql-init")
    script = seed["data"]["init.sql"]
    inserted = script[script.index("INSERT INTO catalog.products"):]
    ids = re.findall(r"^\s*\('([0-9A-Z]{10})'", inserted[:inserted.index(";\n")], re.M)
    assert model.products == tuple(ids) and len(ids) == 10


def test_a_json_catalogue_still_serves(tmp_path: Path) -> None:
    def json_catalogue(doc: dict[str, Any]) -> None:
        doc["catalog"] = {"config_map": "flagd-config", "key": "demo.flagd.json"}  # JSON, but no products in it

    with pytest.raises(AppSpecError, match="key demo.flagd.json: no products with an id"):
        AppModel.load(_copy(tmp_path, json_catalogue), seed=0)


def test_sql_the_catalogue_cannot_be_read_from_is_named() -> None:
    with pytest.raises(SqlError, match="row 2 has 1 values for 2 columns"):
        inserted_rows("INSERT INTO t.p (id, name) VALUES ('a', 'b'), ('c');", "t.p")
    with pytest.raises(SqlError, match="not a constant"):
        inserted_rows("INSERT INTO t.p (id) VALUES (now());", "t.p")
    with pytest.raises(SqlError, match="names no columns"):
        inserted_rows("INSERT INTO t.p VALUES ('a');", "t.p")
    rows = inserted_rows("CREATE USER u WITH PASSWORD 'x'; INSERT INTO other (id) VALUES ('z');"
                         "INSERT INTO t.p (id, n, gone) VALUES ('it''s', -2.5, NULL);", "t.p")
    assert rows == [{"id": "it's", "n": -2.5, "gone": None}]


@pytest.mark.parametrize(("change", "message"), [
    (lambda doc: doc["log_values"].pop("users"), r"uses \{email\}, which needs log_values.users"),
    (lambda doc: doc["log_values"].pop("categories"), r"uses \{category\}, which needs log_values.categories"),
    (lambda doc: doc["log_values"]["defaults"].pop("upstream"), r"uses \{upstream\}, which needs log_values.defaults.upstream"),
    (lambda doc: doc["log_values"]["defaults"].update(colour="red"), r"log_values.defaults: \['colour'\] are not context fields"),
    (lambda doc: doc.pop("catalog"), r"uses \{product\}, which needs catalog"),
    (lambda doc: doc["catalog"].update(config_map="no-such-map"), r"catalog.config_map: no ConfigMap 'no-such-map'"),
    (lambda doc: doc["catalog"].update(key="missing.sql"), r"catalog.key: ConfigMap postgresql-init has no key 'missing.sql'"),
    (lambda doc: doc["catalog"].update(table="catalog.nothing"), r"key init.sql: no rows inserted into catalog.nothing with an id"),
])
def test_log_templates_need_their_values_in_the_data(tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(AppSpecError, match=message):
        AppModel.load(_copy(tmp_path, change), seed=0)


def test_no_python_string_names_the_apps_facts() -> None:
    """Non-docstring string constants under ``src/`` name none of the app's facts: its namespace,
    edge service, flag ConfigMap and key, catalogue ConfigMap and key, or product ids."""
    facts = load_app_facts(APP)
    doc = yaml.safe_load((APP / "app.yaml").read_text())
    model = AppModel.load(APP, seed=0)
    assert facts.namespace and facts.edge and facts.flags
    names = {facts.namespace, facts.edge.service, facts.flags.config_map, facts.flags.key,
             doc["catalog"]["config_map"], doc["catalog"]["key"], *model.products}
    found = []
    for file in sorted(SRC.rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        found += [f"{file.relative_to(SRC)}:{node.lineno}: {name!r}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  for name in sorted(names) if name in node.value]
    assert not found, "app facts in Python (move them to envs/<app>/app.yaml):\n" + "\n".join(found)
