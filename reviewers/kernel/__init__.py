"""The shared kernel: what every layer (reviewers, agent, learning, api) speaks, at the bottom layer.

- `errors`: the one error hierarchy of reviewloop (`ReviewloopError` and its children: input,
  LLM, platform, store, analyzer, training errors), each carrying its context and `retryable`.
- `contracts`: the values and ports that cross layers: the review context, plan items, findings,
  the repository config, and the `LLMPort` and `Workspace` protocols the layers above implement.

It sits under `reviewers/` because that is the bottom layer: nothing in it imports anything else of
ours, so every layer may import it.
"""
