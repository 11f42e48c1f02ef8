"""The LLM port's backends: OpenAI-compatible HTTP, in-process transformers, or none.

Import the backends from their modules (`agent.llm.openai_http`, `agent.llm.transformers_local`) or
build one with `agent.llm.factory.make_llm`; importing this package loads neither torch nor openai.
"""
