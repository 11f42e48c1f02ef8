"""The verifier's judgements, one concern per module, composed by `agent.verifier`.

- `evidence`: where a finding's evidence is at the head commit (exact, whitespace-normalised lines);
- `claims`: whether the code at head supports what a rule claims (the symbol is gone, no test
  mentions it); `sinks`: whether an injection sink receives data rather than constants;
- `duplicates`: one root cause reported by two analyzers becomes one finding;
- `feedback`: rules, paths and findings this project's people (not votes) have rejected;
- `judge`: the optional model judgment, shown the diff hunk and the evidence.
"""
