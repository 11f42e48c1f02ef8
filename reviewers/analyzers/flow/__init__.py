"""Interprocedural taint analysis of Python: values, the rules that name sources, sanitisers and
sinks, a flow-sensitive interpreter of one function, and summaries across the repository's modules.

Chosen over a kept engine: libcst's metadata gives scopes but no value flow, and the data-flow
libraries on PyPI either execute code or model no web frameworks. The interpreter here reads the
standard syntax tree, abstracts each value to the origins it carries (request data, a parameter, an
unknown value) with the sink classes each origin was cleared for, and is bounded everywhere.
"""
