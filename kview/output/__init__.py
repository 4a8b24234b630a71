"""Renderers of tables to text formats (terminal table, Markdown, CSV, TSV, JSON)."""
