"""Byte relays between a Unix socket and TCP, run inside a relay container as
``python3 -c SCRIPT ...`` (standard library only: the relay image is the harness's base).

* :data:`TCP_TO_UNIX`: listens on TCP ``0.0.0.0:PORT`` and relays each connection to the Unix
  socket ``SOCK`` (the model gateway: agents on the instance's network reach the harness's
  server behind the socket). Arguments: ``SOCK PORT TTL``; prints ``relay ready``.
* :data:`UNIX_TO_TCP`: listens on the Unix socket ``SOCK`` (mode 0666) and relays each
  connection to ``HOST:PORT`` (the gateway tool route: the harness reaches a service on the
  instance's network through the socket). Arguments: ``SOCK HOST PORT TTL``; prints
  ``route relay ready``.

Both copy bytes both ways until each side ends (a client's end of input is passed on as
end of input), never read what they carry, and stop by themselves after ``TTL`` seconds: an
orphaned relay ends with the sandbox's lifetime.
"""

from __future__ import annotations

# What both relays share: the copy loop (read from r, write to w; at the end pass on the end
# of input, or close) and the handler that joins a client to a new upstream connection
# (``connect()``, which each script defines).
_COMMON = r"""async def pipe(r, w, half):
    try:
        while True:
            d = await r.read(65536)
            if not d:
                break
            w.write(d)
            await w.drain()
    except Exception:
        pass
    try:
        if half and w.can_write_eof():
            w.write_eof()
        else:
            w.close()
    except Exception:
        pass
async def handle(r, w):
    try:
        ur, uw = await connect()
    except Exception:
        w.close()
        return
    await asyncio.gather(pipe(r, uw, True), pipe(ur, w, False))
    uw.close()
"""

TCP_TO_UNIX = r"""
import asyncio, sys
SOCK = sys.argv[1]
def connect():
    return asyncio.open_unix_connection(SOCK)
""" + _COMMON + r"""async def main():
    srv = await asyncio.start_server(handle, "0.0.0.0", int(sys.argv[2]))
    print("relay ready", flush=True)
    async with srv:
        try:
            await asyncio.wait_for(srv.serve_forever(), float(sys.argv[3]))
        except asyncio.TimeoutError:
            pass  # the sandbox's lifetime is over: an orphaned relay ends by itself
asyncio.run(main())
"""

UNIX_TO_TCP = r"""
import asyncio, os, sys
SOCK, HOST, PORT, TTL = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
def connect():
    return asyncio.open_connection(HOST, PORT)
""" + _COMMON + r"""async def main():
    srv = await asyncio.start_unix_server(handle, SOCK)
    os.chmod(SOCK, 0o666)
    print("route relay ready", flush=True)
    async with srv:
        try:
            await asyncio.wait_for(srv.serve_forever(), TTL)
        except asyncio.TimeoutError:
            pass
asyncio.run(main())
"""
