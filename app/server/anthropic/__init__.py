"""Anthropic's Messages API: routes, schemas, inbound conversion, wire."""
