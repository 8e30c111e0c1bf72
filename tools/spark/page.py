"""The report's HTML page (Jinja2, autoescaped): a headline, then one section per table with
its plot. Kept apart from the Spark job (``tools.spark.report``) so the job only computes."""

from __future__ import annotations

from typing import Any, Dict, List

TEMPLATE = """<!doctype html>
<meta charset="utf-8">
<title>mqstore report: {{ headline.store }}</title>
<style>
body { font-family: sans-serif; margin: 2em; }
table { border-collapse: collapse; margin-bottom: 1em; }
td, th { border: 1px solid #ccc; padding: 2px 6px; font-size: 12px; }
td.n { text-align: right; }
</style>
<h1>mqstore journal report</h1>
<table>
{% for label, value in headline.rows %}<tr><th>{{ label }}</th><td>{{ value }}</td></tr>
{% endfor %}</table>
{% for section in sections %}
<h2>{{ section.title }}</h2>
{% if section.note %}<p>{{ section.note }}</p>{% endif %}
{% if section.plot %}<img src="{{ section.plot }}" alt="{{ section.title }}">{% endif %}
{% if section.rows %}
<table>
<tr>{% for c in section.columns %}<th>{{ c }}</th>{% endfor %}</tr>
{% for r in section.rows[:section.limit] %}<tr>{% for c in section.columns %}
<td{% if r[c] is number %} class="n"{% endif %}>{{ "-" if r[c] is none else r[c] }}</td>
{% endfor %}</tr>
{% endfor %}</table>
{% if section.rows|length > section.limit %}<p>({{ section.rows|length - section.limit }} more
rows in the Parquet table {{ section.table }})</p>{% endif %}
{% else %}<p>(none)</p>{% endif %}
{% endfor %}
"""


def section(title: str, rows: List[Dict[str, Any]], plot: str = "", table: str = "",
            note: str = "", limit: int = 50) -> Dict[str, Any]:
    """One section of the page: its rows (dicts with the same keys) and the plot file."""
    return {"title": title, "rows": rows, "columns": list(rows[0]) if rows else [],
            "plot": plot, "table": table, "note": note, "limit": limit}


def render(headline: List[Any], store: str, sections: List[Dict[str, Any]]) -> str:
    """The page's HTML; ``headline``: (label, value) pairs."""
    import jinja2
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True)
    return env.from_string(TEMPLATE).render(headline={"store": store, "rows": headline},
                                            sections=sections)
