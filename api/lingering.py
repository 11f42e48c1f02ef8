"""uvicorn's h11 protocol with a deadline for the request head and a lingering close.

The head deadline: uvicorn closes an idle kept-alive connection after `timeout_keep_alive`, but it
has no deadline for a connection that never sends its request head, or sends it a byte at a time
(issue 40, H4: 256 such sockets held the server). Here a connection that has not finished its
request line and headers within `head_timeout_s` of opening, or of the first byte of a later request
on a kept-alive connection, is closed (nginx's `client_header_timeout`, whose default is 60 s; ours
is shorter because a hook's or a browser's head is sent in one write).

The lingering close, so that a refusal sent before the body reaches the client:

The webhook answers a wrong secret (401), a body too large (413) or too slow (408) before the body is
in, and closes the connection so that the rest is never waited for. A socket closed while its peer is
still sending makes the kernel answer the peer's next bytes with a reset, and a client that is still
writing its body sees "connection reset" instead of the answer, which it then often never reads
(measured: 3 of 100 senders streaming 5 MiB with a wrong secret, on a loaded 2-core machine). GitLab's
hook log would show a reset, not "401: wrong X-Gitlab-Token".

So when uvicorn closes a connection whose request body has not ended, the answer is followed by a FIN
(the client reads the answer, then the end), and what the client still sends is read and dropped for
at most `LINGER_S` before the socket is closed: nginx's `lingering_close`. Nothing is kept; a
lingering connection still counts against `limit_concurrency` until it closes.

Written against uvicorn 0.54's `H11Protocol`: its request cycles close the connection through the
protocol's `transport` attribute, which this protocol wraps, and its h11 connection is `conn`. Both
parts override only asyncio's protocol methods (`connection_made`, `data_received`,
`connection_lost`); uvicorn has no setting for either (encode/uvicorn discussions #1890 and #2041
ask for a header timeout), and drop this module when it does.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

LINGER_S = 2.0  # a client writing the rest of a 5 MiB body on a LAN is done well within it
# REVIEWLOOP_REQUEST_HEAD_TIMEOUT_S's default: GitLab and browsers send a head in one write, so
# a second would do; ten leaves room for a loaded machine and a slow link
HEAD_TIMEOUT_S = 10.0


class LingeringH11Protocol(H11Protocol):
    lingering = False
    head_timeout_s = HEAD_TIMEOUT_S
    head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # the cycles of this connection are built with `self.transport`: they close through the wrapper
        self.transport = LingeringTransport(self.transport, self)
        self.start_head_deadline()

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            return  # the rest of a body that was answered already: dropped unread
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:
            self.start_head_deadline()  # a later request's head has begun on a kept-alive connection
        else:
            self.stop_head_deadline()  # the head is in: the body's deadline is the route's

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_head_deadline()
        super().connection_lost(exc)

    def start_head_deadline(self) -> None:
        if self.head_timer is None:
            self.head_timer = asyncio.get_running_loop().call_later(self.head_timeout_s, self.head_too_late)

    def stop_head_deadline(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def head_too_late(self) -> None:
        self.head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()  # nothing was asked, so nothing is answered: the connection ends

    def request_body_unfinished(self) -> bool:
        return self.conn.their_state is h11.SEND_BODY


class LingeringTransport(asyncio.Transport):
    """The connection's transport, whose `close` lingers while the request body is unfinished."""

    def __init__(self, inner: asyncio.Transport, protocol: LingeringH11Protocol) -> None:
        super().__init__()
        self.inner = inner
        self.protocol = protocol
        self.timer: asyncio.TimerHandle | None = None

    def close(self) -> None:
        if self.protocol.lingering or not self.protocol.request_body_unfinished() or not self.inner.can_write_eof():
            # a second close (the client left, the linger ended, the server stops) or nothing to wait for
            if self.timer is not None:
                self.timer.cancel()
            self.inner.close()
            return
        if self.inner.is_closing():
            return
        self.protocol.lingering = True
        self.inner.write_eof()  # after the answer still buffered: the client reads it, then the end
        self.inner.resume_reading()  # uvicorn may have paused reading while the body waited
        self.timer = asyncio.get_running_loop().call_later(LINGER_S, self.inner.close)

    def is_closing(self) -> bool:
        # uvicorn must treat a lingering connection as closed: no keep-alive, no next request
        return self.protocol.lingering or self.inner.is_closing()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.inner.write(data)

    def abort(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.inner.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.inner.get_extra_info(name, default)

    def pause_reading(self) -> None:
        if not self.protocol.lingering:
            self.inner.pause_reading()

    def resume_reading(self) -> None:
        self.inner.resume_reading()

    def is_reading(self) -> bool:
        return self.inner.is_reading()

    def can_write_eof(self) -> bool:
        return self.inner.can_write_eof()

    def write_eof(self) -> None:
        self.inner.write_eof()

    def get_write_buffer_size(self) -> int:
        return self.inner.get_write_buffer_size()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.inner.set_write_buffer_limits(high, low)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.inner.get_protocol()
