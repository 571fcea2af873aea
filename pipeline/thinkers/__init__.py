"""Thinker backends: an OpenAI-compatible chat endpoint, or a vLLM chat model in process."""
