"""OpenAI's API: chat completions, completions, embeddings and models (routes), their bodies
(schemas), the request fields as Ember's (inbound) and the answers on OpenAI's wire (wire)."""
