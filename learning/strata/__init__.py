"""StraTA-style reinforcement learning for the strategy model (the RL stage of README's "Retraining").

What decides *what* is learned lives here as small pure modules, each tested with hand-computed values:

- `sampling`    farthest-point sampling of N strategies out of σ·N candidates
- `embeddings`  the text embedders that sampling measures distance with (MiniLM offline, or hashing)
- `advantages`  top-δ strategy scores, two-level normalisation, low-variance group filtering, κ penalties
- `masking`     per-token loss masks and advantages for a rollout laid out as segments
- `loss`        PPO-clip with asymmetric clipping, token-mean, no KL; token entropy
- `judge`       the self-judgment pass that flags steps (rule-based, or a model behind the LLM port)
- `config`      `StrataConfig`, the method's knobs, and the ablation presets

The trainer, the replay environment and the command line build on these.
"""
