"""The one error hierarchy of reviewloop.

It lives at the bottom layer so that every layer can raise and catch it::

    ReviewloopError                 carries context (project, mr_iid, head_sha) and `retryable`
    ├── InputError                  the user's input is wrong: one clear line, never retried
    │   ├── DiffParseError
    │   ├── RepositoryError         not a git repository, unknown revision
    │   └── ConfigError             a bad `.reviewloop.toml` or setting
    ├── LLMError                    the model could not give a usable answer
    │   ├── LLMUnavailableError     timeout, connection refused, 429/5xx after retries (retryable)
    │   ├── LLMOutputError          output failed validation twice (not retryable: fall back)
    │   └── LLMContextLengthError   the prompt and the answer do not fit the model's context (trim, retry once)
    │   └── LLMSchemaError          a JSON schema decoding cannot be constrained to (invalid, unsatisfiable)
    ├── PlatformError               GitLab (or another host) failed
    │   ├── PlatformUnavailableError    429/5xx past the client's retry budget (retryable)
    │   └── PositionRejectedError   GitLab refused a diff position (fall back to a note)
    ├── StoreError                  Postgres failed (retryable)
    ├── AnalyzerError               a static analyzer (ruff, bandit) failed or timed out on a file
    │   └── PythonSyntaxError       a changed Python file that no supported Python version reads
    └── TrainingError               a training or dataset step cannot go on (one clear line)

The job queue's and the graph's retry policies read `retryable`; the CLI prints `str(error)`.
"""

from __future__ import annotations


class ReviewloopError(Exception):
    """Base error: a message plus where it happened and whether trying again may help."""

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        project: str | int | None = None,
        mr_iid: int | None = None,
        head_sha: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.project = project
        self.mr_iid = mr_iid
        self.head_sha = head_sha
        if retryable is not None:
            self.retryable = retryable

    def __str__(self) -> str:
        where = []
        if self.project is not None:
            where.append(f"project {self.project}")
        if self.mr_iid is not None:
            where.append(f"!{self.mr_iid}")
        if self.head_sha:
            where.append(f"@{self.head_sha[:12]}")
        return f"{self.message} ({' '.join(where)})" if where else self.message


class InputError(ReviewloopError):
    """The caller's input is wrong; repeating the call cannot help."""


class DiffParseError(InputError):
    """A unified diff that does not parse."""


class RepositoryError(InputError):
    """A path that is not a git repository, or a revision it does not have."""


class ConfigError(InputError):
    """An invalid setting or `.reviewloop.toml`."""


class LLMError(ReviewloopError):
    """The model gave no usable answer."""


class LLMUnavailableError(LLMError):
    """The model server timed out, refused, or answered 429/5xx beyond the retry budget."""

    retryable = True


class LLMOutputError(LLMError):
    """The model's output failed schema validation on the first try and on the retry."""


class LLMContextLengthError(LLMError):
    """The request does not fit the model's context (vLLM's 400 "maximum context length is N tokens").

    Carries what the server said, when it said it: the context length and the prompt's size in the
    server's own tokens, so the caller can trim to fit and try once more.
    """

    def __init__(self, message: str, *, context_tokens: int | None = None, prompt_tokens: int | None = None) -> None:
        super().__init__(message)
        self.context_tokens = context_tokens
        self.prompt_tokens = prompt_tokens


class LLMSchemaError(LLMError):
    """A JSON schema that constrained decoding cannot use: it does not compile, or admits no answer.

    Raised before any token is generated, so a bad schema costs no model time and never hangs.
    """


class PlatformError(ReviewloopError):
    """The code host (GitLab) failed."""


class PlatformUnavailableError(PlatformError):
    """The code host answered 429/5xx or could not be reached beyond the client's retries."""

    retryable = True


class PositionRejectedError(PlatformError):
    """The code host refused a diff position; the reporter falls back to a plain note."""


class StoreError(ReviewloopError):
    """Postgres failed; the operation may succeed once the server is back."""

    retryable = True


class AnalyzerError(ReviewloopError):
    """A static analyzer could not run on a file (missing, timed out, unreadable output).

    A reviewer records it on the step and in its result and goes on with the next file.
    """


class PythonSyntaxError(AnalyzerError):
    """A Python file that no Python version the reader knows (3.0 to 3.15) parses, or whose newer
    syntax could not be brought to the running interpreter's tree.

    `what` names the syntax and where (`"invalid syntax at line 4: `def f(:`"`); `reason` is the
    words a review's `not_reviewed` entry carries for the file.
    """

    def __init__(self, what: str, *, path: str, line: int | None = None) -> None:
        super().__init__(f"{path}: {what}")
        self.what = what
        self.path = path
        self.line = line

    @property
    def reason(self) -> str:
        return f"parse error: {self.what}"


class TrainingError(ReviewloopError):
    """A dataset or training step cannot go on (too little data, a missing model, a corrupt directory)."""
