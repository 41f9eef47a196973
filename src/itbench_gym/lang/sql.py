"""The rows an SQL script inserts into a table: an app's seed data (the Astronomy Shop's product
catalogue is PostgreSQL's ``init.sql``), read with sqlglot's PostgreSQL dialect.

Only ``INSERT INTO <table> (<columns>) VALUES (...), ...`` statements with constant values are read;
every other statement is passed over (sqlglot keeps the ones it has no grammar for, such as ``GRANT
... ON ALL TABLES IN SCHEMA``, as opaque commands, and says so through its logger, which is quietened
here).
"""

from __future__ import annotations

import logging
from typing import Any


class SqlError(ValueError):
    """The script cannot be read, or its rows for the table are not plain constants."""


def inserted_rows(script: str, table: str) -> list[dict[str, Any]]:
    """Each row ``script`` inserts into ``table`` (``schema.name`` as written), by column name, in order."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        statements = sqlglot.parse(script, read="postgres")
    except SqlglotError as exc:
        raise SqlError(f"not SQL the PostgreSQL dialect reads: {exc}") from None
    finally:
        logger.setLevel(level)
    rows: list[dict[str, Any]] = []
    for statement in statements:
        if not isinstance(statement, exp.Insert):
            continue
        target = statement.this
        named = target.this if isinstance(target, exp.Schema) else target
        if not isinstance(named, exp.Table) or ".".join(part.name for part in named.parts) != table:
            continue
        if not isinstance(target, exp.Schema) or not target.expressions:
            raise SqlError(f"INSERT INTO {table}: the statement names no columns")
        columns = [column.name for column in target.expressions]
        values = statement.expression
        if not isinstance(values, exp.Values):
            raise SqlError(f"INSERT INTO {table}: its rows come from a query, not VALUES")
        for n, row in enumerate(values.expressions, 1):
            items = row.expressions
            if len(items) != len(columns):
                raise SqlError(f"INSERT INTO {table}: row {n} has {len(items)} values for {len(columns)} columns")
            try:
                rows.append({column: item.to_py() for column, item in zip(columns, items, strict=True)})
            except ValueError:
                raise SqlError(f"INSERT INTO {table}: row {n} holds a value that is not a constant") from None
    return rows
